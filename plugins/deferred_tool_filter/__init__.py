"""The deferred_tool_filter plugin: its spec comes from Antler's manifest (see middleware.py).

It also contributes the system-prompt section that lists the deferred tools by
name (`antler_prompt_sections`), so the model knows what `tool_search` can load.
"""

from __future__ import annotations

from typing import Any

from antler.plugin_api import builtin_plugin_hook, hookimpl

antler_plugin_specs = builtin_plugin_hook("deferred_tool_filter")


@hookimpl
def antler_prompt_sections(context: Any) -> str | None:
    """``<available-deferred-tools>`` with the catalog's names, escaped; None without one."""
    from .middleware import prompt_section

    return prompt_section(context)
