"""What the schema cannot see: checks of a validated config against the installed plugins.

An `always` plugin switched off, a `plugins.<name>` that names nothing
installed, an extension whose name or path is wrong or clashes: each is one
line naming the place in the file.
"""

from __future__ import annotations

from antler.errors import ReflectionError
from antler.plugin_api.diagnostics import did_you_mean
from antler.plugin_api.reflection import split_path
from antler.plugin_api.registry import PluginRegistry, canonical_name
from antler.plugin_api.spec import PluginSpec, check_plugin_name

from .operatorconfig import OperatorConfig
from .plugins import ExtensionEntry, extension_name
from .schema import section_owners

__all__ = ["extension_problems", "plugin_setting_problems", "silenced_entry_points",
           "toggle_problems"]


def silenced_entry_points(config: OperatorConfig, registry: PluginRegistry) -> list[str]:
    """Entry points the operator switched off, by their name or their distribution's.

    Their hooks are not called, unless a more specific `plugins.<plugin>` entry
    keeps one of their plugins on.
    """
    return [ep for ep, source in registry.entry_points.items()
            if config.switched_off(ep, source.distribution)
            and all(config.switched_off(*registry.names_of(registry.specs[name]))
                    for name in registry.entry_point_plugins.get(ep, []))]


def toggle_problems(config: OperatorConfig, registry: PluginRegistry) -> list[str]:
    """An `always` plugin's section that disables it, and a section that enables a plugin
    `plugins:` switches off (one of the two would be silently ignored)."""
    problems = []
    for key, owners in section_owners(registry).items():
        section = config.section(key)
        toggle = getattr(section, "enabled", None) if section is not None else None
        if toggle is True and config.was_set(key, "enabled"):
            for spec in owners:
                switch = config.switch(*registry.names_of(spec))
                if switch is not None and not switch[1]:
                    problems.append(
                        f"{config.locate(key, 'enabled')}: {key}.enabled: true contradicts "
                        f"{config.locate('plugins', switch[0], 'enabled')}: "
                        f"plugins.{switch[0]}.enabled: false, which switches plugin "
                        f"{spec.name!r} off; remove one of the two")
        if toggle is not False:
            continue
        for spec in owners:
            if spec.enabled == "always":
                why = spec.always_reason or "the platform depends on it in every chain"
                problems.append(
                    f"{config.locate(key, 'enabled')}: {key}.enabled: plugin {spec.name!r} "
                    f"cannot be disabled: {why}. Remove `enabled: false`."
                )
    return problems


def plugin_setting_problems(config: OperatorConfig, registry: PluginRegistry) -> list[str]:
    """`plugins.<name>` must name something installed (or a configured extension): a
    typo must not drop `required`.

    An `always` plugin cannot be switched off, by its own name or a broader one.
    """
    known = [*registry.load_names(),
             *(extension_name(entry) for entry in config.extensions.middlewares)]
    canonical = {canonical_name(name) for name in known}
    problems = [
        f"{config.locate('plugins', name)}: plugins.{name}: no installed plugin, entry point "
        f"or distribution is named {name!r}{did_you_mean(name, known)}; install it, fix the "
        "name, or remove the entry"
        for name in config.plugin_settings if canonical_name(name) not in canonical
    ]
    always: dict[str, list[PluginSpec]] = {}
    for spec in registry.specs.values():
        switch = config.switch(*registry.names_of(spec))
        if spec.enabled == "always" and switch is not None and not switch[1]:
            always.setdefault(switch[0], []).append(spec)
    for key, specs in always.items():
        where = f"{config.locate('plugins', key, 'enabled')}: plugins.{key}.enabled"
        if [spec.name for spec in specs] == [key]:
            why = specs[0].always_reason or "the platform depends on it in every chain"
            problems.append(f"{where}: plugin {key!r} cannot be switched off: {why}. Remove "
                            "`enabled: false`.")
        else:
            names = ", ".join(sorted(repr(spec.name) for spec in specs))
            problems.append(f"{where}: {key!r} holds plugins that cannot be switched off "
                            f"({names}: they are `always` enabled). Switch off single plugins "
                            "by name instead.")
    return problems


def extension_problems(config: OperatorConfig) -> list[str]:
    problems = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(config.extensions.middlewares):
        name = extension_name(entry)
        where = config.locate("extensions", "middlewares", index)
        try:
            split_path(entry if isinstance(entry, str) else entry.use)  # the name comes from it
            check_plugin_name(name)
        except (ValueError, ReflectionError) as exc:
            problems.append(f"{where}: extensions.middlewares[{index}]: {exc}")
        if isinstance(entry, ExtensionEntry) and entry.security_gate:
            skip = next((key for key, item in config.load_settings(name)
                         if item.on_error == "skip"), None)
            if skip is not None:
                problems.append(
                    f"{config.locate('plugins', skip, 'on_error')}: plugins.{skip}.on_error: "
                    f"skip would open extension {name!r}, which {where} marks "
                    "`security_gate: true`; remove `on_error: skip`")
        if name in seen:
            problems.append(
                f"{where}: extensions.middlewares[{index}]: name {name!r} is already used by "
                f"entry {seen[name]}; give one of them a distinct `name:`"
            )
        seen[name] = index
    return problems
