"""Every plugin Antler ships (built-ins and contrib) runs the conformance battery.

One `PluginConformance` class per plugin, generated from the installed
registry: a plugin added later is covered without touching this file. An
optional plugin is switched on with the settings `examples/all-optional.yaml`
gives its section (or `SETTINGS`, for those that need some and have none
there). A check a plugin genuinely fails is skipped by name in
`KNOWN_FAILURES`, with the reason. The checks that run a plugin's agents most
(`EXHAUSTIVE_CHECKS`) run in `make test` for the plugins the default config runs, and
in `make test-slow` for those with agents of their own.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import yaml

from antler.plugin_api.registry import BUILTIN_DISTRIBUTION, discover
from antler.testing import PluginConformance
from antler.testing.conformance import CHECKS

ALL_OPTIONAL: dict[str, Any] = yaml.safe_load(
    resources.files("antler").joinpath("examples/all-optional.yaml").read_text("utf-8"))

SETTINGS: dict[str, dict[str, Any]] = {
    "model_call_limit": {"run_limit": 10},
    "tool_call_limit": {"run_limit": 10},
    "model_fallback": {"models": ["scripted"]},
    "human_in_the_loop": {"interrupt_on": {"bash": True}},  # the scenario never calls bash
    "model_retry": {"initial_delay": 0, "jitter": False},
    "tool_retry": {"initial_delay": 0, "jitter": False},
}
"""Settings for plugins that need some to run and have none in all-optional.yaml."""

_SELECTOR = ("it asks a selection model for structured output (a 'tools' list), which the "
             "battery's scripted model does not give")
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "llm_tool_selector": {check: _SELECTOR for check in CHECKS},
    "pii": {"sync_async": "LangChain's PIIMiddleware: its hooks run differently under "
                          "ainvoke than under invoke (LangChain's own async forms)"},
    "human_in_the_loop": {"sync_async": "LangChain's HumanInTheLoopMiddleware: its hooks run "
                                        "differently under ainvoke than under invoke"},
    "model_call_limit": {
        "sync_async": "LangChain's ModelCallLimitMiddleware: its hooks run differently under "
                      "ainvoke than under invoke",
        "resume": "LangChain keeps `run_model_call_count` as run-scoped state, which starts "
                  "again when a stopped run resumes"},
    "tool_call_limit": {"sync_async": "LangChain's ToolCallLimitMiddleware: its async "
                                      "after_model writes the counts, the sync one nothing"},
    "model_fallback": {"retry_injection": "it answers any failed call from its fallback model "
                                          "(its job), so no failure reaches the outer retrier"},
    "todo": {"state_keys": "`todos` is the key of LangChain's TodoListMiddleware, which the "
                           "plugin builds on and whose write_todos tool writes it"},
    "uploads": {"state_keys": "`uploaded_files` is DeerFlow's key for the turn's uploads, "
                              "kept so its clients read the same state"},
    # Work that still grows with the thread (issue 20):
    "context_editing": {"history_work": "LangChain's ContextEditingMiddleware counts the "
                                        "tokens of the whole history on every model call"},
    "input_sanitization": {"history_work": "a run's first pass finds the messages written "
                                           "since the last one from the end of the thread back: "
                                           "a write far back (this scenario's) is found late"},
    "token_budget": {"history_work": "after_model looks at the usage of every earlier "
                                     "assistant message"},
    "view_image": {"history_work": "before_model and after_model look for injected images "
                                   "and answered calls over the whole history"},
}
"""plugin -> {check: why it is skipped}."""


EXHAUSTIVE_CHECKS = ("sync_async", "chains", "resume", "history_work")
"""The checks that run a class's agents most: every compile mode in each chain, sync and
async; a resume in another process; turns on threads of 2,000 messages. The plugins the
default config runs all share one set of agents and runs (`DEFAULT_CONFIG_GROUP`), so
`make test` runs these checks for each of them; a plugin the default config leaves off,
or that runs with settings of its own, builds agents of its own, so these checks of it
run in `make test-slow` (CI runs them), its other checks in `make test`."""

DEFAULT_CONFIG_GROUP = pytest.mark.xdist_group("conformance:default-config")
"""The classes of the plugins the default config runs: on one xdist worker, which builds
their shared agents and runs once (tests/conftest.py gives every other class its own)."""


def conformance_class(name: str, section: str, *,
                      default_config: bool = False) -> type[PluginConformance]:
    """The conformance class of the built-in plugin `name`, configured by `section`
    (`default_config`: the plugin runs in the default config and `section` sets nothing)."""
    title = "".join(part.title() for part in name.split("_"))
    class_name = f"Test{title}Conformance"
    settings = {**(ALL_OPTIONAL.get(section) or {}), **SETTINGS.get(name, {})}
    settings.pop("enabled", None)  # the battery switches the plugin on where it is off
    body: dict[str, Any] = {
        "plugin": name, "config": settings, "skip_checks": KNOWN_FAILURES.get(name, {}),
        "__module__": __name__, "__qualname__": class_name,
        "__doc__": f"The conformance battery for the built-in plugin {name!r}."}
    if default_config:
        body["pytestmark"] = [DEFAULT_CONFIG_GROUP]
    else:
        body.update({f"test_{check}": _in_make_test_slow(check) for check in EXHAUSTIVE_CHECKS})
    return type(class_name, (PluginConformance,), body)


def _in_make_test_slow(check: str) -> Any:
    """The battery's test of `check`, marked `slow`."""
    inherited = getattr(PluginConformance, f"test_{check}")

    def test(self: PluginConformance) -> None:
        __tracebackhide__ = True
        inherited(self)

    test.__name__ = test.__qualname__ = inherited.__name__
    test.__doc__ = inherited.__doc__
    return pytest.mark.slow(test)


def runs_in_the_default_config(spec: Any) -> bool:
    """Whether the default config runs the plugin, with no settings of its own: its agents
    are those of every other such plugin."""
    settings = {**(ALL_OPTIONAL.get(spec.section) or {}), **SETTINGS.get(spec.name, {})}
    settings.pop("enabled", None)
    return not settings and all(spec.enabled_for(chain) != "off" for chain in spec.chains)


def _builtin_specs() -> list[Any]:
    registry = discover()
    return [spec for name, spec in sorted(registry.specs.items())
            if (source := registry.sources.get(name)) is not None
            and source.distribution == BUILTIN_DISTRIBUTION]


for _spec in _builtin_specs():
    _cls = conformance_class(_spec.name, _spec.section,
                             default_config=runs_in_the_default_config(_spec))
    globals()[_cls.__name__] = _cls
