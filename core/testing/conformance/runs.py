"""Building the agents of a conformance class and running the scenario on them.

A run is the scenario on a thread of its own, in one chain, one way of
compiling it (`MODES`), sync or async, with or without injected faults, its
hooks recorded. Fault-free runs are shared by every class whose settings build
the same graphs; so are the resumed run (`resumed`, in the worker process) and
the history timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from antler.errors import AntlerError

from .blocking import blocking_calls_raise
from .plain import as_json, plain
from .plugin import ENTRY_POINT, RETRY_PLUGIN, ConformanceHooks
from .recording import ACTIVE_SLOT, Record, Recording, Slot
from .rules import CHECKS, ConformanceCrash, ConformanceError, ConformanceFailure
from .scenario import (
    DEFAULT_MODE,
    DEFAULT_SCENARIO,
    HISTORY_LENGTHS,
    HISTORY_TURNS,
    MODES,
    Script,
    earlier_turns,
    lookup_tool,
)
from .statekeys import base_state_keys
from .worker import worker

if TYPE_CHECKING:
    from antler.plugin_api.context import RuntimeOptions
    from antler.plugin_api.registry import PluginRegistry
    from antler.plugin_api.spec import PluginSpec

__all__ = ["Run", "Runs", "Setup"]

_RUNTIME_FLAGS = ("plan_mode", "supports_vision", "subagents_enabled")


@dataclasses.dataclass
class Run:
    """What one run of the scenario produced."""

    recording: Recording
    classes: dict[str, type]
    names: list[str]
    exclusions: dict[str, str]
    state: dict[str, Any] | None
    error: BaseException | None
    logs: list[str]

    def records(self, plugin: str) -> list[Record]:
        return self.recording.of(plugin)


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclasses.dataclass
class _Built:
    """One built agent a battery runs again and again, or why it did not build."""

    agent: Any
    slot: Slot
    home: str
    error: AntlerError | None = None


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything that decides the graphs of a battery, minus how each run is wired."""

    config: str
    runtime: str
    message: str
    scenario_key: str
    registry_key: tuple[Any, ...]


class Runs:
    """The agents of one conformance class and the runs of its scenario; agents, runs,
    resumes and timings are shared by every class of an equal setup."""

    _registries: ClassVar[dict[tuple[Any, ...], PluginRegistry]] = {}
    _runs: ClassVar[dict[tuple[Any, ...], Run]] = {}
    _agents: ClassVar[dict[tuple[Any, ...], _Built]] = {}
    _resumes: ClassVar[dict[tuple[Any, ...], dict[str, Any]]] = {}
    _histories: ClassVar[dict[tuple[Any, ...], dict[int, dict[tuple[str, str], float]] | str]] = {}

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.name = owner.plugin
        if not self.name:
            raise ConformanceError(f"{owner.__name__} names no plugin; set `plugin = \"...\"`")
        unknown = sorted(set(owner.skip_checks) - set(CHECKS))
        if unknown:
            from antler.plugin_api.diagnostics import did_you_mean

            hints = "".join(did_you_mean(name, CHECKS) for name in unknown)
            raise ConformanceError(f"{owner.__name__}.skip_checks names unknown checks "
                                   f"{unknown}{hints}; the checks are: {', '.join(CHECKS)}")
        self.scenario = list(owner.scenario if owner.scenario is not None else DEFAULT_SCENARIO)
        self.tools = [lookup_tool(), *owner.tools]
        self.registry = self._registry()
        self.spec = self._spec()
        self.runtime_options = self._runtime_options()
        self.config_text = self._config_text()
        self.setup = Setup(self.config_text, repr(sorted(self.runtime_options.items())),
                           owner.message, repr(self.scenario), self.registry_key)

    @property
    def registry_key(self) -> tuple[Any, ...]:
        return (tuple(sys.path), tuple(name for name, _ in self.owner.extra_plugins))

    def _registry(self) -> PluginRegistry:
        from antler.plugin_api.registry import discover

        key = self.registry_key
        if key not in self._registries:
            extra = [*self.owner.extra_plugins, (ENTRY_POINT, ConformanceHooks())]
            self._registries[key] = discover(extra_plugins=extra, refresh=True)
        return self._registries[key]

    def _spec(self) -> PluginSpec:
        spec = self.registry.specs.get(self.name)
        if spec is not None:
            return spec
        problems = [str(d) for d in self.registry.diagnostics
                    if d.plugin == self.name or self.name in d.cause]
        from antler.plugin_api.diagnostics import did_you_mean

        detail = "\n  ".join(problems) or (
            f"no installed plugin is named {self.name!r}"
            f"{did_you_mean(self.name, self.registry.specs)}; install its distribution "
            "(pip install -e .) so its `antler.plugins` entry point is found")
        raise ConformanceFailure("manifest", f"  {detail}")

    def _runtime_options(self) -> dict[str, Any]:
        options: dict[str, Any] = dict.fromkeys(_RUNTIME_FLAGS, True)
        conditions: dict[str, bool] = {}
        for condition, wanted in self.spec.when.items():
            if condition in _RUNTIME_FLAGS:
                options[condition] = wanted
            else:
                conditions[condition] = wanted
        options.update(self.owner.runtime)
        if conditions:
            options["conditions"] = {**conditions, **dict(options.get("conditions") or {})}
        return options

    def runtime(self, chain: str) -> RuntimeOptions:
        from antler.plugin_api.context import RuntimeOptions

        options = dict(self.runtime_options)
        if chain == "subagent":
            options["subagents_enabled"] = False
        return RuntimeOptions(**options)

    def _config_text(self) -> str:
        import yaml

        sections: dict[str, Any] = {key: dict(value) for key, value in
                                    self.owner.operator_config.items()}
        for chain in self.spec.chains:
            section = self.spec.section_for(chain)
            body = {**dict(self.owner.config), **sections.get(section, {})}
            if self.spec.enabled_for(chain) == "off":
                body.setdefault("enabled", True)
            if body:
                sections[section] = body
        return yaml.safe_dump(sections, sort_keys=True) if sections else ""

    def chains(self) -> list[str]:
        return [chain for chain in ("lead", "subagent") if chain in self.spec.chains]

    @property
    def primary(self) -> str:
        """The chain the single-chain checks run in: lead, unless the plugin is subagent-only."""
        return self.chains()[0]

    def operator_config(self, extra: str = "") -> Any:
        from antler.chain.config import parse_config

        text = self.config_text + extra
        return parse_config(text, self.registry, f"<{self.owner.__name__} config>")

    def create(self, slot: Slot, home: str, *, chain: str | None = None,
               mode: str = DEFAULT_MODE,
               script: Script | None = None, retry: bool = False,
               checkpointer: Any = "memory", durability: str = "sync") -> Any:
        """A real agent of the installed plugins, its hooks recorded into `slot`
        (`durability`: LangGraph's, when its checkpoints are saved)."""
        from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL
        from antler.runtime.agent import create_agent
        from antler.runtime.models import ScriptedChatModel

        chain = chain or self.primary
        config = self.operator_config(f"{RETRY_PLUGIN}: {{enabled: true}}\n" if retry else "")
        script = script or Script(self.scenario, retry=retry)
        services = {TITLE_MODEL: ScriptedChatModel(["A conformance title"] * 1000),
                    MEMORY_MODEL: ScriptedChatModel(["{}"] * 1000)}
        token = ACTIVE_SLOT.set(slot)
        try:
            return create_agent(config, chain=chain, model=script.model(), tools=self.tools,
                                checkpointer=checkpointer, runtime=self.runtime(chain),
                                services=services, registry=self.registry, base_dir=home,
                                fuse=MODES[mode]["fuse"], durability=durability,
                                fuse_into_model=MODES[mode]["fuse_into_model"])
        finally:
            ACTIVE_SLOT.reset(token)

    def built(self, chain: str, mode: str, retry: bool) -> _Built:
        """The agent for these settings, built once per setup and kept for the session."""
        key = (self.setup, chain, mode, retry)
        if key not in self._agents:
            home = os.path.realpath(tempfile.mkdtemp(prefix="antler-conformance-"))
            slot = Slot()
            try:
                agent = self.create(slot, home, chain=chain, mode=mode, retry=retry)
            except AntlerError as exc:  # the chain does not build: every check says why
                self._agents[key] = _Built(None, slot, home, exc)
            else:
                self._agents[key] = _Built(agent, slot, home)
            _close_at_exit()
        return self._agents[key]

    def run(self, *, chain: str | None = None, mode: str = DEFAULT_MODE,
            use_async: bool = False, retry: bool = False,
            faults: Mapping[str, set[str]] | None = None, scan: Sequence[str] = ()) -> Run:
        """One run of the scenario on its own thread; fault-free runs are shared.

        `chain` defaults to the plugin's primary chain.
        """
        chain = chain or self.primary
        key = (self.setup, chain, mode, use_async, retry)
        shared = not faults and not scan
        if shared and key in self._runs:
            return self._runs[key]
        built = self.built(chain, mode, retry)
        recording = Recording(built.home, {k: set(v) for k, v in (faults or {}).items()})
        if built.error is not None:
            return Run(recording, {}, [self.name], {}, None, built.error, [])
        built.slot.recording = recording
        capture = _LogCapture()
        audit = logging.getLogger("antler.audit.isolation")
        audit.addHandler(capture)
        state: dict[str, Any] | None = None
        error: BaseException | None = None
        try:
            state = self._invoke(built.agent, str(uuid.uuid4()), use_async, scan)
        except Exception as caught:
            error = caught
        finally:
            audit.removeHandler(capture)
            built.slot.recording = Recording("")
        chain_built = built.agent.chain
        result = Run(recording, dict(built.slot.classes), chain_built.names,
                     {name: why.reason for name, why in chain_built.plan.excluded.items()},
                     state, error, capture.lines)
        if shared:
            self._runs[key] = result
        return result

    def _invoke(self, agent: Any, thread: str, use_async: bool,
                scan: Sequence[str] = ()) -> dict[str, Any]:
        message = self.owner.message
        run_id = str(uuid.uuid4())
        if not use_async:
            return dict(agent.invoke(message, thread_id=thread, run_id=run_id))

        async def go() -> dict[str, Any]:
            with blocking_calls_raise(scan):
                return dict(await agent.graph.ainvoke(
                    agent.input(message), config=agent.run_config(thread),
                    context=agent.context(thread, run_id=run_id)))

        return asyncio.run(go())

    def resumed(self) -> dict[str, Any]:
        """Stop a run at its second model call here, resume it in the worker process.

        Shared by every class with this setup: the worker reports every plugin's hooks.
        """
        key = (self.setup, self.primary)
        if key in self._resumes:
            return self._resumes[key]
        thread = str(uuid.uuid4())
        with tempfile.TemporaryDirectory(prefix="antler-conformance-resume-") as home:
            home = os.path.realpath(home)
            agent = self.create(Slot(), home, checkpointer="sqlite",
                                script=Script(self.scenario, crash_at=1))
            try:
                agent.invoke(self.owner.message, thread_id=thread, run_id=thread)
            except ConformanceCrash:
                result = worker().resume(self.owner, home, thread)
            except Exception as exc:
                result = {"error": f"the run to be resumed failed before it was stopped: "
                                   f"{type(exc).__name__}: {exc}"}
            else:
                result = {"error": "the run never reached a second model call, so there was "
                                   "nothing to resume; give a scenario whose first turn calls "
                                   "a tool"}
            finally:
                agent.close()
        self._resumes[key] = result
        return result

    def resume_here(self, home: str, thread: str) -> dict[str, Any]:
        """Resume the stopped run saved under `home` (in the worker process)."""
        slot = Slot()
        slot.recording = Recording(home)
        agent = self.create(slot, home, checkpointer="sqlite")
        try:
            with agent.hold(thread):
                state = agent.graph.invoke(None, config=agent.run_config(thread),
                                           context=agent.context(thread, run_id=thread))
            names = agent.chain.names
        finally:
            agent.close()
        records: dict[str, list[Any]] = {}
        for record in slot.recording.records:
            records.setdefault(record.plugin, []).append(list(record.key()))
        own = {key: plain(value, home) for key, value in dict(state).items()
               if key not in base_state_keys()}
        return as_json({"names": names, "records": records, "state": own})

    def history_timings(self) -> dict[int, dict[tuple[str, str], float]] | str:
        """Per history length: each (plugin, hook)'s median CPU ms per turn, or what failed.

        Shared by every class with this setup: each plugin's hooks are timed.
        """
        key = (self.setup, self.primary)
        if key not in self._histories:
            self._histories[key] = self._time_histories()
        return self._histories[key]

    def _time_histories(self) -> dict[int, dict[tuple[str, str], float]] | str:
        import statistics

        result: dict[int, dict[tuple[str, str], float]] = {}
        for length in HISTORY_LENGTHS:
            turns: list[dict[tuple[str, str], float]] = []
            with tempfile.TemporaryDirectory(prefix="antler-conformance-history-") as home:
                home = os.path.realpath(home)
                slot = Slot()
                try:
                    # Saved once per turn, not after every step: the hooks' CPU is what
                    # is timed, and step checkpoints of 2,000 messages cost seconds.
                    agent = self.create(slot, home, script=Script(self.scenario,
                                                                   since_user=True),
                                        durability="exit")
                except AntlerError as exc:
                    return f"the chain does not build: {exc}"
                thread = str(uuid.uuid4())
                try:
                    agent.graph.update_state(agent.run_config(thread),
                                             {"messages": earlier_turns(length)},
                                             as_node="model")
                    for turn in range(HISTORY_TURNS + 1):  # the first one is not timed
                        slot.recording = Recording(home, timed=True)
                        agent.invoke(self.owner.message, thread_id=thread,
                                     run_id=str(uuid.uuid4()))
                        if turn:
                            turns.append(slot.recording.cpu)
                except Exception as exc:
                    return (f"a turn on a thread of {length} earlier messages failed: "
                            f"{type(exc).__name__}: {exc}")
                finally:
                    slot.recording = Recording("")
                    agent.close()
            hooks = set().union(*turns)
            result[length] = {hook: statistics.median(t.get(hook, 0.0) for t in turns) * 1000
                              for hook in hooks}
        return result


def _close_at_exit() -> None:
    """Close every agent the batteries built (sandboxes, memory queues) when Python exits."""
    if not _CLOSER:
        import atexit

        _CLOSER.append(atexit.register(_close_agents))


_CLOSER: list[Any] = []


def _close_agents() -> None:
    import shutil

    for built in Runs._agents.values():
        if built.agent is not None:
            with contextlib.suppress(Exception):
                built.agent.close()
        shutil.rmtree(built.home, ignore_errors=True)
    Runs._agents.clear()
