"""The title plugin: one title after the first complete exchange, with a fallback.

Most tests give the title its own ScriptedChatModel through the `title_model`
service, so the agent's script is untouched. One test lets the title share the
agent's model, where the title call consumes a script turn (marked).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import Field

from antler.chain.config import parse_config
from antler.contracts.messages import hidden_marker
from antler.errors import ConfigError
from antler.plugin_api.context import (
    MODEL,
    TITLE_MODEL,
    BuildContext,
    ChainSecrets,
    RuntimeOptions,
    Services,
)
from antler.plugin_api.registry import discover
from antler.plugins.title import middleware as title_module
from antler.plugins.title.config import TitleConfig
from antler.plugins.title.middleware import (
    TitleMiddleware,
    build,
    clean_title,
    fallback_title,
    first_exchange,
    message_text,
)
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel
from tests.plugins.support import visible

QUIET = "memory: {enabled: false}\n"
LONG_QUESTION = ("Could you help me plan a two week cycling trip through Portugal and Spain "
                 "next spring?")


@pytest.fixture(scope="module")
def registry():
    return discover()


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


def make_agent(tmp_path, registry, model, title_model=None, text=QUIET, **kwargs):
    services = {TITLE_MODEL: title_model} if title_model is not None else None
    return create_agent(parse_config(text, registry), model=model, checkpointer="memory",
                        base_dir=tmp_path, services=services, **kwargs)


def test_title_is_generated_once_after_the_first_exchange(tmp_path, registry):
    model = ScriptedChatModel(["Here is a plan for Lisbon.", "You're welcome."])
    titler = ScriptedChatModel(['"Weekend in Lisbon"\n'])
    with make_agent(tmp_path, registry, model, titler) as agent:
        first = agent.invoke("Plan my weekend in Lisbon", thread_id="t1")
        second = agent.invoke("Thanks!", thread_id="t1")

    assert first["title"] == "Weekend in Lisbon"
    assert second["title"] == "Weekend in Lisbon"
    assert len(titler.calls) == 1  # never twice
    prompt = titler.calls[0][-1].text
    assert "Plan my weekend in Lisbon" in prompt and "Here is a plan for Lisbon." in prompt
    # The title call is not an agent message.
    assert [m.text for m in visible(second["messages"])] == [
        "Plan my weekend in Lisbon", "Here is a plan for Lisbon.", "Thanks!", "You're welcome.",
    ]


def test_title_waits_for_a_reply_without_tool_calls(tmp_path, registry):
    model = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "lookup", "args": {"city": "Oslo"}}]},
        "Oslo is sunny today.",
    ])
    titler = ScriptedChatModel(["Oslo weather"])
    with make_agent(tmp_path, registry, model, titler, tools=[lookup]) as agent:
        state = agent.invoke("Weather in Oslo?", thread_id="t1")
    assert state["title"] == "Oslo weather"
    assert len(titler.calls) == 1
    assert "Oslo is sunny today." in titler.calls[0][-1].text
    assert any(isinstance(m, ToolMessage) for m in state["messages"])


def test_the_agent_scripted_model_answers_titles_from_its_title_script(tmp_path, registry):
    model = ScriptedChatModel(["Bonjour !"], side_scripts={"title": ["Greeting in French"]})
    with make_agent(tmp_path, registry, model) as agent:
        state = agent.invoke("Say hello in French", thread_id="t1")
    assert state["title"] == "Greeting in French"
    assert model.position == 1  # the title call took none of the agent's turns
    assert [m.text for m in visible(state["messages"])] == ["Say hello in French",
                                                            "Bonjour !"]


def _raise(_messages):
    raise RuntimeError("title provider is down")


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_failing_title_model_falls_back_to_the_first_50_characters(tmp_path, registry, fuse):
    """On a title-model failure, the first 50 characters of the user's message."""
    model = ScriptedChatModel(["Sure, here is a route."])
    titler = ScriptedChatModel([_raise])
    with make_agent(tmp_path, registry, model, titler, fuse=fuse) as agent:
        state = agent.invoke(LONG_QUESTION, thread_id="t1")
    assert state["title"] == "Could you help me plan a two week cycling trip thr"
    assert len(state["title"]) == 50 and LONG_QUESTION.startswith(state["title"])


def _answered_before(agent: Any) -> None:
    """A first exchange completed while the thread got no title (the plugin was off then)."""
    agent.graph.update_state(agent.run_config("t1"), {"messages": [
        HumanMessage("Plan a trip", id="q1"), AIMessage("Where to?", id="a1")]})


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_only_the_first_complete_exchange_is_titled(tmp_path, registry, fuse):
    """The title follows the first complete exchange only, never a later one."""
    model = ScriptedChatModel(["Here is a plan for Lisbon."])
    titler = ScriptedChatModel(["Trip plan"])
    with make_agent(tmp_path, registry, model, titler, fuse=fuse) as agent:
        _answered_before(agent)
        state = agent.invoke("Lisbon, for a week", thread_id="t1")
    assert not state.get("title") and titler.calls == []


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_later_exchange_is_titled_when_configured(tmp_path, registry, fuse):
    model = ScriptedChatModel(["Here is a plan for Lisbon."])
    titler = ScriptedChatModel(["Trip plan"])
    config = QUIET + "title: {first_exchange_only: false}\n"
    with make_agent(tmp_path, registry, model, titler, text=config, fuse=fuse) as agent:
        _answered_before(agent)
        state = agent.invoke("Lisbon, for a week", thread_id="t1")
    assert state["title"] == "Trip plan"
    assert "Plan a trip" in titler.calls[0][-1].text  # from the thread's first message


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_failed_first_run_completes_no_exchange(tmp_path, registry, fuse):
    """An error notice is not a reply (title ignores it): the next answer is the first."""
    model = ScriptedChatModel([{"error": "generic"}, "Here is a plan."])
    titler = ScriptedChatModel(["Trip plan"])
    with make_agent(tmp_path, registry, model, titler, fuse=fuse) as agent:
        first = agent.invoke("Plan a trip", thread_id="t1")
        second = agent.invoke("Plan a trip, please", thread_id="t1")
    assert not first.get("title") and second["title"] == "Trip plan"


def test_empty_title_output_falls_back_to_the_whole_short_message(tmp_path, registry):
    model = ScriptedChatModel(["Hi!"])
    titler = ScriptedChatModel(['  ""\n\n'])
    with make_agent(tmp_path, registry, model, titler) as agent:
        state = agent.invoke("Hello there", thread_id="t1")
    assert state["title"] == "Hello there"


def test_structured_content_is_normalized_and_upload_blocks_dropped(tmp_path, registry):
    message = HumanMessage(content=[
        {"type": "text", "text": "<uploaded_files>\n- /mnt/user-data/uploads/sales.csv\n"
                                 "</uploaded_files>\n\nAnalyse the   quarterly"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        "sales figures",
    ])
    model = ScriptedChatModel(["Q3 grew by 4%."])
    titler = ScriptedChatModel([_raise])
    with make_agent(tmp_path, registry, model, titler) as agent:
        state = agent.invoke(message, thread_id="t1")
    prompt = titler.calls[0][-1].text
    assert "Analyse the quarterly sales figures" in prompt
    assert "uploaded_files" not in prompt and "sales.csv" not in prompt
    assert "base64" not in prompt
    assert state["title"] == "Analyse the quarterly sales figures"


def test_async_runs_generate_the_title(tmp_path, registry):
    model = ScriptedChatModel(["Fine, thanks."])
    titler = ScriptedChatModel(["Small talk"])
    with make_agent(tmp_path, registry, model, titler) as agent:
        state = asyncio.run(agent.graph.ainvoke(agent.input("How are you?"),
                                                config=agent.run_config("t1"),
                                                context=agent.context("t1")))
    assert state["title"] == "Small talk"


class _ChatRuns(BaseCallbackHandler):
    """A tracer's view: every chain run's id, and each chat model run's parent, tags and
    metadata."""

    def __init__(self) -> None:
        self.chains: set[Any] = set()
        self.models: list[dict[str, Any]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any,
                       **kwargs: Any) -> None:
        self.chains.add(run_id)

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.models.append(kwargs)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_a_tracer_sees_the_title_call_inside_the_run(tmp_path, registry, fuse, run_async):
    tracer = _ChatRuns()
    model = ScriptedChatModel(["Here is a plan for Lisbon."])
    titler = ScriptedChatModel(["Weekend in Lisbon"])
    with make_agent(tmp_path, registry, model, titler, fuse=fuse) as agent:
        args = (agent.input("Plan my weekend in Lisbon"),)
        kwargs = {"config": {**agent.run_config("t1"), "callbacks": [tracer]},
                  "context": agent.context("t1")}
        state = asyncio.run(agent.graph.ainvoke(*args, **kwargs)) if run_async \
            else agent.graph.invoke(*args, **kwargs)
    assert state["title"] == "Weekend in Lisbon"
    [title] = [run for run in tracer.models if run["metadata"].get("lc_source") == "title"]
    assert title["parent_run_id"] in tracer.chains  # a child of the node that made it
    assert title["metadata"]["thread_id"] == "t1" and "nostream" in title["tags"]
    assert title["name"] == "antler_title"


class _TitleGenerations(ScriptedChatModel):
    """A title model recording the callbacks each `generate` call is given."""

    given: list[Any] = Field(default_factory=list)

    def generate(self, messages: Any, stop: Any = None, callbacks: Any = None,
                 **kwargs: Any) -> Any:
        self.given.append((callbacks, kwargs))
        return super().generate(messages, stop, callbacks, **kwargs)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_an_unobserved_title_call_carries_only_its_own_config(tmp_path, registry, fuse):
    """With no handler and no tracing, the call skips the run's callback manager (what
    `invoke` would hand it), and keeps its own tags and metadata."""
    model = ScriptedChatModel(["Here is a plan for Lisbon."])
    titler = _TitleGenerations(["Weekend in Lisbon"])
    with make_agent(tmp_path, registry, model, titler, fuse=fuse) as agent:
        state = agent.invoke("Plan my weekend in Lisbon", thread_id="t1")
    assert state["title"] == "Weekend in Lisbon"
    [(callbacks, kwargs)] = titler.given
    assert callbacks is None and kwargs["tags"] == ["nostream"]
    assert kwargs["metadata"]["lc_source"] == "title" and kwargs["run_name"] == "antler_title"


def test_disabled_title_is_not_in_the_chain(tmp_path, registry):
    model = ScriptedChatModel(["ok"])
    with make_agent(tmp_path, registry, model, text=QUIET + "title: {enabled: false}\n") as agent:
        state = agent.invoke("hi", thread_id="t1")
        assert "title" not in agent.chain.names
    assert "title" not in state


def test_title_joins_only_the_lead_chain(registry):
    assert registry.specs["title"].chains == ["lead"]


# -- model choice and config -------------------------------------------------------------


def _context(config: TitleConfig, **services) -> BuildContext:
    return BuildContext("lead", discover().specs["title"], config, RuntimeOptions(),
                        Services(dict(services)), ChainSecrets())


def test_model_choice_prefers_the_service_then_config_then_the_agent_model(tmp_path):
    agent_model, service_model = ScriptedChatModel(), ScriptedChatModel()
    script = tmp_path / "title.yaml"
    script.write_text(yaml.safe_dump(["From config"]), encoding="utf-8")
    configured = TitleConfig(model=f"scripted:{script}")

    assert build(_context(configured, **{TITLE_MODEL: service_model,
                                         MODEL: agent_model})).model is service_model
    from_config = build(_context(configured, **{MODEL: agent_model})).model
    assert from_config.invoke("x").text == "From config"
    side = build(_context(TitleConfig(), **{MODEL: agent_model})).model
    assert side.model_name == "scripted-title"  # a scripted agent model's side script
    plain = GenericFakeChatModel(messages=iter(["A Title"]))
    assert build(_context(TitleConfig(), **{MODEL: plain})).model is plain


@pytest.mark.parametrize(("section", "expected"), [
    ("max_chars: 3", "greater than or equal to 10"),
    ("max_chars: 1000", "less than or equal to 200"),
    ("model: '  '", "is empty"),
    ("max_char: 40", "did you mean 'max_chars'"),
])
def test_invalid_config_is_refused(registry, section, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_config(f"title:\n  {section}\n", registry)


# -- helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ('"Trip planning"', "Trip planning"),
    ("Title: Budget review.", "Budget review"),
    ("**Title:** Budget review", "Budget review"),
    ("\n\n  \u00abR\u00e9union d\u2019\u00e9quipe\u00bb  \nbecause",
     "R\u00e9union d\u2019\u00e9quipe"),
    ("“Quoted”", "Quoted"),
    ("```\n```", ""),
    ("", ""),
])
def test_clean_title(raw, expected):
    assert clean_title(raw, 60) == expected


def test_clean_title_caps_length_at_a_word_boundary():
    title = clean_title("A very long title that goes on and on about many things", 30)
    assert len(title) <= 30 and title == "A very long title that goes on"
    assert clean_title("x" * 80, 60) == "x" * 60


def test_fallback_title_is_the_first_characters_and_never_exceeds_its_limit():
    assert fallback_title("short") == "short"
    assert fallback_title("a" * 50) == "a" * 50
    assert fallback_title("a" * 51) == "a" * 50
    assert fallback_title("  spaced\n\nout  ") == "spaced out"
    assert fallback_title("x" * 49 + " tail") == "x" * 49  # no trailing space
    for limit in range(1, 60):
        assert len(fallback_title("word " * 40, limit)) <= limit


@pytest.mark.parametrize("raw", [
    "<think>The user wants a trip. Maybe 'Paris'?</think>\nTrip to Lyon",
    "<THINKING>\nlong\nreasoning\n</THINKING>Trip to Lyon",
    "<reasoning>x</reasoning>\n\nTitle: Trip to Lyon.",
])
def test_reasoning_blocks_never_become_the_title(raw):
    assert clean_title(raw, 60) == "Trip to Lyon"


def test_an_unclosed_reasoning_block_leaves_no_title():
    assert clean_title("<think>still thinking about it", 60) == ""


def test_a_thinking_title_model_gives_the_answer_in_a_real_graph(tmp_path, registry):
    model = ScriptedChatModel(["Sure."])
    titler = ScriptedChatModel(["<think>Lyon or Paris?</think>\nTrip to Lyon"])
    with make_agent(tmp_path, registry, model, titler) as agent:
        state = agent.invoke("Plan a trip to Lyon", thread_id="t1")
    assert state["title"] == "Trip to Lyon"


def test_first_exchange_skips_injected_messages_and_pending_tool_calls():
    call = {"name": "lookup", "args": {}, "id": "c1", "type": "tool_call"}
    summary = HumanMessage("Here is a summary", additional_kwargs={"lc_source": "summarization"})
    reminder = HumanMessage("<system_reminder>...</system_reminder>", name="todo_reminder",
                            additional_kwargs=hidden_marker("todo"))
    assert first_exchange([]) is None
    assert first_exchange([HumanMessage("q"), AIMessage("", tool_calls=[call])]) is None
    assert first_exchange([summary, reminder, HumanMessage("real question"),
                           AIMessage("answer")]) == ("real question", "answer")
    assert first_exchange([summary, AIMessage("answer")]) is None


def test_message_text_normalizes_structured_content():
    message = HumanMessage(content=["one", {"type": "text", "text": "two\n\nthree"},
                                    {"type": "image_url", "image_url": {"url": "x"}}])
    assert message_text(message) == "one two three"


def test_hook_returns_nothing_once_titled():
    middleware = TitleMiddleware(ScriptedChatModel([]))
    state = {"title": "Done", "messages": [HumanMessage("q"), AIMessage("a")]}
    assert middleware.after_model(state, None) is None
    assert asyncio.run(middleware.aafter_model(state, None)) is None


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(st.sampled_from(["<uploaded_files>", "</uploaded_files>", "\n", " ",
                                           "<uploaded_files", "x"]),
                          st.text(max_size=12)), max_size=10).map("".join))
def test_message_text_drops_upload_blocks_as_the_pattern_does(text):
    expected = " ".join(title_module._UPLOADED_FILES.sub(" ", text).split())
    assert message_text(HumanMessage(text)) == expected


class _NoClient:
    """A LangSmith client that accepts runs and sends nothing."""

    tracing_queue = None

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class _TracingTurnedOn(ScriptedChatModel):
    """The agent's model, which turns LangSmith tracing on for the whole process as it
    answers (`langsmith.configure`), sending nowhere."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        import langsmith

        langsmith.configure(enabled=True, client=_NoClient())
        return super()._generate(*args, **kwargs)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_the_title_call_follows_tracing_as_its_node_found_it(tmp_path, registry, fuse,
                                                              monkeypatch):
    """Tracing turned on for the process while a node runs takes effect from the next node
    on, for a side call as for a hook: fused, the title's hook runs in the model node, which
    started with tracing off, and its call stays quiet without asking LangSmith again;
    unfused, the title's node starts after the change and the call goes through `invoke`,
    under that node's run."""
    import langsmith

    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    model = _TracingTurnedOn(["Here is a plan for Lisbon."])
    titler = _TitleGenerations(["Weekend in Lisbon"])
    try:
        with make_agent(tmp_path, registry, model, titler, fuse=fuse) as agent:
            state = agent.invoke("Plan my weekend in Lisbon", thread_id="t1")
    finally:
        langsmith.configure(enabled=None, client=None)
    assert state["title"] == "Weekend in Lisbon"
    [(callbacks, kwargs)] = titler.given
    # Quiet: only the call's own config. Through `invoke`: the node's callback manager.
    assert (callbacks is None) is fuse and kwargs["run_name"] == "antler_title"
