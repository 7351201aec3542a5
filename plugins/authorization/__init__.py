"""The authorization plugin: its spec is in its plugin-manifest.yaml (see middleware.py).

It also implements layer 1 at build time, `antler_select_tools`: the agent is
compiled only with the tools the build principal may use. Importing this
package stays cheap: the middleware module (and LangChain) is imported only
when a chain that includes the plugin is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from antler.plugin_api import hookimpl, manifest_plugin_hook

if TYPE_CHECKING:
    from antler.plugin_api import BuildContext

antler_plugin_specs = manifest_plugin_hook(__name__)


@hookimpl
def antler_select_tools(context: BuildContext, tools: list[Any]) -> list[Any]:
    """Keep the tools the provider allows for the build's user and default role."""
    from .middleware import select_tools

    return select_tools(context, tools)
