"""The scripted chat model, script validation, and model spec resolution."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from antler.runtime.models import (
    ModelConfigError,
    ScriptedChatModel,
    ScriptError,
    ScriptExhaustedError,
    package_for_spec,
    parse_script,
    resolve_chat_model,
)
from antler.runtime.models import factory as factory_module


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


# -- replay -------------------------------------------------------------------------------


def test_replays_text_turns_in_order_with_metadata() -> None:
    model = ScriptedChatModel(["Hello!", "Bye."], model_name="fake-1")

    first = model.invoke("hi there")
    second = model.invoke([HumanMessage("again")])

    assert (first.content, second.content) == ("Hello!", "Bye.")
    assert first.tool_calls == []
    assert first.response_metadata["finish_reason"] == "stop"
    assert first.response_metadata["model_name"] == "fake-1"
    assert model.position == 2 and model.remaining == 0
    assert [[m.content for m in call] for call in model.calls] == [["hi there"], ["again"]]


def test_usage_is_estimated_from_text_length() -> None:
    model = ScriptedChatModel(["x" * 9])
    reply = model.invoke([SystemMessage("s" * 10), HumanMessage("h" * 7)])
    # ceil(17 / 4) = 5 in, ceil(9 / 4) = 3 out
    assert reply.usage_metadata == {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}


def test_usage_estimate_counts_text_blocks_and_tool_calls() -> None:
    # Only text blocks count of structured content; an assistant message's tool calls
    # count by name and JSON arguments (non-JSON values as their str).
    model = ScriptedChatModel(["ok"])
    call = {"name": "bash", "args": {"command": "ls", "when": Path("/tmp")}, "id": "c1"}
    reply = model.invoke([
        HumanMessage([{"type": "text", "text": "abcd"}, {"type": "image_url",
                                                         "image_url": {"url": "x" * 400}},
                      "efgh"]),
        AIMessage("", tool_calls=[call]),
        ToolMessage("t" * 8, tool_call_id="c1"),
    ])
    # 8 + len("bash") + len('{"command": "ls", "when": "/tmp"}') + 8 = 53 chars
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] == 14  # ceil(53 / 4)


@pytest.mark.parametrize("kwargs", [{}, {"stop": ["END"], "model": "other", "temperature": 0.3,
                                         "max_tokens": 12}])
def test_tracing_parameters_are_langchains_default(kwargs: dict[str, object]) -> None:
    from langchain_core.language_models import BaseChatModel

    class ChatTuned(ScriptedChatModel):
        temperature: float = 0.7

    for model in (ScriptedChatModel([], model_name="m1"), ChatTuned([], model_name="m2")):
        assert model._get_ls_params(**kwargs) == BaseChatModel._get_ls_params(model, **kwargs)


def test_usage_and_finish_reason_can_be_given() -> None:
    model = ScriptedChatModel(
        [
            {
                "content": "cut",
                "finish_reason": "length",
                "usage": {"input_tokens": 100, "output_tokens": 7},
            }
        ]
    )
    reply = model.invoke("hi")
    assert reply.usage_metadata == {"input_tokens": 100, "output_tokens": 7, "total_tokens": 107}
    assert reply.response_metadata["finish_reason"] == "length"


def test_parallel_tool_calls_get_deterministic_ids() -> None:
    script = [
        {
            "tool_calls": [
                {"name": "add", "args": {"a": 1, "b": 2}},
                {"name": "shout", "args": {"text": "x"}, "id": "mine"},
                {"name": "add", "args": {"a": 3, "b": 4}},
            ]
        },
        {"tool_calls": [{"name": "add", "args": {}}]},
    ]
    replies = [ScriptedChatModel(script).invoke("go") for _ in range(2)]
    for reply in replies:
        assert [call["id"] for call in reply.tool_calls] == ["call_1", "mine", "call_2"]
        assert [call["name"] for call in reply.tool_calls] == ["add", "shout", "add"]
        assert reply.tool_calls[0]["args"] == {"a": 1, "b": 2}
        assert reply.response_metadata["finish_reason"] == "tool_calls"

    model = ScriptedChatModel(script)
    model.invoke("1")
    assert model.invoke("2").tool_calls[0]["id"] == "call_3"  # ids keep counting


def test_auto_ids_skip_ids_the_script_already_used() -> None:
    model = ScriptedChatModel([{"tool_calls": [{"name": "add", "id": "call_1"}, {"name": "add"}]}])
    assert [c["id"] for c in model.invoke("x").tool_calls] == ["call_1", "call_2"]


def test_aimessage_turn_is_returned_with_defaults_filled() -> None:
    given = AIMessage(
        content="done", tool_calls=[{"name": "add", "args": {"a": 1, "b": 1}, "id": None}]
    )
    reply = ScriptedChatModel([given]).invoke("x")
    assert reply.content == "done"
    assert reply.tool_calls[0]["id"] == "call_1"
    assert reply.response_metadata["finish_reason"] == "tool_calls"
    assert reply.usage_metadata is not None and reply.usage_metadata["output_tokens"] > 0
    assert given.tool_calls[0]["id"] is None  # the script itself is not mutated


def test_callable_turn_sees_the_request() -> None:
    def echo(messages: list) -> dict:
        return {"content": f"you said {messages[-1].content!r} ({len(messages)} messages)"}

    model = ScriptedChatModel([echo, lambda messages: "plain"])
    assert model.invoke("ping").content == "you said 'ping' (1 messages)"
    assert model.invoke("x").content == "plain"


def test_callable_turn_returning_garbage_is_reported() -> None:
    model = ScriptedChatModel([lambda messages: 42, lambda messages: {"tool_calls": "add"}])
    with pytest.raises(ScriptError, match=r"turn 1 \(index 0\) is a int"):
        model.invoke("x")
    with pytest.raises(ScriptError, match=r"turn 2 \(index 1\).*tool_calls"):
        model.invoke("x")


def test_async_generation_and_async_callables() -> None:
    async def later(messages: list) -> str:
        await asyncio.sleep(0)
        return "async reply"

    model = ScriptedChatModel(["sync turn", later])

    async def run() -> list[str]:
        return [(await model.ainvoke("a")).content, (await model.ainvoke("b")).content]

    assert asyncio.run(run()) == ["sync turn", "async reply"]
    with pytest.raises(ScriptError, match="async API"):
        ScriptedChatModel([later]).invoke("x")


def test_concurrent_calls_each_take_a_distinct_turn() -> None:
    model = ScriptedChatModel([f"turn {i}" for i in range(40)])
    replies: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(5):
            content = model.invoke("go").content
            with lock:
                replies.append(content)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(replies) == sorted(f"turn {i}" for i in range(40))
    assert len(model.calls) == 40


# -- exhaustion ---------------------------------------------------------------------------


def test_script_that_ends_early_explains_what_was_asked() -> None:
    model = ScriptedChatModel(["only reply"])
    model.invoke("first")
    with pytest.raises(ScriptExhaustedError) as caught:
        model.invoke(
            [
                HumanMessage("first"),
                AIMessage("", tool_calls=[{"name": "add", "args": {}, "id": "c1"}]),
                ToolMessage("tool output 12345", tool_call_id="c1", name="add"),
            ]
        )
    message = str(caught.value)
    assert "has 1 turn and turn 2 was requested" in message
    assert "(tool 'add') 'tool output 12345'" in message
    assert len(model.calls) == 2  # the failing request is still recorded


def test_empty_script_is_exhausted_immediately_and_preview_is_truncated() -> None:
    with pytest.raises(ScriptExhaustedError) as caught:
        ScriptedChatModel().invoke("z" * 1000)
    message = str(caught.value)
    assert "has 0 turns and turn 1 was requested" in message
    assert "z" * 200 + "..." in message
    assert "z" * 201 not in message


# -- script validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ([{"tool_calls": [{"args": {}}]}], r"turn 1 \(index 0\).*tool_calls\[0\]\.name"),
        ([{"tool_calls": [{"name": ""}]}], r"tool_calls\[0\]\.name"),
        (
            ["ok", {"tool_calls": [{"name": "add", "args": [1, 2]}]}],
            r"turn 2 \(index 1\).*tool_calls\[0\]\.args.*dictionary",
        ),
        ([{"contnet": "typo"}], r"contnet.*Extra inputs"),
        ([{"content": 5}], r"content.*string"),
        ([{"usage": {"input_tokens": -1, "output_tokens": 0}}], r"usage\.input_tokens"),
        ([3.5], r"turn 1 \(index 0\) is a float"),
        ("just a string", "must be a list of turns"),
        ({"turn": []}, "must have a 'turns' list"),
    ],
)
def test_malformed_scripts_are_explained(script: object, expected: str) -> None:
    with pytest.raises(ScriptError, match=expected):
        parse_script(script)
    with pytest.raises(ValueError, match=expected):  # the constructor validates too
        ScriptedChatModel(script)


def test_parse_script_accepts_every_turn_form() -> None:
    turns = parse_script({"turns": ["a", {"content": "b"}, AIMessage("c"), len]})
    assert len(turns) == 4
    assert turns[2] == AIMessage("c")
    assert turns[3] is len
    assert parse_script(None) == []


def test_from_yaml_and_from_turns(tmp_path: Path) -> None:
    script_file = tmp_path / "script.yaml"
    script_file.write_text(
        "model_name: yaml-model\n"
        "turns:\n"
        "  - content: ''\n"
        "    tool_calls:\n"
        "      - {name: add, args: {a: 2, b: 3}}\n"
        "  - The sum is 5.\n"
    )
    model = ScriptedChatModel.from_yaml(script_file)
    assert model.model_name == "yaml-model"
    assert model.invoke("x").tool_calls[0]["args"] == {"a": 2, "b": 3}
    assert model.invoke("y").content == "The sum is 5."

    listed = tmp_path / "list.yaml"
    listed.write_text("- one\n- two\n")
    assert ScriptedChatModel.from_yaml(listed).invoke("x").content == "one"
    assert ScriptedChatModel.from_turns(("a", "b")).remaining == 2


def test_from_yaml_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="does not exist"):
        ScriptedChatModel.from_yaml(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("- [unclosed\n")
    with pytest.raises(ScriptError, match=r"broken\.yaml:\d+:\d+: invalid YAML"):
        ScriptedChatModel.from_yaml(broken)
    malformed = tmp_path / "malformed.yaml"
    malformed.write_text("- tool_calls: [{args: {}}]\n")
    with pytest.raises(ScriptError, match=r"malformed\.yaml.*turn 1.*name"):
        ScriptedChatModel.from_yaml(malformed)


# -- tools and agents ---------------------------------------------------------------------


def test_bind_tools_records_names_and_shares_progress() -> None:
    model = ScriptedChatModel(["one", "two"])
    bound = model.bind_tools([add, shout, {"name": "web_search", "type": "builtin"}])

    assert bound.bound_tools == ("add", "shout", "web_search")
    assert model.bound_tools == ()
    assert bound.invoke("x").content == "one"
    assert model.invoke("y").content == "two"  # one script, wherever it is invoked from
    assert [r.tool_names for r in model.requests] == [("add", "shout", "web_search"), ()]


def test_drives_create_agent_through_a_tool_call_and_final_answer() -> None:
    model = ScriptedChatModel(
        [
            {
                "content": "Let me compute.",
                "tool_calls": [
                    {"name": "add", "args": {"a": 2, "b": 3}},
                    {"name": "shout", "args": {"text": "done"}},
                ],
            },
            "2 + 3 = 5, DONE",
        ]
    )
    agent = create_agent(model=model, tools=[add, shout], system_prompt="Be brief.")

    result = agent.invoke({"messages": [HumanMessage("What is 2 + 3?")]})

    messages = result["messages"]
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
        "AIMessage",
    ]
    tool_results = {m.tool_call_id: (m.name, m.content) for m in messages[2:4]}
    assert tool_results == {"call_1": ("add", "5"), "call_2": ("shout", "DONE")}
    assert messages[-1].content == "2 + 3 = 5, DONE"

    # The model saw the system prompt, then the tool results on its second call.
    assert len(model.calls) == 2
    first_call, second_call = model.calls
    assert isinstance(first_call[0], SystemMessage) and first_call[0].content == "Be brief."
    assert [type(m).__name__ for m in second_call[-2:]] == ["ToolMessage", "ToolMessage"]
    assert all(r.tool_names == ("add", "shout") for r in model.requests)


# -- spec resolution ----------------------------------------------------------------------


def test_resolve_scripted_specs(tmp_path: Path) -> None:
    assert isinstance(resolve_chat_model(None), ScriptedChatModel)
    scripted = resolve_chat_model("scripted", script=["hi"])
    assert isinstance(scripted, ScriptedChatModel)
    assert scripted.invoke("x").content == "hi"

    script_file = tmp_path / "s.yaml"
    script_file.write_text("- from file\n")
    from_file = resolve_chat_model(f"scripted:{script_file}")
    assert from_file.invoke("x").content == "from file"

    given = ScriptedChatModel(["mine"])
    assert resolve_chat_model(given) is given


def test_resolve_scripted_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="names no script file"):
        resolve_chat_model("scripted:")
    with pytest.raises(ModelConfigError, match=r"'scripted:.*nope\.yaml'.*does not exist"):
        resolve_chat_model(f"scripted:{tmp_path / 'nope.yaml'}")
    with pytest.raises(ModelConfigError, match="only applies to the 'scripted' model"):
        resolve_chat_model("openai:gpt-4o", script=["hi"])
    with pytest.raises(ModelConfigError, match="empty or not a string"):
        resolve_chat_model("   ")


def test_missing_provider_package_names_the_install_command() -> None:
    if importlib.util.find_spec("langchain_openai") is not None:
        pytest.skip("langchain-openai is installed, so the import cannot fail")
    with pytest.raises(ModelConfigError) as caught:
        resolve_chat_model("openai:gpt-4o")
    message = str(caught.value)
    assert "'openai:gpt-4o'" in message
    assert "`pip install langchain-openai`" in message
    assert "not installed" in message  # found before anything is imported


def test_import_error_hint_comes_from_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(spec: str) -> None:
        raise ImportError("No module named 'langchain_groq'")

    monkeypatch.setattr(factory_module, "init_chat_model", fail)
    with pytest.raises(ModelConfigError) as caught:
        resolve_chat_model("groq:llama-3.3-70b")
    message = str(caught.value)
    assert "'groq:llama-3.3-70b'" in message
    assert "not installed" in message
    assert "`pip install langchain-groq`" in message


def test_unknown_provider_suggests_provider_prefix() -> None:
    with pytest.raises(ModelConfigError) as caught:
        resolve_chat_model("my-homemade-model")
    message = str(caught.value)
    assert "'my-homemade-model'" in message
    assert "provider:model" in message


def test_missing_api_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(spec: str) -> None:
        raise ValueError("api_key client option must be set")

    monkeypatch.setattr(factory_module, "init_chat_model", fail)
    # past the early check (package present, a key set), the provider itself refuses
    monkeypatch.setattr(factory_module, "known_providers", lambda: {"anthropic": "json"})
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-wrong")
    with pytest.raises(ModelConfigError) as caught:
        resolve_chat_model("anthropic:claude-sonnet-4-5")
    message = str(caught.value)
    assert "'anthropic:claude-sonnet-4-5'" in message
    assert "api_key client option must be set" in message
    assert "ANTHROPIC_API_KEY" in message


@pytest.mark.parametrize(
    ("spec", "package"),
    [
        ("openai:gpt-4o", "langchain-openai"),
        ("gpt-4o", "langchain-openai"),
        ("claude-sonnet-4-5", "langchain-anthropic"),
        ("google_genai:gemini-2.5-pro", "langchain-google-genai"),
        ("azure_openai:gpt-4o", "langchain-openai"),
        ("bedrock_converse:x", "langchain-aws"),
        ("something-else", None),
    ],
)
def test_package_for_spec(spec: str, package: str | None) -> None:
    assert package_for_spec(spec) == package


# -- turns that raise ---------------------------------------------------------------------


def test_an_error_turn_raises_the_provider_shaped_exception(tmp_path: Path) -> None:
    from langchain_core.exceptions import ModelAuthenticationError, ModelRateLimitError

    path = tmp_path / "script.yaml"
    path.write_text("- error: {kind: rate_limit, retry_after: 2.5}\n- error: auth\n"
                    "- error: {kind: generic, message: boom}\n- fine\n", encoding="utf-8")
    model = ScriptedChatModel.from_yaml(path)
    with pytest.raises(ModelRateLimitError) as raised:
        model.invoke("x")
    error = raised.value
    assert (error.status_code, error.code) == (429, "rate_limit_exceeded")
    assert error.response.headers == {"retry-after": "2.5"}
    assert error.body["error"]["code"] == "rate_limit_exceeded"
    with pytest.raises(ModelAuthenticationError):
        asyncio.run(model.ainvoke("x"))
    with pytest.raises(RuntimeError, match="boom") as raised:
        model.invoke("x")
    assert not hasattr(raised.value, "status_code")
    assert model.invoke("x").content == "fine"
    assert len(model.requests) == 4  # a failed call is recorded and uses up its turn


@pytest.mark.parametrize("turn, problem", [
    ({"error": "teapot"}, "error.kind"),
    ({"error": "auth", "content": "hi"}, "raises instead of answering"),
    ({"error": {"kind": "auth", "retry_after": -1}}, "retry_after"),
])
def test_malformed_error_turns_are_named(turn: dict, problem: str) -> None:
    with pytest.raises(ScriptError, match=problem):
        parse_script([turn])
