"""Helpers shared by the llm_error_handling, token_usage and token_budget tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from antler.chain.config import parse_config
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import PluginRegistry
from antler.runtime.agent import AntlerAgent, create_agent
from antler.runtime.models import ScriptedChatModel

QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"
"""Title and memory would also call the scripted model; they have their own tests."""

MODES = [(fuse, use_async) for fuse in (True, False) for use_async in (False, True)]
"""(fuse, async) combinations every real-graph behaviour is checked under."""

MODE_IDS = [f"{'fused' if f else 'unfused'}-{'async' if a else 'sync'}" for f, a in MODES]


def guarded_agent(home: Path, registry: PluginRegistry, script: list[Any], *, config: str = "",
                  fuse: bool = True, sleeps: list[float] | None = None,
                  subagents: bool = False, **kwargs: Any) -> tuple[AntlerAgent, ScriptedChatModel]:
    """The real lead chain over a scripted model; retry waits are recorded in `sleeps`."""
    model = ScriptedChatModel(script)
    services = {"llm_retry_sleep": (sleeps if sleeps is not None else []).append}
    agent = create_agent(parse_config(QUIET + config, registry), model=model,
                         checkpointer="memory", base_dir=home, services=services,
                         registry=registry, fuse=fuse,
                         runtime=RuntimeOptions(subagents_enabled=subagents), **kwargs)
    return agent, model


def run(agent: AntlerAgent, text: str, *, use_async: bool, thread_id: str = "t1",
        **identity: Any) -> dict[str, Any]:
    """One turn through `invoke` or `ainvoke`; returns the final state."""
    if not use_async:
        return agent.invoke(text, thread_id=thread_id, **identity)
    return asyncio.run(agent.graph.ainvoke(
        agent.input(text), config=agent.run_config(thread_id),
        context=agent.context(thread_id, **identity)))
