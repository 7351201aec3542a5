"""The error types Antler raises, one family per stage.

Every error carries a message meant for the person who has to fix the input:
what is wrong, where it was declared, and what to change. The classes exist so
callers (and tests) can tell the stages apart without parsing messages.
"""

from __future__ import annotations


def describe_error(error: BaseException) -> str:
    """`Type: message` on one line (whitespace in the message collapsed)."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class AntlerError(Exception):
    """Base class of every error Antler raises on purpose."""


class ManifestError(AntlerError):
    """A plugin manifest (YAML or an in-code spec) is malformed.

    `sections` maps each operator-config section the manifest's plugins would
    have read to the plugin's name, as far as the manifest could be read (so a
    config naming a plugin whose manifest was refused can say which and why).
    """

    def __init__(self, message: str, sections: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.sections = dict(sections or {})


class DiscoveryError(AntlerError):
    """A plugin distribution could not be discovered or loaded."""


class ResolutionError(AntlerError):
    """The ordering constraints of one chain cannot be satisfied.

    `plugins` names the plugins whose own declarations are at fault (the owner
    of a misspelt reference, every plugin on a cycle, both claimants of a
    position), so a planner can exclude optional offenders and try again.
    """

    def __init__(self, message: str, plugins: tuple[str, ...] | list[str] = ()) -> None:
        super().__init__(message)
        self.plugins = tuple(plugins)


class CycleError(ResolutionError):
    """The constraints form a cycle; the message prints the whole cycle."""

    def __init__(self, message: str, cycle: list[str]) -> None:
        super().__init__(message, plugins=[node for node in cycle if not node.startswith("@")])
        self.cycle = cycle


class UnknownReferenceError(ResolutionError):
    """A constraint names a plugin or synchronization point nobody declared."""


class AdjacencyConflictError(ResolutionError):
    """Two `immediately_*` constraints (or one and a position) cannot both hold."""


class PositionConflictError(ResolutionError):
    """Two plugins claim `position: first` (or `last`) in the same chain."""


class UnmetRequirementError(ResolutionError):
    """A plugin `requires` another that is unknown or not enabled in the chain."""


class UnknownPluginError(AntlerError, KeyError):
    """A plugin name that no installed plugin has; the message suggests the nearest."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ConfigError(AntlerError):
    """The operator config is invalid; the message names file, line and column."""


class ReflectionError(AntlerError):
    """A `module:attr` path could not be turned into the object it names."""


class BuildError(AntlerError):
    """A plugin's factory failed or produced something that is not a middleware."""


class FusionError(AntlerError):
    """The chain compiler cannot compile a chain the way it was asked to."""


class PluginHookError(AntlerError):
    """A plugin's hook raised at run time and the plugin's `on_error` is `fail`.

    The message is one line naming the plugin, the hook and the error; the
    original exception is the `__cause__`. `plugin` and `hook` say the same
    for callers.
    """

    def __init__(self, message: str, plugin: str = "", hook: str = "") -> None:
        super().__init__(message)
        self.plugin = plugin
        self.hook = hook


class StateOwnershipError(BuildError):
    """Two parties claim one agent-state key (`antler.chain.stateowners.check_owners`)."""


class StateWriteError(AntlerError):
    """A plugin's node hook wrote an agent-state key the plugin does not own.

    Raised inside the hook's isolation, so the plugin's `on_error` decides: `fail`
    stops the run with this error, `skip` drops the whole update and logs it.
    """

    def __init__(self, message: str, plugin: str = "", keys: list[str] | None = None) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.keys = list(keys or [])


class StateMutationError(StateWriteError):
    """A plugin's node hook changed a state value in place (cleared, appended to,
    replaced an item of a list or dict of the state) instead of returning an update.

    Raised inside the hook's isolation after the change was undone
    (`antler.runtime.hookwatch`), so the plugin's `on_error` decides as for any write
    the plugin may not make.
    """


class HookOutputError(AntlerError):
    """A plugin's hook returned more than its output limit (text characters and items,
    or nesting depth); handled under the plugin's `on_error`."""


class HookTimeError(AntlerError):
    """A plugin's hook ran past its time budget; handled under the plugin's `on_error`."""

    def __init__(self, message: str, plugin: str = "", hook: str = "",
                 seconds: float = 0.0) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.hook = hook
        self.seconds = seconds


class InputError(AntlerError):
    """A run's input holds something a caller may not send; the run was not started."""


class ClientInputError(InputError, ValueError):
    """An `InputError` as the served graph raises it: a `ValueError` too.

    LangGraph Server answers a `ValueError` from a request with 400 and its
    message, and keeps the message of a run that fails with one, where it
    would hide another error's behind "An internal error occurred".
    """


class ModelCallBudgetError(AntlerError):
    """A run needed more model calls than `agent.max_model_calls` allows; it was stopped.

    `max_model_calls` is the budget that was reached.
    """

    def __init__(self, message: str, max_model_calls: int = 0) -> None:
        super().__init__(message)
        self.max_model_calls = max_model_calls
