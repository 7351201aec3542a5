"""The platform hooks between Antler and its plugins, each documented where declared.

A plugin distribution registers an entry point in the `antler.plugins` group
whose target is a module (or object) implementing some of these hooks with
`@hookimpl` (`antler.plugin_api.hookimpl`). Built-ins use exactly the same hooks; every built-in
package's `__init__` is such a module.

Every hook is called through pluggy, one entry point at a time
(`PluginRegistry.ask` and `call_one`, with `PluginManager.subset_hook_caller`),
so an implementation may take any subset of the arguments a spec lists, by name. A
hook that has nothing to say returns None, and pluggy leaves None out of the
results. No hook is `firstresult`: where one answer per plugin is wanted, the
platform calls that plugin's implementation alone.

Which plugins are asked:

- discovery hooks (`antler_plugin_specs`) ask every entry point once, alone,
  when it is registered;
- config hooks (`antler_config_sections`, `antler_validate_config`) ask every
  registered entry point, except, for validation, those the operator switched
  off (`plugins: {NAME: {enabled: false}}` with the entry point's or the
  distribution's name);
- build hooks (`antler_tools`, `antler_select_tools`, `antler_prompt_sections`)
  ask only the entry points with a plugin in the chain being built, each
  alone with its own build context;
- `antler_chain_resolved` asks every entry point not switched off.

A hook that raises becomes a load diagnostic naming its distribution, and what
it would have contributed is left out; when the distribution is required (Antler's
own, or marked `plugins: {NAME: {required: true}}`) the command stops with it.
Two exceptions: an `AntlerError` a hook raises on purpose (a veto) goes through
as is, and `antler_select_tools` always stops the build, since leaving a
narrowing out would offer the model tools it must not see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .markers import PROJECT as PROJECT
from .markers import hookimpl as hookimpl
from .markers import hookspec

if TYPE_CHECKING:
    from .context import BuildContext
    from .manifest import Manifest
    from .spec import PluginSpec



class ConfigView(Protocol):
    """What `antler_validate_config` sees of the operator's validated config (the core's
    `OperatorConfig` is one): a section's model, whether a key was set, and where."""

    def section(self, key: str) -> Any:
        """The validated model of section `key` (a plugin's own or a platform one), or None."""

    def was_set(self, *path: str | int) -> bool:
        """Whether the operator's file set the key at `path` (not a default)."""

    def locate(self, *path: str | int) -> object:
        """Where the key at `path` is (`file:line:column` when shown), else the file."""


class ChainView(Protocol):
    """What `antler_chain_resolved` sees of a built chain (the core's `BuiltChain` is one)."""

    @property
    def names(self) -> list[str]:
        """The chain's plugin names, in order."""

    @property
    def middlewares(self) -> list[Any]:
        """The middleware instances, in the same order."""

    @property
    def plan(self) -> Any:
        """The plan that placed them: the excluded plugins and the problems they had."""

    @property
    def entries(self) -> list[Any]:
        """One entry per plugin in the chain: its name, spec and middleware instance."""

@hookspec
def antler_plugin_specs() -> list[PluginSpec] | Manifest | None:
    """Contribute plugin specs: a list of `PluginSpec` (or dicts), or a whole `Manifest`.

    :returns: the specs of this entry point's plugins, or None for a hooks-only
        entry point (one that only contributes tools or config checks).

    **When:** once per discovery (`antler.plugin_api.registry.discover`), right
    after the entry point is registered, for every installed entry point,
    enabled or not. Third-party specs are stamped with their distribution,
    version and entry point, and rank after the built-ins.

    **firstresult:** no; each entry point is asked alone.

    Keep it cheap and free of side effects: it must not import the middleware
    module (that is what `PluginSpec.factory` is for). If it raises or returns
    something else, the distribution contributes nothing and a load diagnostic
    names it; the build stops only when the distribution is required.

    Example::

        @hookimpl
        def antler_plugin_specs():
            return load_package_manifest("acme_antler")
    """


@hookspec
def antler_config_sections() -> dict[str, Any] | None:
    """Contribute top-level operator-config sections not owned by one plugin.

    :returns: a mapping of section name to a pydantic model class, or None.

    **When:** each time an operator config is validated (and for `antler config
    schema`), to assemble the config's schema, for every registered entry point.

    **firstresult:** no; every mapping is merged. A section name contributed
    twice, or one that a plugin or the platform owns, is a config error.

    Use it for settings several plugins read; a plugin's own section comes
    from its spec's `config_key`/`config_model` instead.

    Example::

        @hookimpl
        def antler_config_sections():
            from acme_antler.config import AcmeShared
            return {"acme_shared": AcmeShared}
    """


@hookspec
def antler_validate_config(config: ConfigView) -> list[str] | None:
    """Check cross-section rules after every section validated on its own.

    :param config: the validated config (a `ConfigView`); `config.section(key)` gives a
        section's model, `config.locate(key, field)` its file:line:column.
    :returns: a list of problems, each a full sentence starting with where it
        is and saying what to change, or None.

    **When:** once per config load, after schema validation, for every entry
    point the operator has not switched off. All problems of all plugins are
    reported together, as one config error.

    **firstresult:** no; every list is collected.

    Example::

        @hookimpl
        def antler_validate_config(config):
            audit = config.section("acme_audit")
            if audit is not None and audit.enabled and config.section("acme") is None:
                return [f"{config.locate('acme_audit')}: acme_audit needs an `acme:` section"]
            return None
    """


@hookspec
def antler_tools(context: BuildContext) -> list[Any] | None:
    """Contribute LangChain tools to the agent a chain is built for.

    :param context: the `BuildContext` of this entry point's first plugin in
        the chain (chain name, runtime options, services, its config section).
    :returns: a list of tools, or None.

    **When:** once per chain build (`build_chain`), after the middlewares are
    instantiated, for each entry point with a plugin in the chain, in chain
    order. An entry point whose plugins are all outside the chain (off,
    switched off, excluded as broken) is not asked.

    **firstresult:** no; each entry point is asked alone and the tools are
    concatenated.

    A `Command(update=...)` such a tool returns may write only the state keys
    the entry point's plugins may write; any other key is refused with
    `StateWriteError` under the first plugin's `on_error` (docs/plugins.md,
    "Whose state").

    Example::

        @hookimpl
        def antler_tools(context):
            from acme_antler.tools import audit_report  # import lazily
            return [audit_report]
    """


@hookspec
def antler_select_tools(context: BuildContext, tools: list[Any]) -> list[Any] | None:
    """Narrow the tools an agent is compiled with.

    :param context: the `BuildContext` of the plugin being asked.
    :param tools: every tool known so far, after the previous plugin's selection.
    :returns: the tools to keep, or None to keep them all.

    **When:** once per agent build, after every tool is known, for each plugin
    in the chain, in chain order, through its entry point. An authorization
    plugin uses it so the model never sees a tool the caller may not use.
    Tools a middleware registers itself (its `tools` attribute) are added by
    LangChain afterwards and are not passed here.

    **firstresult:** no; the platform calls each plugin's entry point alone and
    hands its selection to the next.

    Example::

        @hookimpl
        def antler_select_tools(context, tools):
            return [t for t in tools if not t.name.startswith("internal_")]
    """


@hookspec
def antler_prompt_sections(context: BuildContext) -> list[str] | str | None:
    """Contribute static sections to the agent's system prompt.

    :param context: the build context of the entry point's first plugin in the
        chain (chain name, runtime options, services, its config section).
    :returns: one section, a list of sections, or None.

    **When:** once per agent build, after the chain is built, for each entry
    point with a plugin in the chain, in chain order. The sections are
    appended to the base system prompt, each separated by a blank line, in
    that order.

    **firstresult:** no; each entry point is asked alone.

    Keep them static for a given build (an index of skills, the names of
    deferred tools): the system prompt is the prefix providers cache, and
    per-turn facts (the date) belong in messages.

    Example::

        @hookimpl
        def antler_prompt_sections(context):
            return "<skills>\n- data-report: summarizes uploaded tables\n</skills>"
    """


@hookspec
def antler_chain_resolved(chain: ChainView) -> None:
    """Observe a resolved and built chain (logging, metrics, policy checks).

    :param chain: the built chain (a `ChainView`): `chain.names` in order, `chain.plan` (with
        the excluded plugins and the problems they were excluded for),
        `chain.entries` with the middleware instances.

    **When:** at the end of every `build_chain`, for every entry point the
    operator has not switched off, whether or not its plugins are in the chain.

    **firstresult:** no; every implementation runs. Raise
    `antler.errors.BuildError` to veto the chain: the message is shown to the
    operator as is.

    Example::

        @hookimpl
        def antler_chain_resolved(chain):
            if "acme_audit" not in chain.names:
                raise BuildError("acme requires acme_audit in every chain it builds")
    """
