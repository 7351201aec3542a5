"""The skill_activation plugin: its spec is in its plugin-manifest.yaml (see middleware.py).

It also puts the index of the enabled skills into the system prompt, from the
`skills` registry service.
"""

from typing import Any

from antler.plugin_api import SKILLS, hookimpl, manifest_plugin_hook

antler_plugin_specs = manifest_plugin_hook(__name__)


@hookimpl
def antler_prompt_sections(context: Any) -> str | None:
    registry = context.services.items.get(SKILLS)
    if registry is None:
        return None
    try:
        return registry.index() or None
    except Exception:  # an unreadable skills folder must not stop the build
        return None
