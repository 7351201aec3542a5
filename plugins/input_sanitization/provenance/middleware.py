"""InputProvenanceMiddleware: input_sanitization's record, taken after every before_agent hook.

`input_sanitization` tells the user's own messages from the server's rewrites
of them by fingerprints it keeps in private state. Its ``before_agent`` hook
must run first (it strips caller-supplied provenance before uploads writes
the server's), so the rewrites of the hooks after it, such as the
``<uploaded_files>`` block, happen after its record was taken. This plugin
records them.

Hooks

``before_agent`` / ``abefore_agent``
    Records the current form of every `HumanMessage`
    (`antler.plugins._lib.inputrecord.record_current_form`, shared with
    input_sanitization). The record is saved with the ``before_agent`` step,
    before the model is called: when the model call fails, the next run does
    not take the server's rewrite for caller input (which would strip
    the server's ``original_user_content`` and treat the uploads block as the
    user's words). A ``before_model`` hook cannot promise that: the chain
    compiler runs those inside the model node, whose writes a failed model
    call discards.

Where it sits: after ``@tail_start`` and before clarification, so its
``before_agent`` runs after every other one, configured extensions included.
It has no other hooks, so its place in the chain changes nothing else.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langgraph.runtime import Runtime

from antler.plugin_api import BuildContext
from antler.plugins._lib.inputrecord import InputSanitizationState, record_current_form

__all__ = ["InputProvenanceMiddleware", "build"]


class InputProvenanceMiddleware(AgentMiddleware[InputSanitizationState, Any]):
    """Records the user messages as the before_agent hooks left them."""

    state_schema = InputSanitizationState

    def before_agent(self, state: InputSanitizationState, runtime: Runtime[Any],
                     ) -> dict[str, Any] | None:
        return record_current_form(state)

    async def abefore_agent(self, state: InputSanitizationState, runtime: Runtime[Any],
                            ) -> dict[str, Any] | None:
        return record_current_form(state)


def build(ctx: BuildContext) -> InputProvenanceMiddleware:
    """Factory named in the manifest."""
    return InputProvenanceMiddleware()
