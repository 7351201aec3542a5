"""View image: show images read by `view_image` to a vision model once, then forget them.

A tool result is text, so a model cannot see an image through it. The
`view_image` tool therefore only loads the image into the `viewed_images` state
channel, and this middleware shows it:

* `before_model`: when the latest assistant message called `view_image` and
  every one of those calls has its `ToolMessage`, it appends ONE hidden
  `HumanMessage` whose content is the images as `image_url` blocks (base64
  data URLs). The message is recognised by a reserved id prefix *and* a
  marker in `additional_kwargs` naming the assistant message it answers;
  both must match, so a user message that merely borrows the prefix is never
  treated as injected. At most one is injected per assistant message (its id
  is derived from that message's id, and an existing one is never replaced).
* `after_model`: the model has seen the images; it emits `RemoveMessage` for
  every injected message and clears `viewed_images`. `before_model`, `model`
  and `after_model` are separate graph nodes, so the checkpoints written by
  the first two still hold the payload; every checkpoint from `after_model` on
  does not, and neither does the final state.

`before_model` also drops injected messages left over from a run that stopped
between injection and `after_model` (a model error), so a stale payload is
not carried into later requests.

Where it sits: after `memory` and before `@guards_end` (docs/chain.md#view_image). Its
`before_model` runs after summarization and todo have rewritten the history,
so the image message is appended to the history the model will actually get
and is never summarized. `after_model` hooks run in reverse chain order, so
the plugins placed before it (title, memory) only ever see the history with
the image message already removed. Vision models only: the manifest joins it
when `supports_vision` is true.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)

from antler.plugin_api import BuildContext, hidden_marker

from .tool import STATE_KEY, TOOL_NAME

__all__ = [
    "INJECTED_ID_PREFIX",
    "INJECTED_MARKER",
    "ViewImageMiddleware",
    "ViewImageState",
    "ViewedImage",
    "build",
    "image_message",
    "is_injected",
    "merge_viewed_images",
]

INJECTED_ID_PREFIX = "antler-view-image:"
"""Reserved id prefix of injected image messages (followed by the assistant message id)."""

INJECTED_MARKER = "antler_view_image"
"""`additional_kwargs` key of injected image messages: ``{"for_message": <AI id>,
"paths": [...]}``. Server-owned: an application relaying user messages must not
let callers set it."""


class ViewedImage(TypedDict):
    """One image loaded by `view_image`."""

    base64: str
    mime_type: str


def merge_viewed_images(current: dict[str, ViewedImage] | None,
                        update: dict[str, ViewedImage] | None) -> dict[str, ViewedImage]:
    """Reducer of `viewed_images`: parallel `view_image` calls merge; `{}` clears."""
    if update is None:
        return dict(current or {})
    if not update:
        return {}
    return {**(current or {}), **update}


class ViewImageState(AgentState[Any]):
    """State added by view_image: images waiting to be shown, private to the graph."""

    viewed_images: NotRequired[
        Annotated[dict[str, ViewedImage], PrivateStateAttr, merge_viewed_images]
    ]


def is_injected(message: BaseMessage) -> bool:
    """Whether `message` is an image message this middleware injected."""
    return (isinstance(message, HumanMessage)
            and isinstance(message.id, str) and message.id.startswith(INJECTED_ID_PREFIX)
            and isinstance(message.additional_kwargs.get(INJECTED_MARKER), Mapping))


class ViewImageMiddleware(AgentMiddleware[ViewImageState, Any, Any]):
    """Shows `view_image` results to the model in one hidden message, then removes it."""

    state_schema = ViewImageState

    def __init__(self, tool_name: str = TOOL_NAME) -> None:
        super().__init__()
        self.tool_name = tool_name

    # The sync and async hooks share one implementation: the work is pure state
    # inspection, with no I/O to await.

    def before_model(self, state: ViewImageState, runtime: Any) -> dict[str, Any] | None:
        """Inject the images of the latest `view_image` calls, once they all have results."""
        return self.show_images(state)

    async def abefore_model(self, state: ViewImageState,
                            runtime: Any) -> dict[str, Any] | None:
        """Async form of `before_model` (pure state edit, no I/O)."""
        return self.show_images(state)

    def after_model(self, state: ViewImageState, runtime: Any) -> dict[str, Any] | None:
        """Remove the injected image messages and clear `viewed_images`: the model saw them."""
        return self.forget_images(state)

    async def aafter_model(self, state: ViewImageState,
                           runtime: Any) -> dict[str, Any] | None:
        """Async form of `after_model` (pure state edit, no I/O)."""
        return self.forget_images(state)

    def show_images(self, state: ViewImageState) -> dict[str, Any] | None:
        """The `before_model` update: stale injections removed, at most one new one added."""
        messages = state.get("messages") or []
        ai_message = _last_ai_message(messages)
        ai_id = ai_message.id if ai_message is not None else None
        injected = [m for m in messages if is_injected(m)]
        current = [m for m in injected
                   if m.additional_kwargs[INJECTED_MARKER].get("for_message") == ai_id]
        update: list[Any] = [RemoveMessage(id=m.id) for m in injected
                             if m.id and all(m is not c for c in current)]
        if ai_message is not None and not current and self._ready(messages, ai_message):
            images = state.get(STATE_KEY)
            if isinstance(images, Mapping) and images:
                update.append(image_message(ai_message, images))
        return {"messages": update} if update else None

    def forget_images(self, state: ViewImageState) -> dict[str, Any] | None:
        """The `after_model` update: every injected message removed, `viewed_images` cleared."""
        messages = state.get("messages") or []
        update: dict[str, Any] = {}
        removals = [RemoveMessage(id=m.id) for m in messages if is_injected(m) and m.id]
        if removals:
            update["messages"] = removals
        if state.get(STATE_KEY):
            update[STATE_KEY] = {}
        return update or None

    def _ready(self, messages: Sequence[AnyMessage], ai_message: AIMessage) -> bool:
        """Whether `ai_message` called the tool and every such call has its result."""
        wanted = {call.get("id") for call in ai_message.tool_calls
                  if call.get("name") == self.tool_name}
        if not wanted:
            return False
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        return wanted <= answered


def image_message(ai_message: AIMessage, images: Mapping[str, ViewedImage]) -> HumanMessage:
    """The hidden message showing `images`, answering `ai_message`."""
    content: list[str | dict[str, Any]] = [{
        "type": "text",
        "text": "The images you asked to view with view_image (this message is not shown "
                "to the user):",
    }]
    for path, image in images.items():
        content.append({"type": "text", "text": f"{path} ({image['mime_type']}):"})
        content.append({"type": "image_url", "image_url": {
            "url": f"data:{image['mime_type']};base64,{image['base64']}"}})
    return HumanMessage(
        content=content,
        id=f"{INJECTED_ID_PREFIX}{ai_message.id or uuid.uuid4().hex}",
        additional_kwargs={
            INJECTED_MARKER: {"for_message": ai_message.id, "paths": list(images)},
            # The marker every hidden message carries (`antler.contracts.messages`),
            # by which a served API client tells it from the conversation.
            **hidden_marker("view_image"),
            "hide_from_ui": True,
        },
    )


def _last_ai_message(messages: Sequence[AnyMessage]) -> AIMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def build(ctx: BuildContext) -> ViewImageMiddleware:
    """Factory named in the manifest; the tool comes from the plugin's `antler_tools` hook."""
    return ViewImageMiddleware()
