"""Turning recording on for one agent build (`create_agent(record=...)`).

Kept out of `antler.runtime.agent` so the build reads as before: one call
before the chain is built (the models that will be called report to the
recorder) and one after the graph is compiled (its runs do too).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from antler.plugin_api.context import MEMORY_MODEL, MODEL_CATALOG, TITLE_MODEL, Services

from .recorder import Recorder, record_settings

__all__ = ["attach_graph", "open_recorder"]


def open_recorder(record: Any, config: Any, base_dir: Path, model: Any, runtime: Any,
                  services: Services) -> Recorder | None:
    """The recorder `record` asks for (None: recording is off), with the side-call models
    in `services` (title, memory) watched; the caller watches the agent's own models."""
    settings = record_settings(record, config)
    if settings is None:
        return None
    recorder = Recorder(settings, config=config, base_dir=base_dir, model=model,
                        runtime=runtime)
    catalog = services.items.get(MODEL_CATALOG)
    for service in (TITLE_MODEL, MEMORY_MODEL):
        reference = services.items.get(service)
        if reference is None:
            continue
        if isinstance(reference, str) and catalog is not None:
            with contextlib.suppress(Exception):  # the plugin reports it, if it uses it
                reference = catalog.resolve(reference)
        services.items[service] = recorder.watch(reference)
    return recorder


def attach_graph(graph: Any, recorder: Recorder, chain_names: list[str]) -> Any:
    """`graph`, whose runs report to `recorder`."""
    recorder.chain = list(chain_names)
    recorder.graph_name = getattr(graph, "name", None)
    return graph.with_config(callbacks=[recorder])
