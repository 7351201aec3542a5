"""system_message_coalescing: a merge is reused only for parts that merge the same way.

The merge itself, its order and the reminder rule are in `test_dynamic_context.py`
(with the plugins that add system messages, through real graphs); here, the
store of merges the middleware keeps across calls and threads, and the request
copy it sends on.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware.types import ModelRequest
from langchain_core.messages import HumanMessage, SystemMessage

from antler.plugins._lib.requestcopy import overridden
from antler.plugins.system_message_coalescing.middleware import (
    SystemMessageCoalescingMiddleware,
    coalesce,
)

PROMPT = SystemMessage("You are a helpful agent.")


def reminder(message_id: str, date: str = "2026-12-06", **extra: Any) -> SystemMessage:
    return SystemMessage(f"<system-reminder>{date}</system-reminder>", id=message_id,
                         additional_kwargs={"dynamic_context_reminder": True, **extra})


def sent(middleware: SystemMessageCoalescingMiddleware, messages: list[Any],
         system: SystemMessage | None = PROMPT) -> Any:
    request = ModelRequest(model=None, messages=messages, system_message=system, tools=[],
                           state={"messages": messages}, runtime=None)
    return middleware.wrap_model_call(request, lambda r: r)


def test_threads_with_equal_reminders_share_one_merge() -> None:
    """Each thread's reminder has its own id; the merged message is the same."""
    middleware = SystemMessageCoalescingMiddleware()
    first = sent(middleware, [HumanMessage("a", id="h1"), reminder("r1")])
    second = sent(middleware, [HumanMessage("b", id="h2"), reminder("r2")])
    assert second.system_message is first.system_message
    assert second.messages == [HumanMessage("b", id="h2")]


def test_a_part_that_differs_in_what_a_merge_reads_gets_its_own_merge() -> None:
    middleware = SystemMessageCoalescingMiddleware()
    base = sent(middleware, [HumanMessage("a"), reminder("r1")])
    for messages, system in (
            ([HumanMessage("a"), reminder("r2", date="2026-12-07")], PROMPT),
            ([HumanMessage("a"), reminder("r3", source="other")], PROMPT),
            ([HumanMessage("a"), reminder("r4")], SystemMessage(PROMPT.content, id="p")),
            ([HumanMessage("a"), reminder("r5")], SystemMessage([{"type": "text",
                                                                  "text": PROMPT.content}])),
    ):
        got = sent(middleware, messages, system)
        expected = coalesce(system, messages)
        assert expected is not None
        assert got.system_message.__dict__ == expected[0].__dict__
        assert got.system_message is not base.system_message


def test_the_copy_sent_on_equals_what_override_makes() -> None:
    messages = [HumanMessage("a", id="h"), reminder("r")]
    request = ModelRequest(model=None, messages=messages, system_message=PROMPT, tools=[],
                           state={"messages": messages}, runtime=None, model_settings={"t": 1})
    merged, rest = coalesce(PROMPT, messages)  # type: ignore[misc]
    ours = overridden(request, system_message=merged, messages=rest)
    theirs = request.override(system_message=merged, messages=rest)
    assert type(ours) is type(theirs) and ours.__dict__ == theirs.__dict__
    assert request.messages is messages and request.system_message is PROMPT  # untouched
