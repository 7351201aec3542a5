"""`PluginConformance`: the pytest base class a plugin's test suite subclasses.

Each `test_<check>` method runs one check of `CHECKS` through the class's
`Battery`; `run_conformance` runs them without pytest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pytest

from .checks import Battery
from .rules import CHECKS, ConformanceFailure
from .scenario import DEFAULT_MESSAGE

__all__ = ["PluginConformance", "run_conformance"]


class PluginConformance:
    """Subclass it, naming your plugin, to run Antler's conformance battery against it.

    See this module's docstring for what a subclass may set. Each `test_*`
    method is one check of `CHECKS`.
    """

    plugin: ClassVar[str] = ""
    config: ClassVar[Mapping[str, Any]] = {}
    operator_config: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    scenario: ClassVar[Sequence[Any] | None] = None
    tools: ClassVar[Sequence[Any]] = ()
    message: ClassVar[str] = DEFAULT_MESSAGE
    runtime: ClassVar[Mapping[str, Any]] = {}
    extra_plugins: ClassVar[Sequence[tuple[str, Any]]] = ()
    skip_checks: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def battery(cls) -> Battery:
        """This class's battery (built once per class and `sys.path`)."""
        key = tuple(sys.path)
        cached = cls.__dict__.get("_antler_battery")
        if cached is None or cached[0] != key:
            cached = (key, Battery(cls))
            cls._antler_battery = cached  # type: ignore[attr-defined]
        return cached[1]

    def _check(self, name: str) -> None:
        __tracebackhide__ = True
        try:
            type(self).battery().check(name)
        except ConformanceFailure as failure:
            message = str(failure)
        else:
            return
        pytest.fail(message, pytrace=False)  # the rule and what differed say it all


def _test_method(check: str) -> Callable[[PluginConformance], None]:
    def test(self: PluginConformance) -> None:
        __tracebackhide__ = True
        self._check(check)

    test.__name__ = test.__qualname__ = f"test_{check}"
    test.__doc__ = f"Rule: {CHECKS[check].title} ({CHECKS[check].link})."
    return test


for _check in CHECKS:  # one test per check, named after it (`test_non_blocking`, ...)
    setattr(PluginConformance, f"test_{_check}", _test_method(_check))


def run_conformance(cls: type[PluginConformance], checks: Sequence[str] = tuple(CHECKS),
                    ) -> dict[str, tuple[str, str]]:
    """Each check's (outcome, message) for `cls`: "passed", "failed" or "skipped"."""
    outcomes: dict[str, tuple[str, str]] = {}
    for name in checks:
        try:
            cls.battery().check(name)
        except ConformanceFailure as failure:
            outcomes[name] = ("failed", str(failure))
        except pytest.skip.Exception as skipped:
            outcomes[name] = ("skipped", str(skipped))
        else:
            outcomes[name] = ("passed", "")
    return outcomes
