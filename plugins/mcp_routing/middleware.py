"""MCP routing: promote the deferred tools the user's own words call for.

With tool_search on, MCP tools are deferred until promoted. A server (or one
of its tools) configured with ``routing: {mode: prefer, keywords: [...]}``
should not need a ``tool_search`` round trip when the user plainly asks for
it: before each model call this middleware promotes the matching tools.

Hooks: `before_model` (and async) only. It reads the latest genuine user
message (not a hidden, server-injected one), in its original text when the
server kept it, and matches each keyword as a case-folded substring, so any
script works (``天气`` in ``明天天气怎么样``). Matching tools are ranked by
priority (higher first), then by relevance to the message (how many of its
words, three letters or more, occur in the tool's name or description: "read
the report" ranks ``read_file`` before ``write_file`` when a whole server's
tools share one keyword), then name; those of the top
``tool_search.auto_promote_top_k`` (default 3, clamped 1-5) not promoted yet
under the current catalog are promoted with a minimal ``promoted`` update (only
the new names; the channel's reducer unions them with earlier promotions). No
match, no catalog, or nothing new: no update. It never runs or hides a tool,
and its log lines carry counts, not tool names or keywords.

Where it sits: position 24 (docs/chain.md#mcp_routing), right before deferred_tool_filter, whose
``wrap_model_call`` then sees this step's promotion.

Configuration: on when ``tool_search.enabled`` and some MCP tool has
``routing.mode: prefer`` with keywords (runtime condition ``mcp_routing``);
``tool_search.auto_promote_top_k`` sets k; ``mcp_routing: {enabled: false}``
switches it off.

Example: with ``mcp_servers: {weather: {command: ..., routing: {mode: prefer,
keywords: [forecast]}}}``, "what is the forecast for Oslo?" reaches the model
with the weather tools' schemas already loaded.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from antler.plugin_api import (
    DEFERRED_TOOLS,
    BuildContext,
    CatalogEntry,
    DeferredTools,
    PromotedState,
    latest_user_message,
    promoted_names,
    promotion,
    user_text,
)

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["McpRoutingMiddleware", "build", "matches", "ranked", "relevance"]

logger = logging.getLogger(__name__)

DEFAULT_TOP_K = 3


_WORD = re.compile(r"\w+")


def relevance(entry: CatalogEntry, text: str) -> int:
    """How many distinct words of `text` (three letters or more, case-folded) occur in
    the tool's name (its `_`, `-` and `.` read as spaces) or description."""
    about = f"{re.sub(r'[_.-]', ' ', entry.name)} {entry.description}".casefold()
    words = {word for word in _WORD.findall(text.casefold()) if len(word) >= 3}
    return sum(1 for word in words if word in about)


def ranked(entries: list[CatalogEntry], text: str) -> list[CatalogEntry]:
    """Matching tools, best first: priority (higher first), then relevance to the
    message, then name."""
    return sorted(entries, key=lambda e: (-int((e.routing or {}).get("priority", 0)),
                                          -relevance(e, text), e.name))


def matches(entry: CatalogEntry, text: str) -> bool:
    """Whether `entry` prefers routing and one of its keywords is in `text` (case-folded)."""
    routing = entry.routing or {}
    if routing.get("mode") != "prefer":
        return False
    folded = text.casefold()
    return any(str(word).casefold() in folded for word in routing.get("keywords") or ())


class McpRoutingMiddleware(AgentMiddleware[PromotedState, Any]):
    """Promotes the top-k deferred tools whose keywords the user's message contains."""

    state_schema = PromotedState

    def __init__(self, setup: DeferredTools, top_k: int = DEFAULT_TOP_K) -> None:
        super().__init__()
        self.setup = setup
        self.top_k = max(1, min(5, top_k))

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self._promote(state)

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self._promote(state)

    def _promote(self, state: Any) -> dict[str, Any] | None:
        catalog = self.setup.catalog
        if catalog is None:
            return None
        message = latest_user_message(state.get("messages") or [])
        if message is None:
            return None
        text = user_text(message)
        promoted = promoted_names(state, catalog.hash)
        # The top k of all matches, promoted or not: a later step of the same turn
        # must not reach past k for matches the first step left out.
        found = ranked([entry for entry in catalog.entries if matches(entry, text)], text)
        chosen = [entry.name for entry in found[:self.top_k] if entry.name not in promoted]
        if not chosen:
            return None
        logger.info("mcp_routing promoted %d deferred tool(s) of %d matching", len(chosen),
                    len(found))
        return promotion(catalog.hash, chosen)


def build(ctx: BuildContext) -> McpRoutingMiddleware:
    """The middleware on the build's deferred setup, k from ``tool_search``."""
    setup = ctx.services.items.get(DEFERRED_TOOLS)
    top_k = getattr(ctx.config, "auto_promote_top_k", DEFAULT_TOP_K)
    return McpRoutingMiddleware(setup if isinstance(setup, DeferredTools) else DeferredTools(),
                                top_k)
