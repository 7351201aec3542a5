"""The memory plugin and the core memory service (queue, store, extraction).

Graph tests keep `debounce_seconds` at its default (30) so nothing is processed
behind the test's back, and call `flush()` to process. Extraction gets its own
ScriptedChatModel through the `memory_model` service.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from antler.chain.config import parse_config
from antler.contracts.messages import hidden_marker
from antler.errors import ConfigError
from antler.plugin_api.context import MEMORY_MODEL, MEMORY_QUEUE, RuntimeOptions
from antler.plugin_api.registry import discover
from antler.plugins._lib.memory import (
    FactExtractor,
    MemoryFile,
    MemoryStore,
    MemoryUpdate,
    MemoryUpdateQueue,
    QueueClosedError,
    conversation_text,
    parse_facts,
)
from antler.plugins.memory import middleware as memory_module
from antler.plugins.memory.middleware import filter_messages_for_memory, is_injected
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from antler.runtime.storage import open_store

QUIET = "title: {enabled: false}\n"
UPLOAD_BLOCK = (
    "<uploaded_files>\nThe user uploaded:\n- /mnt/user-data/uploads/cv.pdf (12 KB)\n"
    "</uploaded_files>\n\n"
)


@pytest.fixture(scope="module")
def registry():
    return discover()


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def make_agent(tmp_path, registry, model, *, text=QUIET, memory_model=None, services=None,
               **runtime):
    services = dict(services or {})
    if memory_model is not None:
        services[MEMORY_MODEL] = memory_model
    return create_agent(parse_config(text, registry), model=model, checkpointer="memory",
                        base_dir=tmp_path, services=services, tools=[lookup],
                        runtime=RuntimeOptions(**runtime))


def stored_facts(base, user_id):
    """The user's facts in the default shared store under `base`, as another process sees them."""
    store = open_store("sqlite", base)
    try:
        return MemoryStore(store).facts(user_id)
    finally:
        store.close()


def test_after_agent_queues_only_user_inputs_and_final_replies(tmp_path, registry):
    model = ScriptedChatModel([
        {"content": "Let me check.", "tool_calls": [{"name": "lookup", "args": {"topic": "cv"}}]},
        "Your CV looks strong.",
    ])
    with make_agent(tmp_path, registry, model, agent_name="career-coach") as agent:
        agent.invoke(UPLOAD_BLOCK + "I am a nurse. Please review my CV.", thread_id="t1",
                     user_id="alice")
        queue = agent.services.get(MEMORY_QUEUE)
        (update,) = queue.pending
        queue.close(flush=False)

    assert (update.thread_id, update.user_id, update.agent_name) == (
        "t1", "alice", "career-coach")
    assert [(type(m).__name__, m.content) for m in update.messages] == [
        ("HumanMessage", "I am a nurse. Please review my CV."),
        ("AIMessage", "Your CV looks strong."),
    ]
    assert not any(isinstance(m, ToolMessage) for m in update.messages)
    assert not any("uploaded_files" in m.content for m in update.messages)


def test_debounce_replaces_the_pending_submission_of_the_same_thread(tmp_path, registry):
    model = ScriptedChatModel(["one", "two", "three"])
    with make_agent(tmp_path, registry, model) as agent:
        agent.invoke("first", thread_id="t1", user_id="alice")
        agent.invoke("second", thread_id="t1", user_id="alice")
        agent.invoke("other thread", thread_id="t2", user_id="alice")
        queue = agent.services.get(MEMORY_QUEUE)
        pending = queue.pending
        queue.close(flush=False)

    assert queue.replaced == 1
    assert [u.thread_id for u in pending] == ["t1", "t2"]
    # The replacement carries the whole conversation, so nothing was lost.
    assert [m.content for m in pending[0].messages] == ["first", "one", "second", "two"]


def test_flush_stores_facts_under_that_user_only(tmp_path, registry):
    model = ScriptedChatModel(["Noted, green tea it is."])
    extractor = ScriptedChatModel(['["Prefers green tea.", "Works night shifts."]'])
    with make_agent(tmp_path, registry, model, memory_model=extractor) as agent:
        agent.invoke("I drink green tea on my night shifts.", thread_id="t1", user_id="alice")
        assert agent.services.get(MEMORY_QUEUE).flush() == 1

    facts = stored_facts(tmp_path, "alice")
    assert [f.content for f in facts] == ["Prefers green tea.", "Works night shifts."]
    assert {f.source_thread for f in facts} == {"t1"}
    assert all(f.created_at and f.updated_at for f in facts)
    assert stored_facts(tmp_path, "bob") == []
    assert not list(tmp_path.rglob("memory.json"))  # the files of earlier versions
    assert "I drink green tea" in extractor.calls[0][-1].text


def test_closing_the_agent_flushes_the_queue_it_created(tmp_path, registry):
    model = ScriptedChatModel(["Hello Bob."])
    extractor = ScriptedChatModel(['["Is called Bob."]'])
    with make_agent(tmp_path, registry, model, memory_model=extractor) as agent:
        agent.invoke("I'm Bob.", thread_id="t9", user_id="bob")
        assert stored_facts(tmp_path, "bob") == []
    facts = stored_facts(tmp_path, "bob")
    assert [f.content for f in facts] == ["Is called Bob."]
    assert agent.services.get(MEMORY_QUEUE).closed


def test_malformed_extraction_output_does_not_crash(tmp_path, registry):
    model = ScriptedChatModel(["a", "b"])
    extractor = ScriptedChatModel(["{this is not json", "Sure! Facts:\n- Lives in Oslo\n\n*  "])
    with make_agent(tmp_path, registry, model, memory_model=extractor) as agent:
        queue = agent.services.get(MEMORY_QUEUE)
        agent.invoke("hello", thread_id="t1", user_id="carol")
        assert queue.flush() == 1
        assert stored_facts(tmp_path, "carol") == []
        agent.invoke("I live in Oslo", thread_id="t1", user_id="carol")
        assert queue.flush() == 1
    assert [f.content for f in stored_facts(tmp_path, "carol")] == ["Lives in Oslo"]
    assert queue.failed == 0


def test_a_failing_extraction_model_is_logged_not_raised(tmp_path, registry, caplog):
    def boom(_messages):
        raise RuntimeError("provider down")

    model = ScriptedChatModel(["a"])
    with make_agent(tmp_path, registry, model, memory_model=ScriptedChatModel([boom])) as agent:
        agent.invoke("hello", thread_id="t1", user_id="dave")
        queue = agent.services.get(MEMORY_QUEUE)
        assert queue.flush() == 0
    assert queue.failed == 1
    assert "memory update of thread 't1'" in caplog.text


def test_memory_disabled_means_not_in_chain_and_nothing_queued(tmp_path, registry):
    class Recorder:
        def __init__(self):
            self.added = []

        def add(self, **kwargs):
            self.added.append(kwargs)

    recorder = Recorder()
    model = ScriptedChatModel(["ok"])
    text = QUIET + "memory: {enabled: false}\n"
    with make_agent(tmp_path, registry, model, text=text,
                    services={MEMORY_QUEUE: recorder}) as agent:
        agent.invoke("remember that I like jazz", thread_id="t1", user_id="erin")
        assert "memory" not in agent.chain.names
    assert recorder.added == []
    with make_agent(tmp_path, registry, ScriptedChatModel(["ok"]), text=text) as agent:
        agent.invoke("hi", thread_id="t1")
        assert MEMORY_QUEUE not in agent.services
    assert not (tmp_path / "store.sqlite").exists()  # nothing opened the shared store


def test_a_provided_queue_is_used_and_not_closed_by_the_agent(tmp_path, registry):
    seen = []
    queue = MemoryUpdateQueue(seen.append, debounce_seconds=30)
    with make_agent(tmp_path, registry, ScriptedChatModel(["ok"]),
                    services={MEMORY_QUEUE: queue}) as agent:
        agent.invoke("hi", thread_id="t1")
    assert not queue.closed and len(queue) == 1
    queue.close()
    assert [u.thread_id for u in seen] == ["t1"]


def test_async_runs_queue_too(tmp_path, registry):
    with make_agent(tmp_path, registry, ScriptedChatModel(["ok"])) as agent:
        asyncio.run(agent.graph.ainvoke(agent.input("hi"), config=agent.run_config("t1"),
                                        context=agent.context("t1", user_id="fay")))
        queue = agent.services.get(MEMORY_QUEUE)
        assert [(u.thread_id, u.user_id) for u in queue.pending] == [("t1", "fay")]
        queue.close(flush=False)


@pytest.mark.parametrize(("section", "expected"), [
    ("debounce_seconds: -1", "greater than or equal to 0"),
    ("max_facts: 0", "greater than or equal to 1"),
    ("debounce: 5", "did you mean 'debounce_seconds'"),
])
def test_invalid_config_is_refused(registry, section, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_config(f"memory:\n  {section}\n", registry)


# -- filtering ---------------------------------------------------------------------------


def test_filter_drops_tools_injected_and_hidden_messages():
    call = {"name": "lookup", "args": {}, "id": "c1", "type": "tool_call"}
    messages = [
        SystemMessage("system"),
        HumanMessage("Here is a summary", additional_kwargs={"lc_source": "summarization"}),
        HumanMessage(UPLOAD_BLOCK.strip()),  # nothing but an upload block
        HumanMessage([{"type": "text", "text": UPLOAD_BLOCK + "What is in"}, " my file?"]),
        AIMessage("Checking", tool_calls=[call]),
        ToolMessage("file contents", tool_call_id="c1"),
        HumanMessage("<system_reminder>todos</system_reminder>", name="todo_reminder",
                     additional_kwargs=hidden_marker("todo")),
        HumanMessage("forged: a caller's own message", name="todo_reminder"),
        HumanMessage("image data", additional_kwargs={"hidden": True}),
        AIMessage(""),
        AIMessage([{"type": "text", "text": "It is a CV."}]),
    ]
    kept = filter_messages_for_memory(messages)
    assert [(type(m).__name__, m.content) for m in kept] == [
        ("HumanMessage", "What is in\n my file?"),
        ("HumanMessage", "forged: a caller's own message"),  # a name hides nothing
        ("AIMessage", "It is a CV."),
    ]
    assert is_injected(messages[1]) and is_injected(messages[6]) and is_injected(messages[8])
    assert not is_injected(messages[3]) and not is_injected(messages[7])


# -- queue -------------------------------------------------------------------------------


def _update(thread: str, user: str = "u", text: str = "hi") -> MemoryUpdate:
    return MemoryUpdate(thread_id=thread, user_id=user, messages=(HumanMessage(text),))


def test_queue_debounces_per_user_and_thread():
    seen: list[MemoryUpdate] = []
    queue = MemoryUpdateQueue(seen.append, debounce_seconds=30)
    assert queue.submit(_update("t1", text="a")) is False
    assert queue.submit(_update("t1", text="b")) is True
    queue.submit(_update("t1", user="other"))  # same thread id, another user: separate
    assert len(queue) == 2 and seen == []
    assert queue.flush() == 2
    assert [(u.user_id, u.messages[0].content) for u in seen] == [("u", "b"), ("other", "hi")]
    assert queue.flush() == 0
    queue.close()


def test_timer_thread_processes_due_updates():
    done = threading.Event()
    seen: list[MemoryUpdate] = []

    def process(update):
        seen.append(update)
        done.set()

    queue = MemoryUpdateQueue(process, debounce_seconds=0)
    queue.add(thread_id="t1", user_id="u", messages=[HumanMessage("hi")])
    assert done.wait(5)
    assert [u.thread_id for u in seen] == ["t1"] and len(queue) == 0
    queue.close()


def test_timer_waits_for_the_debounce_and_restarts_it():
    clock = [100.0]
    seen: list[MemoryUpdate] = []
    queue = MemoryUpdateQueue(seen.append, debounce_seconds=10, clock=lambda: clock[0])
    queue.submit(_update("t1", text="a"))
    clock[0] = 105.0
    queue.submit(_update("t1", text="b"))  # due at 115 now, not 110
    clock[0] = 112.0
    with queue._cond:
        queue._cond.notify_all()
    assert not done_within(lambda: seen, 0.1)
    clock[0] = 115.0
    with queue._cond:
        queue._cond.notify_all()
    assert done_within(lambda: seen, 5)
    assert [u.messages[0].content for u in seen] == ["b"]
    queue.close()


def done_within(predicate, seconds: float) -> bool:
    event = threading.Event()
    deadline = seconds
    step = 0.01
    while deadline > 0:
        if predicate():
            return True
        event.wait(step)
        deadline -= step
    return bool(predicate())


def test_close_flushes_and_refuses_later_submissions():
    seen: list[MemoryUpdate] = []
    queue = MemoryUpdateQueue(seen.append, debounce_seconds=30)
    queue.submit(_update("t1"))
    queue.close()
    queue.close()  # idempotent
    assert len(seen) == 1
    with pytest.raises(QueueClosedError):
        queue.submit(_update("t2"))


def test_processor_errors_are_counted_and_the_queue_keeps_going():
    calls = []

    def process(update):
        calls.append(update.thread_id)
        if update.thread_id == "bad":
            raise ValueError("boom")

    queue = MemoryUpdateQueue(process, debounce_seconds=30)
    queue.submit(_update("bad"))
    queue.submit(_update("good"))
    assert queue.flush() == 1
    assert (queue.failed, queue.processed, calls) == (1, 1, ["bad", "good"])
    queue.close()


def test_negative_debounce_is_refused():
    with pytest.raises(ValueError, match="debounce_seconds"):
        MemoryUpdateQueue(print, debounce_seconds=-1)


# -- the JSON files of earlier versions (read by `antler memory import`) ------------


def test_json_file_dedupes_and_writes_atomically(tmp_path):
    store = MemoryFile(tmp_path)
    added = store.add_facts("alice", ["Likes tea.", "likes  TEA", "Has a cat"],
                            source_thread="t1")
    assert [f.content for f in added] == ["Likes tea.", "Has a cat"]
    assert store.add_facts("alice", ["Has a cat."], source_thread="t2") == []
    facts = store.facts("alice")
    assert [(f.content, f.source_thread) for f in facts] == [("Likes tea.", "t1"),
                                                             ("Has a cat", "t1")]
    directory = tmp_path / "users" / "alice"
    # No temporary files left; the lock file stays (processes must share its inode).
    assert sorted(os.listdir(directory)) == ["memory.json", "memory.json.lock"]


def test_json_file_caps_facts_keeping_the_most_recent(tmp_path):
    store = MemoryFile(tmp_path, max_facts=3)
    store.add_facts("u", ["one", "two", "three"])
    store.add_facts("u", ["four"])
    assert [f.content for f in store.facts("u")] == ["two", "three", "four"]


def test_json_file_sets_a_corrupt_file_aside_instead_of_overwriting_it(tmp_path):
    path = tmp_path / "users" / "u" / "memory.json"
    path.parent.mkdir(parents=True)
    path.write_text("{definitely not json", encoding="utf-8")
    store = MemoryFile(tmp_path)
    assert store.facts("u") == []
    store.add_facts("u", ["New fact"])
    assert [f.content for f in store.facts("u")] == ["New fact"]
    backups = [p.name for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert len(backups) == 1
    assert (path.parent / backups[0]).read_text(encoding="utf-8") == "{definitely not json"


def test_json_file_keeps_readable_facts_of_a_partly_damaged_file(tmp_path):
    path = tmp_path / "users" / "u" / "memory.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"facts": [{"content": "Old fact"}, 42, {"x": 1}]}),
                    encoding="utf-8")
    store = MemoryFile(tmp_path)
    assert [f.content for f in store.facts("u")] == ["Old fact"]
    store.add_facts("u", ["New fact"])
    assert [f.content for f in store.facts("u")] == ["Old fact", "New fact"]


@pytest.mark.parametrize("user_id", ["../escape", "a/b", "", ".."])
def test_json_file_refuses_user_ids_that_are_not_directory_names(tmp_path, user_id):
    with pytest.raises(ValueError, match="user id"):
        MemoryFile(tmp_path).add_facts(user_id, ["x"])


# -- extraction --------------------------------------------------------------------------


@pytest.mark.parametrize(("output", "expected"), [
    ('["Likes tea.", "Has a cat."]', ["Likes tea.", "Has a cat."]),
    ('```json\n["Likes tea."]\n```', ["Likes tea."]),
    ('Here you go: ["Likes tea."] Hope that helps', ["Likes tea."]),
    ('{"facts": ["Likes tea.", {"content": "Has a cat."}, 7]}', ["Likes tea.", "Has a cat."]),
    ("- Likes tea\n* Has a cat\n1. Lives in Oslo\n2) Speaks Dutch",
     ["Likes tea", "Has a cat", "Lives in Oslo", "Speaks Dutch"]),
    ("Facts:\n- Likes tea\n- likes tea", ["Likes tea"]),
    ("[]", []),
    ("None", []),
    ("No new facts.", []),
    ("{broken", []),
    ("[1, 2, null]", []),
    ("", []),
])
def test_parse_facts_accepts_many_shapes(output, expected):
    assert parse_facts(output) == expected


def test_parse_facts_caps_counts_and_lengths():
    many = json.dumps([f"fact {i}" for i in range(100)])
    assert len(parse_facts(many)) == 20
    assert len(parse_facts(many, max_facts=5)) == 5
    (long_fact,) = parse_facts(json.dumps(["word " * 200]), max_chars=50)
    assert len(long_fact) <= 53 and long_fact.endswith("...")
    assert parse_facts(None) == [] and parse_facts(AIMessage('["x"]')) == ["x"]
    assert parse_facts("tab\there\x00nul") == ["tab here nul"]


def test_extractor_prompt_and_empty_conversations():
    model = ScriptedChatModel(['["Is a nurse."]'])
    extractor = FactExtractor(model)
    assert extractor.extract([AIMessage("only the assistant")]) == []
    assert model.calls == []
    facts = extractor.extract([HumanMessage("I'm a nurse"), AIMessage("Nice")],
                              known_facts=["Likes tea."], title="Intro")
    assert facts == ["Is a nurse."]
    prompt = model.calls[0][-1].text
    assert "- Likes tea." in prompt and "User: I'm a nurse" in prompt
    assert "Assistant: Nice" in prompt and "Intro" in prompt


def test_conversation_text_keeps_the_most_recent_part():
    messages = [HumanMessage("x" * 100), AIMessage("y" * 100)]
    text = conversation_text(messages, max_chars=50)
    assert text.startswith("[... earlier conversation omitted ...]")
    assert text.endswith("y" * 50)


_PIECES = st.sampled_from(["<uploaded_files>", "</uploaded_files>", "\n", "\n\n\n", "a.csv",
                           " ", "text", "<uploaded_files", "\n\n"])


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=10).map("".join))
def test_the_memory_copy_text_is_the_patterns_text(text):
    # The cleaning skips a pattern whose literal start is absent: the same text results.
    expected = memory_module._BLANK_LINES.sub(
        "\n\n", memory_module._UPLOADED_FILES.sub("", text)).strip()
    assert memory_module._clean_text(HumanMessage(text)) == expected


def test_the_memory_file_keeps_no_lock_for_users_it_is_done_with(tmp_path):
    # A long-lived server writes memory for many users: a lock per user ever served,
    # kept for the life of the process, would grow without bound.
    memory = MemoryFile(tmp_path)
    for index in range(50):
        memory.add_facts(f"user-{index}", [f"fact {index}"])
        assert [fact.content for fact in memory.facts(f"user-{index}")] == [f"fact {index}"]
    assert len(memory._locks) == 0
    # Two threads writing one user's memory at once still lose no fact.
    writers = [threading.Thread(target=memory.add_facts, args=("shared", [f"fact {i}"]))
               for i in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert sorted(fact.content for fact in memory.facts("shared")) == sorted(
        f"fact {i}" for i in range(8))
    assert len(memory._locks) == 0
