"""Deferred tool filter: deferred tools stay hidden until something promotes them.

With ``tool_search: {enabled: true}`` every MCP tool is deferred (see
`antler.contracts.deferred`): it is compiled into the agent, but only its name
is shown, in the system prompt's ``<available-deferred-tools>`` section. The
model loads the schemas it needs with ``tool_search``, or mcp_routing promotes
them from the user's words; promotions live in the ``promoted`` state channel,
tied to the catalog's hash.

Hooks:

* `wrap_model_call` (and async): removes from ``request.tools`` every deferred
  tool the thread has not promoted under the current catalog (a forced
  ``tool_choice`` of one is dropped too). Other tools are untouched.
* `wrap_tool_call` (and async): a call to a deferred tool that was never
  promoted is refused with an error result (``antler_tool_meta``: ``blocked``,
  recoverable) telling the model to call ``tool_search`` first; the tool never
  runs. Without a catalog (no MCP tool) both hooks pass everything through.

It also owns the ``promoted`` channel (`PromotedState`), which ``tool_search``
writes, and contributes the prompt section (`prompt_section`).

Where it sits: position 25 (docs/chain.md#deferred_tool_filter), after mcp_routing
(whose ``before_model`` promotion this step's request already reflects) and before the
system-message coalescer; on both chains.

Configuration: the ``tool_search:`` section (`ToolSearchConfig`): ``enabled:
true`` brings it in, and with it the deferral itself: a chain defers MCP tools
when a plugin in it keeps the ``promoted`` state. ``auto_promote_top_k`` is
mcp_routing's.

Example: with a ``github`` server's ``create_issue`` deferred, the model first
sees only its name; after ``tool_search("select:create_issue")`` the next
request carries its schema and the call runs.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest
from langchain_core.messages import ToolMessage

from antler.plugin_api import (
    DEFERRED_TOOLS,
    TOOL_META_KEY,
    TOOL_SEARCH,
    BuildContext,
    DeferredTools,
    PromotedState,
    refusal,
    tool_name,
)

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["SECTION_TAG", "DeferredToolFilterMiddleware", "build", "prompt_section"]

logger = logging.getLogger(__name__)

SOURCE = "deferred_tool_filter"
SECTION_TAG = "available-deferred-tools"
_TOOL_CHOICE_KEYWORDS = frozenset({"auto", "any", "none", "required"})


def setup_of(context: BuildContext) -> DeferredTools:
    """The build's deferred setup; an empty one when the build has none."""
    setup = context.services.items.get(DEFERRED_TOOLS)
    return setup if isinstance(setup, DeferredTools) else DeferredTools()


class DeferredToolFilterMiddleware(AgentMiddleware[PromotedState, Any]):
    """Hides unpromoted deferred tools from the model and refuses calls to them."""

    state_schema = PromotedState

    def __init__(self, setup: DeferredTools) -> None:
        super().__init__()
        self.setup = setup

    # -- the model's tools --------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any],
                        ) -> Any:
        return handler(self._filtered(request))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[Any]]) -> Any:
        return await handler(self._filtered(request))

    def _filtered(self, request: ModelRequest) -> ModelRequest:
        hidden = self.setup.hidden(request.state)
        if not hidden or not any(tool_name(tool) in hidden for tool in request.tools):
            return request
        overrides: dict[str, Any] = {
            "tools": [tool for tool in request.tools if tool_name(tool) not in hidden]}
        choice = request.tool_choice
        if isinstance(choice, str) and choice not in _TOOL_CHOICE_KEYWORDS and choice in hidden:
            overrides["tool_choice"] = None
        return request.override(**overrides)

    # -- the model's calls --------------------------------------------------------------

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        refused = self._refusal(request)
        return refused if refused is not None else handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]],
                              ) -> Any:
        refused = self._refusal(request)
        return refused if refused is not None else await handler(request)

    def _refusal(self, request: Any) -> ToolMessage | None:
        call = request.tool_call
        name = str(call.get("name") or "")
        if name not in self.setup.hidden(request.state):
            return None
        logger.info("deferred_tool_filter refused a call to a deferred tool not promoted yet")
        return ToolMessage(
            content=f"Error: {name} is deferred and has not been promoted yet, so the call "
                    f"was not run. Call {TOOL_SEARCH} first (for example "
                    f"{TOOL_SEARCH}(\"select:{name}\")) to load its schema, then call it again.",
            tool_call_id=str(call.get("id") or ""), name=name, status="error",
            additional_kwargs={TOOL_META_KEY: refusal(
                "blocked", SOURCE, next_action="use_another_tool", use=TOOL_SEARCH)})


def prompt_section(context: BuildContext) -> str | None:
    """The deferred tools' names for the system prompt (escaped), or None without any."""
    catalog = setup_of(context).catalog
    if catalog is None:
        return None
    names = "\n".join(html.escape(name) for name in sorted(catalog.names))
    return (f"<{SECTION_TAG}>\n{names}\n</{SECTION_TAG}>\n"
            f"These tools exist but their schemas are not loaded. To use one, call "
            f"{TOOL_SEARCH} with a query (or 'select:<name>') first; calling it before that "
            "fails.")


def build(ctx: BuildContext) -> DeferredToolFilterMiddleware:
    """The middleware on the build's deferred setup (filled once the tools are known)."""
    return DeferredToolFilterMiddleware(setup_of(ctx))
