"""The deferred_tool_filter plugin: its spec is in its plugin-manifest.yaml (see middleware.py).

It also contributes the system-prompt section that lists the deferred tools by
name (`antler_prompt_sections`), so the model knows what `tool_search` can load.
"""

from __future__ import annotations

from typing import Any

from antler.plugin_api import hookimpl, manifest_plugin_hook

antler_plugin_specs = manifest_plugin_hook(__name__)


@hookimpl
def antler_prompt_sections(context: Any) -> str | None:
    """``<available-deferred-tools>`` with the catalog's names, escaped; None without one."""
    from .middleware import prompt_section

    return prompt_section(context)
