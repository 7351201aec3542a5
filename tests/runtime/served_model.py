"""The lead model of the `langgraph dev` servers the served-API tests start.

One server serves many test modules, each test on threads of its own, in any order,
and a run a test cancels stops partway. A script read front to back would give each
run whatever turn the runs before it left. This one answers from the conversation
instead: the user's latest message picks its turns (`TURNS`), and how many assistant
replies follow that message picks the turn; any other message gets one plain answer.
It is a `ScriptedChatModel` whose every turn is such a callable (the server builds it
from the operator config's `models.named.<name>.use`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from antler.plugin_api import latest_user_message, user_text
from antler.runtime.models import ScriptedChatModel

WRITE_IT = [
    # a sandbox command that writes kept.txt and, in a thread whose uploads hold `slow`,
    # then sleeps and writes late.txt; then a file written by the write_file tool
    {"content": "", "tool_calls": [{"name": "bash", "args": {"command": (
        "echo kept > /mnt/user-data/outputs/kept.txt; "
        "if [ -e /mnt/user-data/uploads/slow ]; then sleep 5; "
        "echo late > /mnt/user-data/outputs/late.txt; fi; echo written")}}]},
    {"content": "", "tool_calls": [{"name": "write_file", "args": {
        "path": "/mnt/user-data/outputs/after.txt", "content": "after"}}]},
    "done",
]
TURNS: dict[str, list[Any]] = {
    "hello there": [
        {"content": "", "tool_calls": [{"name": "bash", "args": {
            "command": "echo hello > /mnt/user-data/outputs/hello.txt && echo written"}}]},
        "first answer",
    ],
    "second": ["second answer"],
    "write it": WRITE_IT,
}
"""The user's message -> the model's turns answering it, in order."""
OTHERWISE = "answer"
"""The reply to a message `TURNS` does not name."""
MAX_CALLS = 10_000


def answer(messages: list[BaseMessage]) -> Any:
    """The turn for this request: by the user's latest message and the replies since."""
    user = latest_user_message(messages)
    if user is None:
        return OTHERWISE
    position = next(i for i in range(len(messages) - 1, -1, -1) if messages[i] is user)
    replies = sum(isinstance(m, AIMessage) for m in messages[position + 1:])
    turns = TURNS.get(user_text(user).strip(), [OTHERWISE])
    if replies >= len(turns):
        raise AssertionError(f"the model was called again after its last turn for "
                             f"{user_text(user)!r}: {len(turns)} turns, call {replies + 1}")
    return turns[replies]


class ConversationModel(ScriptedChatModel):
    """A scripted model answering each request by its conversation (`answer`)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__([answer] * MAX_CALLS, model_name="conversation", **settings)
