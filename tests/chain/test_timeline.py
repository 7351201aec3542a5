"""The per-turn timeline of docs/chain.md#turn-timeline, asserted on the real lead chain.

The timeline is reproduced with LangChain's actual dispatch rules, which a
layer-by-layer account glosses over in two places: `before_model` nodes run before the model
node, inside which the `wrap_model_call` chain runs (so ViewImage's
before_model precedes DanglingToolCall's wrapper), and `after_*` hooks run in
reverse list order (so Memory's after_agent runs before Sandbox's).
"""

from __future__ import annotations

import re

import pytest

from antler.runtime.demo import THREAD_ID, USER_ID, render_demo, run_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("demo"))


# The eleven core layers (docs/chain.md#eleven-layers). Other plugins (the sanitizers, ...)
# run too; they have their own tests, and are filtered out of the comparison here.
ELEVEN_LAYERS = {"thread_data", "uploads", "sandbox", "dangling_tool_call", "summarization",
                 "todo", "title", "memory", "view_image", "subagent_limit", "clarification"}


def lead_hooks(tracer):
    return [(p, h) for p, h in tracer.hooks() if p in ELEVEN_LAYERS]


def test_turn_one_follows_the_section_6_12_timeline(demo):
    hooks = lead_hooks(demo.tracers[0])
    model_round = [
        ("clarification", "before_model"),
        ("dangling_tool_call", "wrap_model_call"),
        # after_model in reverse list order: subagent_limit (later in the list) first.
        ("subagent_limit", "after_model"),
        ("title", "after_model"),
    ]
    assert hooks == [
        # T0: before_agent in list order.
        ("thread_data", "before_agent"), ("uploads", "before_agent"),
        ("sandbox", "before_agent"),
        # T1/T2: the first model call and its after_model hooks.
        *model_round,
        # T3: every tool call passes through the clarification gate.
        ("clarification", "wrap_tool_call"), ("clarification", "wrap_tool_call"),
        # T4/T5: the second model call.
        *model_round,
        # T6: after_agent in reverse list order.
        ("memory", "after_agent"), ("sandbox", "after_agent"),
    ]


def test_turn_one_effects(demo):
    state = demo.turns[0]
    messages = state["messages"]
    # The uploads block names both files, inside the user's own message.
    user = next(m for m in messages if m.type == "human" and "Analyse" in str(m.content))
    assert "<uploaded_files>" in user.content
    assert "sales.csv" in user.content and "notes.md" in user.content
    # The interrupted call was repaired in the request only: state keeps the dangling call.
    assert not any(m.type == "tool" and m.tool_call_id == "call_interrupted" for m in messages)
    dangling = [e for e in demo.tracers[0].events
                if (e.plugin, e.hook) == ("dangling_tool_call", "wrap_model_call")]
    before, after = map(int, re.match(r"messages (\d+) -> (\d+)", dangling[0].summary).groups())
    assert after == before + 1  # one placeholder inserted
    # The shell ran in the sandbox; the subagent's answer came back through `task`.
    tools = {m.name: m for m in messages if m.type == "tool"}
    assert "sales.csv" in tools["bash"].content and tools["bash"].status != "error"
    assert "campaign calendar" in tools["task"].content
    assert state["sandbox"]["sandbox_id"]
    assert state["title"] == "Sales data analysis"


def test_directories_are_created_together_by_the_first_tool_use(demo):
    for name in ("workspace", "uploads", "outputs"):
        assert (demo.thread_dir / name).is_dir()
    assert {p.name for p in (demo.thread_dir / "uploads").iterdir()} == {"sales.csv", "notes.md"}


def test_turn_two_asks_for_clarification_and_stops(demo):
    state = demo.turns[1]
    last = state["messages"][-1]
    assert last.type == "tool" and last.name == "ask_clarification"
    assert last.artifact["human_input"]["question"] == "Which region should the forecast cover?"
    hooks = lead_hooks(demo.tracers[1])
    # One model call only: the run ended at the clarification, not back at the model.
    assert hooks.count(("dangling_tool_call", "wrap_model_call")) == 1
    assert hooks[-2:] == [("memory", "after_agent"), ("sandbox", "after_agent")]


def test_memory_was_submitted_and_stored_for_the_user(demo):
    assert demo.memory == ["The user tracks monthly revenue by region."]
    assert demo.store == str(demo.base_dir / "store.sqlite")
    assert f"1 fact(s) about {USER_ID} in the store" in render_demo(demo)


def test_the_checkpoint_holds_the_thread_and_the_report_says_where(demo):
    assert demo.checkpoint.exists()
    report = render_demo(demo)
    assert str(demo.thread_dir) in report and str(demo.checkpoint) in report
    assert "thread_data -> uploads -> sandbox -> dangling_tool_call" in report
    assert THREAD_ID in str(demo.thread_dir)
