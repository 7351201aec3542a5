"""Many runs of one thread at once, sync and async, on the in-memory backend.

Each run either works alone on the thread or gets the busy-thread behaviour the
README documents: `ThreadBusyError` without `wait`, a queued start with it. The
model call of every run counts how many runs are inside a model call at once,
and the thread's history must hold each run that worked as one whole turn.

The runs go in a child process bounded by `HANG_GUARD`: the failure this guards
against is a hang (async runs parked in lock waits filled the event loop's
executor, so the run holding the thread could not give it back), and a hung
child is killed and reported instead of hanging the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HANG_GUARD = 120
"""Seconds the child may take before it counts as hung (a guard, not a speed check)."""
REPO = Path(__file__).resolve().parents[3]
THREAD = "t-race"
USER = "u"
# More async waiters than the default executor has threads (min(32, cpus + 4)).
ASYNC_WAITING = 40
ASYNC_REFUSABLE = 8
SYNC_WAITING = 6
SYNC_REFUSABLE = 6


def race(base_dir: str) -> dict[str, Any]:
    """Start every run at once and report what each got (runs in the child)."""
    import asyncio
    import threading
    import time

    from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL, RuntimeOptions
    from antler.runtime.agent import create_agent
    from antler.runtime.models import ScriptedChatModel
    from antler.runtime.storage import ThreadBusyError

    inside = {"now": 0, "most": 0}
    guard = threading.Lock()

    def enter() -> None:
        with guard:
            inside["now"] += 1
            inside["most"] = max(inside["most"], inside["now"])

    def leave() -> None:
        with guard:
            inside["now"] -= 1

    class CountingModel(ScriptedChatModel):
        """Notes how many runs are in a model call at once, and stays in it a while."""

        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            enter()
            try:
                time.sleep(0.01)
                return super()._generate(*args, **kwargs)
            finally:
                leave()

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            enter()
            try:
                await asyncio.sleep(0.01)
                return await super()._agenerate(*args, **kwargs)
            finally:
                leave()

    total = ASYNC_WAITING + ASYNC_REFUSABLE + SYNC_WAITING + SYNC_REFUSABLE
    agent = create_agent(
        model=CountingModel(["done"] * total), checkpointer="memory", base_dir=base_dir,
        runtime=RuntimeOptions(user_id=USER),
        services={TITLE_MODEL: ScriptedChatModel(["t"] * total),
                  MEMORY_MODEL: ScriptedChatModel(["[]"] * total)})
    outcomes: dict[str, str] = {}
    start = threading.Event()

    def sync_run(name: str, wait: bool) -> None:
        start.wait()
        try:
            agent.invoke(name, thread_id=THREAD, user_id=USER, wait=wait)
            outcomes[name] = "ran"
        except ThreadBusyError:
            outcomes[name] = "busy"
        except Exception as error:  # reported, and the test says which
            outcomes[name] = f"{type(error).__name__}: {error}"

    async def async_run(name: str, wait: bool) -> None:
        try:
            await agent.ainvoke(name, thread_id=THREAD, user_id=USER, wait=wait)
            outcomes[name] = "ran"
        except ThreadBusyError:
            outcomes[name] = "busy"
        except Exception as error:
            outcomes[name] = f"{type(error).__name__}: {error}"

    async def all_async() -> None:
        runs = [async_run(f"async-wait-{i}", True) for i in range(ASYNC_WAITING)]
        runs += [async_run(f"async-try-{i}", False) for i in range(ASYNC_REFUSABLE)]
        start.set()
        await asyncio.gather(*runs)

    threads = [threading.Thread(target=sync_run, args=(f"sync-wait-{i}", True))
               for i in range(SYNC_WAITING)]
    threads += [threading.Thread(target=sync_run, args=(f"sync-try-{i}", False))
                for i in range(SYNC_REFUSABLE)]
    for thread in threads:
        thread.start()
    asyncio.run(all_async())
    for thread in threads:
        thread.join()
    messages = agent.graph.get_state(agent.run_config(THREAD)).values["messages"]
    turns = [(m.type, str(m.content)) for m in messages if m.type in ("human", "ai")]
    locks_left = agent.storage.locks.threads()
    agent.close()
    return {"outcomes": outcomes, "most_inside": inside["most"], "turns": turns,
            "locks_left": locks_left}


def test_many_sync_and_async_runs_of_one_thread_take_it_one_at_a_time(tmp_path):
    child = subprocess.run(
        [sys.executable, "-c",
         "import json, sys\n"
         "from tests.runtime.storage.test_thread_lock_races import race\n"
         "print(json.dumps(race(sys.argv[1])))", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD)
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    outcomes: dict[str, str] = report["outcomes"]

    assert report["most_inside"] == 1  # never two runs of the thread at once
    assert len(outcomes) == ASYNC_WAITING + ASYNC_REFUSABLE + SYNC_WAITING + SYNC_REFUSABLE
    # Runs that wait all get their turn; the others run or are told the thread is busy.
    assert {name: got for name, got in outcomes.items()
            if "-wait-" in name and got != "ran"} == {}
    assert {name: got for name, got in outcomes.items()
            if "-try-" in name and got not in ("ran", "busy")} == {}
    # The history holds every run that ran as one whole turn (its question, then its
    # answer), and no turn of a refused run.
    ran = sorted(name for name, got in outcomes.items() if got == "ran")
    turns = [tuple(turn) for turn in report["turns"]]
    assert sorted(text for kind, text in turns if kind == "human") == ran
    assert [kind for kind, _ in turns] == ["human", "ai"] * len(ran)
    assert report["locks_left"] == []
