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
    from antler.plugin_api import OUTPUT_BUDGET_SERVICE, PATHS, PathLayout

    from .config import SandboxConfig
    from .middleware import sandbox_provider
    from .tools import build_tools

    config = context.plugin_config(SandboxConfig)
    services = context.services
    provider = sandbox_provider(services, config)
    return build_tools(provider, services.typed(PATHS, PathLayout), config,
                       budgeted=lambda: OUTPUT_BUDGET_SERVICE in services)
