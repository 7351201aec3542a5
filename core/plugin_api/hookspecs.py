"""The platform hooks between Antler and its plugins, each documented where declared.

A plugin distribution registers an entry point in the `antler.plugins` group
whose target is a module (or object) implementing some of these hooks with
`@antler.hookimpl`. Built-ins use exactly the same hooks; every built-in
package's `__init__` is such a module.

Hooks are called by a pluggy `PluginManager` (see `antler.registry`). A hook
that has nothing to say returns None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from antler.chain import BuiltChain
    from antler.chain.config import OperatorConfig

    from .context import BuildContext
    from .manifest import Manifest
    from .spec import PluginSpec

PROJECT = "antler"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def antler_plugin_specs() -> list[PluginSpec] | Manifest | None:
    """Contribute plugin specs: a list of `PluginSpec`, or a whole `Manifest`.

    Called once per discovery. Keep it cheap and side-effect free: it runs for
    every installed plugin, enabled or not, so it must not import the
    middleware module (that is what `PluginSpec.factory` is for).

    Example::

        @hookimpl
        def antler_plugin_specs():
            return load_package_manifest("acme_antler")
    """


@hookspec
def antler_config_sections() -> dict[str, Any] | None:
    """Contribute top-level operator-config sections not owned by one plugin.

    Return a mapping of section name to a pydantic model class. Use it for
    settings several plugins read (models, sandbox, paths). A plugin's own
    section comes from its spec's `config_key`/`config_model` instead.
    """


@hookspec
def antler_validate_config(config: OperatorConfig) -> list[str] | None:
    """Check cross-section rules after every section validated on its own.

    Return a list of problems (each a full sentence saying what to change) or
    None. Example: a guardrail plugin that refuses to start without a provider.
    """


@hookspec
def antler_tools(context: BuildContext) -> list[Any] | None:
    """Contribute LangChain tools to the agent a chain is built for.

    Called once per chain build with the build context (chain name, runtime
    options, services). Only plugins that take part in the chain are asked.
    """


@hookspec
def antler_select_tools(context: BuildContext, tools: list[Any]) -> list[Any] | None:
    """Narrow the tools an agent is compiled with (return the kept ones, or None).

    Called once per agent build, after every tool is known, for each plugin
    that takes part in the chain, in chain order; each sees the previous one's
    selection. An authorization plugin uses it so the model never sees a tool
    the caller may not use. Tools a middleware registers itself (its `tools`
    attribute) are added by LangChain afterwards and are not passed here.
    """


@hookspec
def antler_prompt_sections(context: BuildContext) -> list[str] | str | None:
    """Contribute static sections to the agent's system prompt.

    :param context: the build context of the plugin's first participant in the
        chain (chain name, runtime options, services, its config section).

    Called once per agent build, after the chain is built, for each
    distribution with a plugin that takes part in the chain, in chain order.
    The sections are appended to the base system prompt, each separated by a
    blank line, in that order. Keep them static for a given build (an index of
    skills, the names of deferred tools): the system prompt is the prefix
    providers cache, and per-turn facts (the date) belong in messages.

    Example::

        @hookimpl
        def antler_prompt_sections(context):
            return "<skills>\n- data-report: summarizes uploaded tables\n</skills>"
    """


@hookspec
def antler_chain_resolved(chain: BuiltChain) -> None:
    """Observe a resolved and built chain (logging, metrics, policy checks).

    Raise `antler.errors.BuildError` to veto the chain; the message is shown
    to the operator as is.
    """
