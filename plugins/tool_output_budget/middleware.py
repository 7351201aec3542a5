"""ToolOutputBudgetMiddleware: a huge tool result goes to a file; the model gets a synopsis.

Hooks
    ``wrap_tool_call`` / ``awrap_tool_call``: a result whose text is longer
    than the tool's threshold (``externalize_min_chars``, or its entry in
    ``tool_overrides``) is written in full to
    ``/mnt/user-data/outputs/<storage_subdir>/<tool>-<12 hex>.<log|json|txt>``
    and replaced by a typed synopsis (`synopsis.py`): size, kind (json, csv,
    tsv, yaml, xml, code, log, text) and structure (JSON and YAML top-level
    keys, table columns, the XML root, a log's error lines), head and tail, and the exact ``read_file`` call that reads
    the file in pages. When the file cannot be written, the text is cut to its
    head and tail instead (at most ``fallback_max_chars``). A result at or
    under the threshold, a multimodal result and an exempt tool's result
    (``read_file``: reading a saved result must not save it again) pass as the
    very same object. The `ToolMessage`s inside a `Command` are budgeted the
    same way. The async form writes in a worker thread.

    ``wrap_model_call`` / ``awrap_model_call``: tool results already in the
    history (from before the budget was on, or from another layer) that are
    longer than the threshold are shown to the model as a synopsis without a
    file, in the request only: the state keeps them as they are. Where they
    are is kept per thread (`antler.plugin_api.historyfold`) and each
    synopsis per message, so a call looks only at the messages added since
    the thread's previous call.

    A budgeted message carries ``additional_kwargs["antler_tool_output"]``
    (`antler.contracts.tooloutput`) and keeps every other key (its
    ``antler_tool_meta`` included). Saved files are process feedback, never
    artifacts: listings of the outputs skip the folder.

Where it sits and why
    Position 2 (docs/chain.md#tool_output_budget): the outermost tool wrapper (``outer_of:
    tool_result_sanitization``), so it budgets the result every inner layer
    has finished with: fetched text already neutralized (a cut can never
    split an escape and leave a raw tag), errors already stamped. Its model
    wrapper is outside the error and retry handlers, so history is budgeted
    once per model step.

Configuration
    ``tool_output:`` (`ToolOutputConfig`): ``enabled`` (on by default),
    ``externalize_min_chars`` 12000, ``preview_head_chars`` 2000,
    ``preview_tail_chars`` 1000, ``fallback_max_chars`` 30000,
    ``fallback_head_chars`` 8000, ``fallback_tail_chars`` 3000,
    ``storage_subdir`` ``.tool-results``, ``exempt_tools`` [read_file,
    read_file_tool], ``tool_overrides`` {tool: threshold, 0 = never save}.

Example
    ``bash`` printing 5 MB leaves the model with::

        [Tool output saved to a file: 5,000,000 characters (~1,250,000 tokens), 50,000 lines; kind: log]
        File: /mnt/user-data/outputs/.tool-results/bash-3f2a9c0d1e4b.log
        Read more with read_file(path="/mnt/user-data/outputs/.tool-results/bash-3f2a9c0d1e4b.log", start_line=1, end_line=80) ...
"""  # noqa: E501

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from antler.plugin_api import (
    OUTPUT_BUDGET_SERVICE,
    PATHS,
    TOOL_OUTPUT_KEY,
    VIRTUAL_ROOT,
    AntlerError,
    BuildContext,
    HistoryFold,
    MessageMemo,
    PathLayout,
    budgeted_output,
    confined,
    message_text,
    thread_id_of,
)
from antler.plugins._lib.requestcopy import overridden

from .config import ToolOutputConfig
from .synopsis import cut, describe, joined_text, synopsis

__all__ = ["ToolOutputBudgetMiddleware", "build"]

logger = logging.getLogger(__name__)

Result = ToolMessage | Command[Any]
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class ToolOutputBudgetMiddleware(AgentMiddleware):
    """Saves oversized tool results to the thread's outputs and shows the model a synopsis."""

    def __init__(self, layout: PathLayout | None, config: ToolOutputConfig | None = None) -> None:
        super().__init__()
        self.layout = layout
        self.config = config or ToolOutputConfig()
        self.exempt = frozenset(self.config.exempt_tools)
        # No result this long or shorter is over any threshold (0: none is ever over).
        limits = [self.config.externalize_min_chars, *self.config.tool_overrides.values(),
                  self.config.fallback_max_chars]
        self._floor = min((limit for limit in limits if limit), default=0)
        # Kept per thread and per message, so a model call looks only at the messages
        # added since the thread's previous call (docs/plugins.md).
        self._oversized: HistoryFold[tuple[int, ...]] = HistoryFold((), self._over_from)
        self._history_synopsis: MessageMemo[ToolMessage] = MessageMemo(self._synopsis_copy)

    # -- tool results ------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Result]) -> Result:
        result = handler(request)
        return self.budget_result(result, request) if self._wanted(request, result) else result

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Result]]
                              ) -> Result:
        result = await handler(request)
        if not self._wanted(request, result):
            return result
        return await asyncio.to_thread(self.budget_result, result, request)

    def _wanted(self, request: ToolCallRequest, result: Any) -> bool:
        """Cheap pre-check on the hot path: is anything in `result` over its threshold?"""
        if request.tool_call.get("name") in self.exempt:
            return False
        return any(self._over(m) for m in _tool_messages(result))

    def _over(self, message: ToolMessage) -> bool:
        size = _size(message.content)
        if size <= self._floor or message.name in self.exempt \
                or budgeted_output(message) is not None:
            return False
        limit = self.config.threshold(message.name or "")
        if limit and size > limit:
            return True
        # Never saved (threshold 0): only the fallback cut applies.
        return not limit and bool(self.config.fallback_max_chars) \
            and size > self.config.fallback_max_chars

    def budget_result(self, result: Any, request: ToolCallRequest) -> Any:
        """`result` with each oversized `ToolMessage` in it budgeted."""
        if isinstance(result, ToolMessage):
            return self.budget_message(result, request)
        if isinstance(result, Command) and isinstance(result.update, Mapping):
            messages = result.update.get("messages")
            if isinstance(messages, list):
                budgeted = [self.budget_message(m, request) if isinstance(m, ToolMessage) else m
                            for m in messages]
                return dataclasses.replace(result, update={**result.update, "messages": budgeted})
        return result

    def budget_message(self, message: ToolMessage, request: ToolCallRequest) -> ToolMessage:
        """`message` itself when within budget; else its synopsis (or its cut text)."""
        if not self._over(message):
            return message
        text = _text(message.content)
        if text is None:
            return message  # multimodal: images and files are not text to cut
        tool = message.name or str(request.tool_call.get("name") or "tool")
        shape = describe(text, tool)
        config = self.config
        path = None
        if config.threshold(tool):
            try:
                path = self._save(request, tool, message.tool_call_id, text, shape.extension)
            except (AntlerError, OSError, ValueError) as exc:
                logger.warning("could not save the %s-character result of %r (%s); cutting "
                               "it instead", len(text), tool, exc)
        if path is not None:
            content = synopsis(text, shape, path=path, head=config.preview_head_chars,
                               tail=config.preview_tail_chars)
        elif config.fallback_max_chars and len(text) > config.fallback_max_chars:
            content = cut(text, config.fallback_max_chars, config.fallback_head_chars,
                          config.fallback_tail_chars, "the full output could not be saved")
        else:
            return message
        record = {"path": path, "chars": len(text), "kind": shape.kind,
                  "externalized": path is not None}
        kwargs = {**message.additional_kwargs, TOOL_OUTPUT_KEY: record}
        return message.model_copy(update={"content": content, "additional_kwargs": kwargs})

    def _save(self, request: ToolCallRequest, tool: str, call_id: str, text: str,
              extension: str) -> str:
        """Write `text` to the thread's tool-results folder; return its virtual path."""
        if self.layout is None:
            raise ValueError("no thread file layout in this build")
        thread_id = thread_id_of(request.runtime)
        if not thread_id:
            raise ValueError("the run has no thread id, so it has no outputs folder")
        paths = self.layout.for_run(request.runtime)
        digest = (hashlib.sha256(f"{thread_id}\0{call_id}".encode()).hexdigest()[:12]
                  if call_id else uuid.uuid4().hex[:12])
        name = (_UNSAFE.sub("_", tool).strip("._") or "tool")[:64]
        virtual = (f"{VIRTUAL_ROOT}/outputs/{self.config.storage_subdir}/"
                   f"{name}-{digest}.{extension}")
        paths.ensure_directories()
        # Opened beneath the thread's root: a folder the model swapped for a symlink
        # that leaves the thread is refused, however late the swap.
        fd = confined.place(paths.mapper, virtual).open(
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, make_parents=True)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return virtual

    # -- history -----------------------------------------------------------------------------

    # The sync and async hooks share one implementation: the budgeted history, with no I/O
    # to await (LangChain calls one or the other by how the agent is run).

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        return handler(self.budget_history(request))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
                               ) -> ModelResponse:
        return await handler(self.budget_history(request))

    def budget_history(self, request: ModelRequest) -> ModelRequest:
        """`request` with oversized earlier tool results shown as synopses (request only)."""
        messages = request.messages
        over = self._oversized.of_request(request)
        if not over:
            return request
        shown = list(messages)
        for position in over:
            shown[position] = self._history_synopsis(messages[position])
        return overridden(request, messages=shown)

    def _over_from(self, before: tuple[int, ...], messages: Sequence[Any],
                   done: int) -> tuple[int, ...]:
        """`before` and the positions, from `done` on, of the tool results to show as synopses."""
        found = tuple(i for i, m in enumerate(messages[done:] if done else messages, done)
                      if isinstance(m, ToolMessage) and self._over(m)
                      and _text(m.content) is not None)
        return before + found if found else before

    def _synopsis_copy(self, message: ToolMessage) -> ToolMessage:
        text = _text(message.content) or ""
        content = synopsis(text, describe(text, message.name or ""), path=None,
                           head=self.config.fallback_head_chars,
                           tail=self.config.fallback_tail_chars)
        return message.model_copy(update={"content": content})


def _tool_messages(result: Any) -> list[ToolMessage]:
    if isinstance(result, ToolMessage):
        return [result]
    if isinstance(result, Command) and isinstance(result.update, Mapping):
        messages = result.update.get("messages")
        if isinstance(messages, list):
            return [m for m in messages if isinstance(m, ToolMessage)]
    return []


def _size(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    return len(message_text(content)) if isinstance(content, list) else 0


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    return joined_text(content) if isinstance(content, list) else None


def build(ctx: BuildContext) -> ToolOutputBudgetMiddleware:
    """Factory named in the manifest: files go through the build's `PATHS` service.

    It registers itself as the build's `OUTPUT_BUDGET_SERVICE`, so the sandbox
    hands it a command's whole output instead of cutting it first.
    """
    config = ctx.plugin_config(ToolOutputConfig)
    layout = ctx.services.typed(PATHS, PathLayout) if PATHS in ctx.services else None
    middleware = ToolOutputBudgetMiddleware(layout, config)
    ctx.services.items.setdefault(OUTPUT_BUDGET_SERVICE, middleware)
    return middleware
