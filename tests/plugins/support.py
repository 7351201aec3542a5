"""Helpers shared by the plugin tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from antler.plugin_api.context import MEMORY_MODEL, TITLE_MODEL
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel


def make_agent(home: Path, script: list[Any], **kwargs: Any) -> tuple[Any, ScriptedChatModel]:
    """The real chain of the installed plugins over a scripted model.

    Plugins that call a model of their own (title, memory) get their own scripted
    models, so `script` is only the agent's turns.
    """
    model = ScriptedChatModel(script)
    services = {TITLE_MODEL: ScriptedChatModel(["A title"] * 5),
                MEMORY_MODEL: ScriptedChatModel(["{}"] * 5), **kwargs.pop("services", {})}
    kwargs.setdefault("checkpointer", "memory")
    agent = create_agent(model=model, base_dir=home, services=services, **kwargs)
    return agent, model

