"""Conformance classes for the broken samples, importable by the battery's resume worker.

Not named `Test*`: pytest does not collect them; `test_broken_samples.py` runs
their batteries and checks which check failed.
"""

from __future__ import annotations

from antler.testing import PluginConformance
from tests.conformance.samples import SAMPLES


class BlockingHookConformance(PluginConformance):
    plugin = "blocking_hook"
    extra_plugins = SAMPLES


class MismatchedHookConformance(PluginConformance):
    plugin = "mismatched_hook"
    extra_plugins = SAMPLES


class LossyInjectionConformance(PluginConformance):
    plugin = "lossy_injection"
    extra_plugins = SAMPLES


class CollidingKeyConformance(PluginConformance):
    plugin = "colliding_key"
    extra_plugins = SAMPLES


class UndeclaredHooksConformance(PluginConformance):
    plugin = "undeclared_hooks"
    extra_plugins = SAMPLES


BROKEN = {
    "non_blocking": BlockingHookConformance,
    "sync_async": MismatchedHookConformance,
    "retry_injection": LossyInjectionConformance,
    "state_keys": CollidingKeyConformance,
    "manifest": UndeclaredHooksConformance,
}
"""The check each broken sample must fail (and no other)."""
