"""Blocking calls in a plugin's async code: found with `blockbuster` while a run goes on."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from . import recording
from .recording import HANDLER

if TYPE_CHECKING:
    from antler.plugin_api.spec import PluginSpec

__all__ = ["blocking_calls_raise", "plugin_packages"]

_RECORDING_FILE = f"testing/conformance/{os.path.basename(recording.__file__)}"
"""Where the recorded wrap hooks' handler is defined (blockbuster matches the file's end)."""


def plugin_packages(spec: PluginSpec, cls: type) -> list[str]:
    """The packages whose code counts as the plugin's: its factory's and its class's."""
    factory = spec.factory.split(":")[0]
    package = getattr(sys.modules.get(factory), "__package__", None) or factory
    return sorted({package, cls.__module__})


@contextlib.contextmanager
def blocking_calls_raise(scan: Sequence[str]) -> Iterator[None]:
    """Blocking calls made from `scan`'s code on the event loop raise `BlockingError`.

    Calls made below a recorded wrap hook's handler (inner plugins, the model,
    a tool) are let through: they are not the wrapping plugin's.
    """
    if not scan:
        yield
        return
    from blockbuster import BlockBuster

    buster = BlockBuster(list(scan))
    for function in buster.functions.values():
        function.can_block_in(_RECORDING_FILE, {HANDLER})
    buster.activate()
    try:
        yield
    finally:
        buster.deactivate()
