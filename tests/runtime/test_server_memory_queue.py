"""Under LangGraph Server, memory's debounce waits in the shared store, not in a thread."""

from __future__ import annotations

from antler.plugin_api.context import MEMORY_QUEUE
from antler.plugins._lib.memory.updater import MemoryUpdateQueue, StoreMemoryQueue
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.server import build_server_agent


def test_a_served_agent_queues_memory_in_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTLER_HOME", str(tmp_path))
    monkeypatch.delenv("ANTLER_CONFIG", raising=False)
    served = build_server_agent(model=ScriptedChatModel(["x"]))
    try:
        assert isinstance(served.services.items[MEMORY_QUEUE], StoreMemoryQueue)
    finally:
        served.close()
    with create_agent(model=ScriptedChatModel(["x"]), base_dir=tmp_path / "local",
                      checkpointer="memory") as local:
        assert isinstance(local.services.items[MEMORY_QUEUE], MemoryUpdateQueue)
