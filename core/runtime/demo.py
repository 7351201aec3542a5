"""The demo: a harness's per-turn middleware timeline, played through the real lead chain.

No API key and no network: the lead agent, its subagent, the title model and
the memory extractor are scripted chat models. Everything else is real: the
resolved plugin chain, LangChain's `create_agent` graph, the local sandbox,
the thread directories and a SQLite checkpoint under the base directory.

Turn one: the user uploads two files; the thread's history holds a tool call
interrupted in an earlier run (repaired in the model request); the model runs
a shell command and delegates a task (the first tool use creates the thread
directories and acquires the sandbox); the final answer gets a title; the
exchange is queued for memory. Turn two: the model asks for clarification and
the run stops there.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antler.chain.config import OperatorConfig
from antler.plugin_api.context import MEMORY_MODEL, STORE, TITLE_MODEL, RuntimeOptions
from antler.plugin_api.registry import PluginRegistry
from antler.plugin_api.uploads import stage_upload

from .agent import AntlerAgent, create_agent
from .models import ScriptedChatModel
from .tracing import Tracer

THREAD_ID = "demo-thread"
USER_ID = "demo-user"

_SALES = "month,region,revenue\n2026-01,north,1200\n2026-02,north,1350\n2026-03,south,980\n"
_NOTES = "# Notes\nRevenue in the south dipped in March; check the campaign calendar.\n"

LEAD_SCRIPT: list[Any] = [
    # Turn one, first model call: a shell command and a delegated task, in parallel.
    {"content": "", "tool_calls": [
        {"name": "bash", "args": {"command": "wc -l /mnt/user-data/uploads/sales.csv"}},
        {"name": "task", "args": {"description": "summarize notes",
                                  "prompt": "Summarize the uploaded notes in one sentence."}},
    ]},
    # Turn one, second model call: the final answer.
    "The sales file has 3 data rows; revenue dipped in the south in March, which the notes "
    "attribute to the campaign calendar.",
    # Turn two: the model needs a decision from the user.
    {"content": "", "tool_calls": [
        {"name": "ask_clarification", "args": {
            "question": "Which region should the forecast cover?",
            "mode": "choice_with_other", "options": ["north", "south", "both"]}},
    ]},
]
SUBAGENT_SCRIPT: list[Any] = [
    "The notes say southern revenue dipped in March because of the campaign calendar.",
]
TITLE_SCRIPT: list[Any] = ["Sales data analysis"]
MEMORY_SCRIPT: list[Any] = ['["The user tracks monthly revenue by region."]']


def all_optional_config(registry: Any) -> OperatorConfig:
    """Every optional plugin of `registry` switched on, with settings the demo can run.

    `examples/all-optional.yaml` supplies the plugins that need settings (providers,
    thresholds); any other optional plugin, a third party's included, is enabled
    with `enabled: true`. Tests and benchmarks use this for "the full chain".
    """
    from importlib import resources

    from antler.chain.config import parse_config

    text = resources.files("antler").joinpath("examples/all-optional.yaml").read_text("utf-8")
    configured = parse_config(text, registry, source="examples/all-optional.yaml")
    sections = sorted({spec.section for spec in registry.specs.values()
                       if spec.enabled == "off" and configured.section(spec.section) is None})
    text += "".join(f"\n{section}: {{enabled: true}}" for section in sections)
    return parse_config(text, registry, source="examples/all-optional.yaml (+ every other "
                                               "optional plugin)")


@dataclass
class DemoResult:
    """What the demo did, for printing and for tests."""

    base_dir: Path
    chain: list[str]
    turns: list[dict[str, Any]] = field(default_factory=list)
    tracers: list[Tracer] = field(default_factory=list)
    thread_dir: Path | None = None
    checkpoint: Path | None = None
    memory: list[str] = field(default_factory=list)
    """What the memory plugin learned about the demo user, read back from the shared store."""
    store: str | None = None
    """Where the shared store is (its file, for the default SQLite store)."""


def run_demo(base_dir: Path, config: OperatorConfig | None = None,
             registry: PluginRegistry | None = None) -> DemoResult:
    """Play both turns against a fresh thread under `base_dir` (installed plugins by default)."""
    services = {
        TITLE_MODEL: ScriptedChatModel(TITLE_SCRIPT, model_name="scripted-title"),
        MEMORY_MODEL: ScriptedChatModel(MEMORY_SCRIPT, model_name="scripted-memory"),
    }
    tracer = Tracer()
    agent = create_agent(
        config, model=ScriptedChatModel(LEAD_SCRIPT, model_name="scripted-lead"),
        subagent_model=ScriptedChatModel(SUBAGENT_SCRIPT, model_name="scripted-subagent"),
        runtime=RuntimeOptions(subagents_enabled=True, user_id=USER_ID),
        services=services, base_dir=base_dir, tracer=tracer, registry=registry,
    )
    with agent:
        result = DemoResult(base_dir=agent.base_dir or base_dir, chain=agent.chain.names)
        _seed_interrupted_history(agent)
        files = _upload_two_files(agent)
        first = agent.invoke("Analyse the uploaded files, please.", thread_id=THREAD_ID,
                             user_id=USER_ID, files=files)
        result.turns.append(first)
        result.tracers.append(_snapshot(tracer))
        tracer.events.clear()
        second = agent.invoke("Now draft a revenue forecast.", thread_id=THREAD_ID,
                              user_id=USER_ID)
        result.turns.append(second)
        result.tracers.append(_snapshot(tracer))
        _flush_memory(agent)
        paths = agent.services.get("paths").thread(USER_ID, THREAD_ID)
        result.thread_dir = paths.user_data
        result.checkpoint = result.base_dir / "checkpoints.sqlite"
        store = agent.services.items.get(STORE)
        if store is not None:
            result.store = getattr(store, "description", None)
            # The memory plugin's namespace for the user: one item per fact.
            result.memory = [item.value.get("content", "") for item in store.search(
                ("antler", "memory", USER_ID), limit=100)]
    return result


def _seed_interrupted_history(agent: AntlerAgent) -> None:
    """An earlier exchange whose tool call never returned (the user pressed stop)."""
    from langchain_core.messages import AIMessage, HumanMessage

    agent.graph.update_state(
        agent.run_config(THREAD_ID),
        {"messages": [
            HumanMessage(content="List the files you can see.", id="earlier-question"),
            AIMessage(content="", id="earlier-call", tool_calls=[
                {"name": "ls", "args": {"path": "/mnt/user-data"}, "id": "call_interrupted"}]),
        ]},
    )


def _upload_two_files(agent: AntlerAgent) -> list[dict[str, Any]]:
    paths = agent.services.get("paths").thread(USER_ID, THREAD_ID)
    with tempfile.TemporaryDirectory() as scratch:
        records = []
        for name, text in (("sales.csv", _SALES), ("notes.md", _NOTES)):
            source = Path(scratch) / name
            source.write_text(text, encoding="utf-8")
            records.append(stage_upload(paths, source))
    return records


def _flush_memory(agent: AntlerAgent) -> None:
    queue = agent.services.items.get("memory_queue")
    if queue is not None:
        queue.flush()


def _snapshot(tracer: Tracer) -> Tracer:
    copy = Tracer()
    copy.events = list(tracer.events)
    return copy


def render_demo(result: DemoResult, *, kept: bool = True) -> str:
    """The demo's printed report: the chain, both timelines, and where things are
    (`kept` False: the base directory was temporary and is removed)."""
    from .tracing import TIMELINE_LEGEND

    lines = ["Antler demo: one thread, two turns, played through the real lead chain", "",
             "Lead chain: " + " -> ".join(result.chain), "", TIMELINE_LEGEND, ""]
    for number, (state, tracer) in enumerate(zip(result.turns, result.tracers, strict=True), 1):
        lines.append(f"=== Turn {number} timeline ===")
        lines.append(tracer.render())
        final = state["messages"][-1]
        lines.append(f"--- last message ({type(final).__name__}): {str(final.content)[:300]}")
        if state.get("title"):
            lines.append(f"--- thread title: {state['title']}")
        lines.append("")
    if kept:
        lines.append(f"Thread files:  {result.thread_dir}")
        lines.append(f"Checkpoint:    {result.checkpoint}")
    if result.memory:
        where = f" in the store {result.store}" if kept else ""
        lines.append(f"Memory:        {len(result.memory)} fact(s) about {USER_ID}{where}: "
                     + "; ".join(result.memory))
    if not kept:
        lines.append(f"The thread's files and checkpoints were in a temporary directory, now "
                     f"removed ({result.base_dir}); `antler demo --keep` or `--home DIR` "
                     "keeps them.")
    return "\n".join(lines)
