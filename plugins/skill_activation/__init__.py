"""The skill_activation plugin: its spec comes from Antler's manifest (see middleware.py).

It also puts the index of the enabled skills into the system prompt, from the
`skills` registry service.
"""

from typing import Any

from antler.plugin_api import SKILLS, builtin_plugin_hook, hookimpl

antler_plugin_specs = builtin_plugin_hook("skill_activation")


@hookimpl
def antler_prompt_sections(context: Any) -> str | None:
    registry = context.services.items.get(SKILLS)
    if registry is None:
        return None
    try:
        return registry.index() or None
    except Exception:  # an unreadable skills folder must not stop the build
        return None
