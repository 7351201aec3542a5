"""The sandbox plugin: its spec is in its plugin-manifest.yaml (see middleware.py).

It also contributes the sandbox tools (bash, ls, read_file, glob,
grep, write_file, str_replace) through the `antler_tools` hook. Importing this package stays
cheap: the tool module (and LangChain) is imported only when a chain that
includes the plugin is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from antler.plugin_api import hookimpl, manifest_plugin_hook

if TYPE_CHECKING:
    from antler.plugin_api import BuildContext

antler_plugin_specs = manifest_plugin_hook(__name__)


@hookimpl
def antler_tools(context: BuildContext) -> list[Any]:
    """The sandbox tools, sharing the provider the middleware registered in the services.

    While a tool-output budget is among the services, bash hands it a command's
    whole captured output; otherwise bash cuts it at ``max_output_bytes``.
    """
    from antler.plugin_api import OUTPUT_BUDGET_SERVICE

    from .middleware import path_layout, sandbox_config, sandbox_provider
    from .tools import build_tools

    config = sandbox_config(context.config)
    provider = sandbox_provider(context.services, config)
    services = context.services
    return build_tools(provider, path_layout(services), config,
                       budgeted=lambda: OUTPUT_BUDGET_SERVICE in services)
