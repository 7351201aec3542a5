"""Which sandbox provider runs a build's commands, and why: ``sandbox: {provider: ...}``.

``auto`` (the default) picks ``bwrap`` when bubblewrap is usable here (probed
once per process; a report may use the probe's recorded answer, see
`antler.runtime.sandbox.probe`) and otherwise falls back to ``local`` with a warning;
``require_isolation`` turns that fallback, and an explicit ``local``, into an
error. Any other name is a provider registered in ``antler.sandbox_providers``
and is taken as configured. The same decision is shown by ``antler chain show``
and ``antler doctor`` as the agent makes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from antler.plugin_api.sandbox import SandboxError, SandboxProvider, load_sandbox_provider

from .probe import BwrapStatus, bwrap_status, remembered_bwrap_status

logger = logging.getLogger(__name__)

__all__ = ["AUTO", "IsolationRequiredError", "ProviderChoice", "choose_provider",
           "describe_sandbox", "load_configured_provider", "sandbox_line"]

AUTO = "auto"


class IsolationRequiredError(SandboxError, RuntimeError):
    """``sandbox.require_isolation`` is set, but the chosen provider does not isolate commands."""


@dataclass(frozen=True)
class ProviderChoice:
    """The provider a build uses: its name, why, and whether its commands are isolated."""

    name: str
    reason: str
    isolated: bool | None
    """True for bwrap, False for local, None for a third-party provider (not known)."""
    warning: str | None = None
    """A one-line warning to show at agent start (the fallback to ``local``)."""


def choose_provider(requested: str, *, require_isolation: bool = False,
                    probe: Callable[[], BwrapStatus] | None = None) -> ProviderChoice:
    """Resolve ``sandbox.provider`` (``auto`` or a name) into the provider to load.

    ``probe`` says whether bubblewrap is usable (default: `bwrap_status`, a fresh
    probe once per process).

    Raises:
        IsolationRequiredError: ``require_isolation`` with ``local``, or with
            ``auto``/``bwrap`` where bubblewrap is not usable.
    """
    fix = ("Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) on a host that "
           "allows unprivileged user namespaces")
    if requested in (AUTO, "bwrap"):
        status = (probe or bwrap_status)()
        if status.usable:
            how = "auto" if requested == AUTO else "configured"
            return ProviderChoice("bwrap", f"{how}: {status.reason}", True)
        if requested == "bwrap" or require_isolation:
            setting = ("sandbox.require_isolation is true" if requested == AUTO
                       else "sandbox.provider is 'bwrap'")
            raise IsolationRequiredError(
                f"{setting}, but bubblewrap is not usable: {status.reason}. {fix}, or set "
                "sandbox.provider: local (commands then run on the host, unisolated).")
        return ProviderChoice(
            "local", f"auto: bubblewrap is not usable ({status.reason})", False,
            warning=f"sandbox: bubblewrap is not usable ({status.reason}); shell commands run "
                    "on the host without isolation (local provider). Install bubblewrap, or set "
                    "sandbox.provider: local to choose this knowingly.")
    if requested == "local":
        if require_isolation:
            raise IsolationRequiredError(
                "sandbox.provider is 'local', whose shell commands run on the host, but "
                "sandbox.require_isolation is true. Use provider 'auto' or 'bwrap' (needs "
                "bubblewrap), or drop require_isolation.")
        return ProviderChoice("local", "configured (commands run on the host, unisolated)",
                              False)
    return ProviderChoice(requested, "configured (a registered provider; its isolation is its "
                                     "own)", None)


def describe_sandbox(section: Any, *, remembered: bool = False) -> dict[str, Any]:
    """What ``chain show`` and ``doctor`` report about a config's ``sandbox:`` section.

    ``remembered``: answer from the last recorded bubblewrap probe while it is still
    valid (`remembered_bwrap_status`) instead of probing; for commands that only
    report the choice and start no sandbox. Never raises: a refused configuration
    comes back with ``provider`` None and the reason in ``error``.
    """
    requested = getattr(section, "provider", AUTO)
    require = bool(getattr(section, "require_isolation", False))
    report: dict[str, Any] = {"requested": requested, "require_isolation": require,
                              "provider": None, "reason": None, "isolated": None,
                              "network": None, "warning": None, "error": None}
    try:
        choice = choose_provider(requested, require_isolation=require,
                                 probe=remembered_bwrap_status if remembered else None)
    except IsolationRequiredError as error:
        return {**report, "error": str(error)}
    network = {"bwrap": bool(getattr(section, "network", False)), "local": True}
    return {**report, "provider": choice.name, "reason": choice.reason,
            "isolated": choice.isolated, "network": network.get(choice.name),
            "warning": choice.warning}


def sandbox_line(report: dict[str, Any]) -> str:
    """One line for people: 'sandbox: bwrap (auto: ...); network off'."""
    if report["error"]:
        return f"sandbox: refused: {report['error']}"
    network = {True: "; network on", False: "; network off"}.get(report["network"], "")
    return f"sandbox: {report['provider']} ({report['reason']}){network}"


def load_configured_provider(section: Any) -> SandboxProvider:
    """The provider a ``sandbox:`` section chooses, built with its settings.

    Logs the choice's warning (the fallback to ``local``) once, here, at agent start.

    Raises:
        IsolationRequiredError: the section requires isolation it cannot have.
        SandboxError: the provider cannot be loaded or built.
    """
    choice = choose_provider(getattr(section, "provider", AUTO),
                             require_isolation=bool(getattr(section, "require_isolation", False)))
    if choice.warning:
        logger.warning(choice.warning)
    options: dict[str, Any] = {}
    if choice.name == "bwrap":
        limits = getattr(section, "limits", None)
        options = {"network": bool(getattr(section, "network", False)),
                   **(limits.model_dump() if limits is not None else {})}
    options.update(getattr(section, "provider_options", None) or {})
    return load_sandbox_provider(choice.name, default_timeout=section.command_timeout,
                                 max_output_bytes=section.command_capture_bytes, **options)
