"""Conformance classes for the broken samples, importable by the battery's resume worker.

Not named `Test*`: pytest does not collect them; `test_broken_samples.py` runs
their batteries and checks which check failed.
"""

from __future__ import annotations

from antler.testing import PluginConformance
from tests.testing.conformance.samples import SAMPLES


def _conformance(plugin: str) -> type[PluginConformance]:
    name = "".join(part.title() for part in plugin.split("_")) + "Conformance"
    return type(name, (PluginConformance,), {
        "plugin": plugin, "extra_plugins": SAMPLES, "__module__": __name__,
        "__qualname__": name, "__doc__": f"The battery for the broken sample {plugin!r}."})


BROKEN: dict[str, type[PluginConformance]] = {
    check: _conformance(plugin) for check, plugin in {
        "non_blocking": "blocking_hook",
        "sync_async": "mismatched_hook",
        "retry_injection": "lossy_injection",
        "state_keys": "colliding_key",
        "manifest": "undeclared_hooks",
        "resume": "forgetful_counter",
        "history_work": "history_scanner",
        "hooks_run": "raising_wrapper",
        "request_mutation": "mutating_wrapper",
        "state_writes": "title_writer",
    }.items()}
"""The check each broken sample must fail (and no other), to its conformance class."""

globals().update({cls.__name__: cls for cls in BROKEN.values()})
