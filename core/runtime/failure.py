"""What a plugin's hook or tool does with an exception of its own: fail, or log and skip.

`antler.runtime.isolation` wraps every hook with one; `antler.runtime.toolguard`
uses the same for a plugin tool's refused state write.
"""

from __future__ import annotations

import logging

from antler.chain.policy import SKIP
from antler.errors import AntlerError, PluginHookError, describe_error
from antler.plugin_api.spec import OnError

from .tracing import note_in_trace

__all__ = ["AUDIT_LOGGER", "Failure"]

AUDIT_LOGGER = "antler.audit.isolation"
"""Where a skipped failure is reported, one line each."""

log = logging.getLogger(AUDIT_LOGGER)


class Failure:
    """What one plugin's hook does with an exception of its own: fail, or log and skip."""

    __slots__ = ("hook", "label", "skip")

    def __init__(self, label: str, hook: str, policy: OnError) -> None:
        self.label = label
        self.hook = hook
        self.skip = policy == SKIP

    def handle(self, error: Exception, outcome: str) -> None:
        """Raise what `fail` raises; under `skip` report the failure and return.

        `outcome` says what the chain does instead of the hook.
        """
        what = f"plugin {self.label!r} failed in {self.hook}: {describe_error(error)}"
        if not self.skip:
            if isinstance(error, AntlerError):
                raise error  # raised on purpose: its message already says what is wrong
            raise PluginHookError(what, plugin=self.label, hook=self.hook) from error
        log.warning("%s; skipped (on_error: skip): %s", what, outcome)
        note_in_trace(f"skipped {describe_error(error)}: {outcome}")
