"""Every plugin Antler ships (built-ins and contrib) runs the conformance battery.

One `PluginConformance` class per plugin, generated from the installed
registry: a plugin added later is covered without touching this file. An
optional plugin is switched on with the settings `examples/all-optional.yaml`
gives its section. A check a plugin genuinely fails is skipped by name in
`KNOWN_FAILURES`, with the reason.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from antler.plugin_api.registry import BUILTIN_DISTRIBUTION, discover
from antler.testing import PluginConformance

ALL_OPTIONAL: dict[str, Any] = yaml.safe_load(
    resources.files("antler").joinpath("examples/all-optional.yaml").read_text("utf-8"))

KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "todo": {"state_keys": "`todos` is the key of LangChain's TodoListMiddleware, which the "
                           "plugin builds on and whose write_todos tool writes it"},
    "uploads": {"state_keys": "`uploaded_files` is DeerFlow's key for the turn's uploads, "
                              "kept so its clients read the same state"},
}
"""plugin -> {check: why it is skipped}."""


def conformance_class(name: str, section: str) -> type[PluginConformance]:
    """The conformance class of the built-in plugin `name`, configured by `section`."""
    title = "".join(part.title() for part in name.split("_"))
    class_name = f"Test{title}Conformance"
    settings = dict(ALL_OPTIONAL.get(section) or {})
    settings.pop("enabled", None)  # the battery switches the plugin on where it is off
    return type(class_name, (PluginConformance,), {
        "plugin": name, "config": settings, "skip_checks": KNOWN_FAILURES.get(name, {}),
        "__module__": __name__, "__qualname__": class_name,
        "__doc__": f"The conformance battery for the built-in plugin {name!r}."})


def _builtin_specs() -> list[Any]:
    registry = discover()
    return [spec for name, spec in sorted(registry.specs.items())
            if (source := registry.sources.get(name)) is not None
            and source.distribution == BUILTIN_DISTRIBUTION]


for _spec in _builtin_specs():
    _cls = conformance_class(_spec.name, _spec.section)
    globals()[_cls.__name__] = _cls
