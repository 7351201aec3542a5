"""clarification: form normalization, versioned requests, and ending the run in a real graph."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END
from langgraph.types import Command

from antler.chain.config import parse_config
from antler.contracts.runcontext import RunContext
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.registry import discover
from antler.plugins.clarification.form import (
    MAX_FIELD_OPTIONS,
    MAX_FORM_FIELDS,
    MAX_FORM_SERIALIZED_BYTES,
    MAX_TEXT_CHARS,
    RESERVED_FIELD_NAMES,
    flatten_options,
    form_size,
    normalize_fields,
)
from antler.plugins.clarification.middleware import (
    ASKED_MARKER,
    ClarificationMiddleware,
    build,
)
from antler.plugins.clarification.request import (
    DEFAULT_QUESTION,
    build_request,
    render_text,
)
from antler.plugins.clarification.tool import TOOL_NAME, make_tool
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

# Title and memory would also call the scripted model; they have their own tests.
QUIET = "title: {enabled: false}\nmemory: {enabled: false}\n"


def field(name: str = "city", **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra}


# -- options -----------------------------------------------------------------------------


def test_options_are_trimmed_deduplicated_and_blanks_dropped():
    assert flatten_options(["  Paris ", "Paris", "", "   ", "Lyon", "Paris "]) == ["Paris", "Lyon"]


def test_xml_to_dict_options_are_flattened_in_source_order():
    raw = {"option": ["Red", {"#text": " Green ", "@id": 7}, [{"label": "Blue"}, 3.5]],
           "extra": {"nested": {"deeper": "Red"}}}
    assert flatten_options(raw) == ["Red", "Green", "7", "Blue", "3.5"]


def test_residual_xml_tags_are_removed_before_trimming():
    raw = ["<option>Yes</option>", "<b> No </b>", "<option></option>", "<br/>"]
    assert flatten_options(raw) == ["Yes", "No"]


def test_only_string_and_number_leaves_count():
    assert flatten_options([True, False, None, 0, 1.0, float("nan"), "x"]) == ["0", "1.0", "x"]


def test_a_single_scalar_is_one_option():
    assert flatten_options("Only one") == ["Only one"]
    assert flatten_options(None) == []


def test_deep_nesting_and_cycles_do_not_raise():
    deep: Any = "bottom"
    for _ in range(20_000):
        deep = [deep]
    assert flatten_options(deep) == ["bottom"]
    cyclic: list[Any] = ["a"]
    cyclic.append(cyclic)
    assert flatten_options(cyclic) == ["a"]


# -- fields: normalization and benign repairs -------------------------------------------


def test_a_valid_form_is_normalized():
    result = normalize_fields([
        field("city", label=" Destination city ", required=True, placeholder="Paris"),
        field("size", type="select", options=["S", " M ", "M", "", "L"]),
        field("extras", type="multiselect", options={"option": ["wifi", "breakfast"]}),
        field("consent", type="checkbox", label="I accept the terms", required=True),
    ])
    assert result.problem is None
    assert result.fields == [
        {"name": "city", "label": "Destination city", "type": "text", "required": True,
         "placeholder": "Paris"},
        {"name": "size", "label": "size", "type": "select", "required": False,
         "options": ["S", "M", "L"]},
        {"name": "extras", "label": "extras", "type": "multiselect", "required": False,
         "options": ["wifi", "breakfast"]},
        {"name": "consent", "label": "I accept the terms", "type": "checkbox",
         "required": True, "default": False},
    ]


@pytest.mark.parametrize("raw_type", ["color-picker", "", 42, None, [], {}, ["select"],
                                      {"a": 1}, True])
def test_unknown_or_unhashable_types_become_text(raw_type):
    result = normalize_fields([{"name": "x", "type": raw_type}])
    assert result.fields is not None
    assert result.fields[0]["type"] == "text"


def test_type_aliases_and_case_are_understood():
    result = normalize_fields([field("a", type=" Boolean "), field("b", type="DROPDOWN",
                                                                    options=["x"])])
    assert [f["type"] for f in result.fields] == ["checkbox", "select"]


def test_a_choice_field_without_usable_options_becomes_text():
    result = normalize_fields([field("a", type="select"), field("b", type="multiselect",
                                                                options=["", "  ", None])])
    assert [(f["type"], "options" in f) for f in result.fields] == [("text", False),
                                                                   ("text", False)]


def test_a_missing_type_with_options_is_a_select():
    assert normalize_fields([field("a", options=["x", "y"])]).fields[0]["type"] == "select"


def test_checkbox_is_a_boolean_defaulting_to_no_whatever_was_asked():
    result = normalize_fields([field("ok", type="checkbox", default=True, options=["y", "n"])])
    assert result.fields == [{"name": "ok", "label": "ok", "type": "checkbox",
                              "required": False, "default": False}]


@pytest.mark.parametrize(("required", "expected"), [
    (True, True), (1, True), ("yes", True), ("true", True), (" True ", True), (2, True),
    (False, False), (0, False), ("no", False), ("false", False), (None, False), ([], False),
    ("", False)])
def test_required_is_read_the_way_models_write_it(required, expected):
    result = normalize_fields([field("a", required=required)])
    assert result.fields[0]["required"] is expected  # type: ignore[index]


def test_bad_labels_fall_back_to_the_name():
    result = normalize_fields([field("a", label=["x"]), field("b", label="  ")])
    assert [f["label"] for f in result.fields] == ["a", "b"]  # type: ignore[union-attr]


def test_options_and_fields_sent_as_json_strings_are_decoded():
    assert flatten_options('["Paris", "Lyon", "Paris"]') == ["Paris", "Lyon"]
    assert flatten_options('[draft] plan') == ["[draft] plan"]  # a label, not JSON
    assert flatten_options('["unclosed"') == ['["unclosed"']
    form = normalize_fields(json.dumps([field("city", type="select",
                                              options='["Paris", "Lyon"]', required=1)]))
    assert form.fields == [{"name": "city", "label": "city", "type": "select",
                            "required": True, "options": ["Paris", "Lyon"]}]
    assert normalize_fields([json.dumps(field("x"))]).fields[0]["name"] == "x"  # type: ignore


def test_no_fields_means_no_form_and_no_problem():
    assert normalize_fields(None).fields is None
    assert normalize_fields([]).problem is None


# -- fields: structural problems reject the whole form ----------------------------------


@pytest.mark.parametrize("fields, reason", [
    ([field("ok"), "not a dict"], "not an object"),
    ([field("ok"), ["a", "list"]], "not an object"),
    ([{"label": "no name"}], "name"),
    ([field("has space")], "name"),
    ([field("1starts_with_digit")], "name"),
    ([field("")], "name"),
    ([field(42)], "name"),
    ([field("x" * 65)], "name"),
    ([field("dup"), field("dup")], "duplicate"),
    ({"fields": [field("a")]}, "must be a list"),
    ("city", "must be a list"),
])
def test_structural_problems_reject_the_whole_form(fields, reason):
    result = normalize_fields(fields)
    assert result.fields is None
    assert reason in result.problem


@pytest.mark.parametrize("name", sorted(RESERVED_FIELD_NAMES))
def test_names_colliding_with_object_prototype_reject_the_form(name):
    result = normalize_fields([field("fine"), field(name)])
    assert result.fields is None
    assert "Object.prototype" in result.problem


def test_caps_on_fields_options_and_text_are_inclusive():
    assert normalize_fields([field(f"f{i}") for i in range(MAX_FORM_FIELDS)]).fields
    assert normalize_fields([field(f"f{i}") for i in range(MAX_FORM_FIELDS + 1)]).fields is None

    options = [f"o{i}" for i in range(MAX_FIELD_OPTIONS)]
    assert normalize_fields([field("a", type="select", options=options)]).fields
    too_many = [*options, "one more"]
    assert normalize_fields([field("a", type="select", options=too_many)]).fields is None

    assert normalize_fields([field("a", label="x" * MAX_TEXT_CHARS)]).fields
    for key in ("label", "description", "placeholder"):
        result = normalize_fields([field("a", **{key: "x" * (MAX_TEXT_CHARS + 1)})])
        assert result.fields is None, key
    long_option = ["ok", "y" * (MAX_TEXT_CHARS + 1)]
    assert normalize_fields([field("a", type="select", options=long_option)]).fields is None


def test_duplicate_options_do_not_count_against_the_cap():
    options = [f"o{i % 3}" for i in range(100)]
    result = normalize_fields([field("a", type="select", options=options)])
    assert result.fields[0]["options"] == ["o0", "o1", "o2"]


def test_options_on_a_text_field_are_ignored_not_counted():
    result = normalize_fields([field("a", type="text", options=[str(i) for i in range(99)])])
    assert result.fields == [{"name": "a", "label": "a", "type": "text", "required": False}]


def test_a_form_within_item_caps_but_over_the_byte_cap_is_rejected():
    # 16 fields x 6 options x 200 characters passes every per-item cap, not the total.
    fields = [field(f"f{i}", type="select", label="L" * MAX_TEXT_CHARS,
                    options=[f"{j}" + "é" * (MAX_TEXT_CHARS - 1) for j in range(6)])
              for i in range(MAX_FORM_FIELDS)]
    result = normalize_fields(fields)
    assert result.fields is None
    assert "bytes" in result.problem


def test_the_byte_cap_counts_utf8_bytes_not_characters():
    fields = [field(f"f{i}", label="€" * 180) for i in range(12)]  # ~2200 chars, ~6.6 KB
    result = normalize_fields(fields)
    assert result.fields is not None
    assert form_size(result.fields) > 2200 * 2
    bigger = [field(f"f{i}", label="€" * 180, description="€" * 180) for i in range(16)]
    assert normalize_fields(bigger).fields is None


# -- requests: versions and modes --------------------------------------------------------


def test_free_text_request_is_version_1():
    request = build_request({"question": " Which city? "}, "call_1")
    assert request == {"version": 1, "source": "ask_clarification", "request_id": "call_1",
                       "question": "Which city?", "context": None, "mode": "free_text",
                       "options": []}


def test_options_make_a_choice_with_other_request_with_clean_options():
    request = build_request({"question": "Which?", "context": "Two offices",
                             "options": [" Paris", "Paris", "", "<option>Lyon</option>"]})
    assert request["version"] == 1
    assert request["mode"] == "choice_with_other"
    assert request["options"] == ["Paris", "Lyon"]
    assert request["context"] == "Two offices"


def test_fields_make_a_version_2_form():
    request = build_request({"question": "Trip details", "options": ["ignored"],
                             "fields": [field("city"), field("ok", type="checkbox")]})
    assert request["version"] == 2
    assert request["mode"] == "form"
    assert [f["name"] for f in request["fields"]] == ["city", "ok"]
    assert "options" not in request


def test_a_broken_form_degrades_whole_to_the_legacy_modes(caplog):
    broken = [field("city"), field("__proto__")]
    with_options = build_request({"question": "Q", "fields": broken, "options": ["A", " "]})
    assert with_options["version"] == 1
    assert with_options["mode"] == "choice_with_other"
    assert with_options["options"] == ["A"]
    assert "fields" not in with_options
    assert build_request({"question": "Q", "fields": broken})["mode"] == "free_text"
    assert "Object.prototype" in caplog.text


def test_an_explicit_legacy_mode_pins_that_mode():
    args = {"question": "Q", "options": ["A", "B"], "fields": [field("x")]}
    assert build_request({**args, "mode": "free_text"})["mode"] == "free_text"
    assert build_request({**args, "mode": "free_text"})["options"] == []
    assert build_request({**args, "mode": "choice_with_other"})["options"] == ["A", "B"]
    assert build_request({**args, "mode": "form"})["version"] == 2
    assert build_request({**args, "mode": "something"})["version"] == 2


def test_legacy_options_are_fitted_to_the_caps():
    request = build_request({"question": "Q", "options": ["x" * 500] + [str(i) for i in
                                                                         range(40)]})
    assert len(request["options"]) == MAX_FIELD_OPTIONS
    assert len(request["options"][0]) == MAX_TEXT_CHARS
    assert request["options"][0].endswith("…")


@pytest.mark.parametrize("args", [None, "text", 42, [], {"question": None},
                                  {"question": "   "}, {"question": ["a", "b"]}])
def test_a_question_is_always_present(args):
    assert build_request(args)["question"] in (DEFAULT_QUESTION, '["a", "b"]')


def test_text_fallback_is_readable():
    legacy = render_text(build_request({"question": "Which city?", "context": "Two offices.",
                                        "options": ["Paris", "Lyon"]}))
    assert legacy == ("Two offices.\n\nWhich city?\n\n1. Paris\n2. Lyon\n"
                      "Reply with a number, or describe something else.")
    form = render_text(build_request({"question": "Details", "fields": [
        field("city", label="City", required=True, type="select", options=["Paris", "Lyon"]),
        field("tags", type="multiselect", options=["a", "b"], description="Pick any"),
        field("ok", label="I agree", type="checkbox", required=True),
        field("news", label="Newsletter", type="checkbox"),
    ]}))
    assert form.splitlines() == [
        "Details", "", "Please answer:",
        "- City (required): choose one of Paris; Lyon",
        "- tags: choose one or more of a; b — Pick any",
        "- I agree (must agree: yes/no)",
        "- Newsletter (yes/no, default no)",
    ]


# -- property: never raises, always within the caps -------------------------------------

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=40,
)
option_like = st.one_of(json_like, st.text(max_size=250),
                        st.lists(st.one_of(st.text(max_size=250), json_like), max_size=30))
field_like = st.one_of(
    json_like,
    st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["a", "b", "c", "__proto__", "toString", "x y"]),
                           st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
                           json_like)},
        optional={"type": st.one_of(st.sampled_from(["text", "select", "multiselect",
                                                     "checkbox", "number", "Select"]),
                                    json_like),
                  "label": st.one_of(st.text(max_size=230), json_like),
                  "required": json_like,
                  "options": option_like,
                  "description": st.text(max_size=230)},
    ),
)
# Mostly well-formed forms, so the caps (not the name rules) are what gets exercised.
plausible_form = st.lists(
    st.fixed_dictionaries(
        {"name": st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True),
         "type": st.sampled_from(["text", "select", "multiselect", "checkbox", "radio", "?"])},
        optional={"label": st.text(max_size=210), "required": st.booleans(),
                  "options": st.lists(st.text(max_size=210), max_size=30)},
    ),
    max_size=18, unique_by=lambda f: f["name"],
)
args_like = st.one_of(
    json_like,
    st.fixed_dictionaries({}, optional={
        "question": st.one_of(st.text(), json_like),
        "context": st.one_of(st.text(), json_like),
        "mode": st.one_of(st.sampled_from(["free_text", "choice_with_other", "form"]),
                          json_like),
        "options": option_like,
        "fields": st.one_of(json_like, st.lists(field_like, max_size=20), plausible_form),
    }),
)


def assert_within_caps(request: dict[str, Any]) -> None:
    json.dumps(request, ensure_ascii=False)  # JSON-safe
    assert isinstance(request["question"], str) and request["question"]
    if request["version"] == 1:
        assert request["mode"] in ("free_text", "choice_with_other")
        options = request["options"]
        assert (request["mode"] == "choice_with_other") == bool(options)
        assert len(options) <= MAX_FIELD_OPTIONS
        assert len(set(options)) == len(options)
        assert all(o.strip() == o and o and len(o) <= MAX_TEXT_CHARS for o in options)
        return
    assert request["version"] == 2 and request["mode"] == "form"
    fields = request["fields"]
    assert 1 <= len(fields) <= MAX_FORM_FIELDS
    assert form_size(fields) <= MAX_FORM_SERIALIZED_BYTES
    names = [f["name"] for f in fields]
    assert len(set(names)) == len(names)
    assert not set(names) & RESERVED_FIELD_NAMES
    for f in fields:
        assert f["type"] in ("text", "textarea", "number", "select", "multiselect", "checkbox")
        assert isinstance(f["required"], bool)
        assert f["label"] and len(f["label"]) <= MAX_TEXT_CHARS
        for key in ("description", "placeholder"):
            assert len(f.get(key, "")) <= MAX_TEXT_CHARS
        if f["type"] in ("select", "multiselect"):
            options = f["options"]
            assert 1 <= len(options) <= MAX_FIELD_OPTIONS
            assert len(set(options)) == len(options)
            assert all(o.strip() == o and o and len(o) <= MAX_TEXT_CHARS for o in options)
        else:
            assert "options" not in f
        if f["type"] == "checkbox":
            assert f["default"] is False


# `make test` draws 50 inputs per property (fresh ones each run); the slow checks draw
# 150 (CI's long checks, `make test-slow`).
QUICK = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(QUICK, max_examples=150)
raw_forms = st.one_of(json_like, st.lists(field_like, max_size=20), plausible_form)


def request_fits_the_caps(args: Any) -> None:
    request = build_request(args, "call_x")
    assert_within_caps(request)
    assert render_text(request)


def normalized_fields_fit_the_caps(raw: Any) -> None:
    result = normalize_fields(raw)
    if result.fields is not None:
        assert_within_caps({"version": 2, "mode": "form", "question": "q",
                            "fields": result.fields})
    else:
        assert result.problem is None or isinstance(result.problem, str)


def options_are_clean_and_unique(raw: Any) -> None:
    options = flatten_options(raw)
    assert len(set(options)) == len(options)
    assert all(o and o == o.strip() and not re.search(r"<[^<>]*>", o) for o in options)


@QUICK
@given(args_like)
def test_requests_never_raise_and_always_fit_the_caps(args):
    request_fits_the_caps(args)


@QUICK
@given(raw_forms)
def test_field_normalization_never_raises(raw):
    normalized_fields_fit_the_caps(raw)


@QUICK
@given(option_like)
def test_flattened_options_are_clean_and_unique(raw):
    options_are_clean_and_unique(raw)


@pytest.mark.slow
@LONG
@given(args_like)
def test_many_more_requests_never_raise_and_always_fit_the_caps(args):
    request_fits_the_caps(args)


@pytest.mark.slow
@LONG
@given(raw_forms)
def test_many_more_field_normalizations_never_raise(raw):
    normalized_fields_fit_the_caps(raw)


@pytest.mark.slow
@LONG
@given(option_like)
def test_many_more_flattened_options_are_clean_and_unique(raw):
    options_are_clean_and_unique(raw)


# -- the middleware on its own -----------------------------------------------------------


class FakeRuntime:
    def __init__(self, run_id: str | None = "run-1") -> None:
        self.context = RunContext(thread_id="t", run_id=run_id)


class FakeRequest:
    def __init__(self, name: str, args: Any = None, call_id: str = "call_1") -> None:
        self.tool_call = {"name": name, "args": args or {}, "id": call_id, "type": "tool_call"}
        self.runtime = FakeRuntime()


def test_the_installed_manifest_declares_the_before_model_stop(registry):
    hooks = registry.specs["clarification"].hooks
    assert hooks is not None and "before_model" in hooks, (
        "plugin-manifest.yaml: the clarification entry must declare "
        "`hooks: [before_model, wrap_tool_call]`; without before_model a question asked "
        "together with other tool calls does not end the run")


def test_other_tool_calls_pass_through_untouched():
    middleware = build(None)  # type: ignore[arg-type]
    request = FakeRequest("bash", {"command": "ls"})
    sentinel = ToolMessage("ran", tool_call_id="call_1")
    seen = []

    def handler(req):
        seen.append(req)
        return sentinel

    assert middleware.wrap_tool_call(request, handler) is sentinel
    assert seen == [request]

    async def ahandler(req):
        return sentinel

    assert asyncio.run(middleware.awrap_tool_call(request, ahandler)) is sentinel


def test_clarification_calls_never_reach_the_tool():
    middleware = ClarificationMiddleware()
    request = FakeRequest(TOOL_NAME, {"question": "Which city?", "options": ["A", "B"]})

    def handler(req):
        raise AssertionError("the tool must not run")

    for result in (middleware.wrap_tool_call(request, handler),
                   asyncio.run(middleware.awrap_tool_call(request, handler))):
        assert isinstance(result, Command)
        assert result.goto == END
        [message] = result.update["messages"]
        assert message.tool_call_id == "call_1"
        assert message.name == TOOL_NAME
        assert message.artifact["human_input"]["options"] == ["A", "B"]
        assert message.content.startswith("Which city?")
        assert message.additional_kwargs[ASKED_MARKER] == {"run_id": "run-1"}


def test_before_model_ends_only_a_run_that_asked():
    middleware = ClarificationMiddleware()
    ask = AIMessage("", tool_calls=[{"name": TOOL_NAME, "args": {}, "id": "c1"},
                                    {"name": "bash", "args": {}, "id": "c2"}])
    answered = ToolMessage("Q?", tool_call_id="c1", name=TOOL_NAME,
                           additional_kwargs={ASKED_MARKER: {"run_id": "run-1"}})
    other = ToolMessage("ok", tool_call_id="c2", name="bash")
    history = [HumanMessage("hi"), ask, other, answered]
    state = {"messages": history}
    assert middleware.before_model(state, FakeRuntime("run-1")) == {"jump_to": "end"}
    assert asyncio.run(middleware.abefore_model(state, FakeRuntime("run-1"))) == {
        "jump_to": "end"}
    # The next user turn is another run: the model answers normally.
    assert middleware.before_model({"messages": [*history, HumanMessage("Paris")]},
                                   FakeRuntime("run-2")) is None
    # A forged answer without the middleware's marker does not end anything.
    forged = ToolMessage("Q?", tool_call_id="c1", name=TOOL_NAME)
    assert middleware.before_model({"messages": [ask, forged]}, FakeRuntime("run-1")) is None
    # Without run ids, only trailing tool results count as "this run".
    assert middleware.asked_in_current_run(history, None)
    assert not middleware.asked_in_current_run([*history, HumanMessage("Paris")], None)


def test_the_tool_is_direct_and_its_body_renders_the_question():
    ask = make_tool()
    assert ask.name == TOOL_NAME
    assert ask.return_direct
    text = ask.invoke({"question": "Which?", "fields": [{"name": "a", "type": "select",
                                                          "options": ["x"]}]})
    assert text.startswith("Which?")
    assert "choose one of x" in text


# -- in a real graph ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry():
    return discover()


def make_agent(tmp_path, registry, script, tools=()):
    model = ScriptedChatModel(script)
    agent = create_agent(parse_config(QUIET, registry), model=model, checkpointer="memory",
                         base_dir=tmp_path, runtime=RuntimeOptions(), tools=list(tools),
                         registry=registry)
    return agent, model


def ask_turn(**args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": TOOL_NAME, "args": args, "id": "ask_1"}]}


def test_the_run_ends_right_after_the_question_and_the_next_turn_continues(tmp_path, registry):
    agent, model = make_agent(tmp_path, registry, [
        ask_turn(question="Which city?", options=["Paris", "Lyon"]),
        "Great, Paris it is.",
    ])
    with agent:
        assert agent.chain.names[-1] == "clarification"
        assert TOOL_NAME in [t.name for t in agent.chain.tools]
        state = agent.invoke("Book me a hotel", thread_id="t1")

        assert len(model.calls) == 1 and model.remaining == 1
        last = state["messages"][-1]
        assert isinstance(last, ToolMessage) and last.name == TOOL_NAME
        saved = agent.state("t1")["messages"][-1]
        assert isinstance(saved, ToolMessage)
        assert saved.artifact == {"human_input": {
            "version": 1, "source": "ask_clarification", "request_id": "ask_1",
            "question": "Which city?", "context": None, "mode": "choice_with_other",
            "options": ["Paris", "Lyon"]}}
        assert "1. Paris" in saved.content

        state = agent.invoke("Paris", thread_id="t1")
    assert model.remaining == 0
    sent = model.calls[1]
    assert [type(m).__name__ for m in sent[-3:]] == ["AIMessage", "ToolMessage", "HumanMessage"]
    assert state["messages"][-1].content == "Great, Paris it is."


def test_json_string_arguments_reach_the_card_decoded(tmp_path, registry):
    agent, _ = make_agent(tmp_path, registry, [ask_turn(
        question="Which city?", options='["Paris", "Lyon"]')])
    with agent:
        agent.invoke("Book me a hotel", thread_id="t1")
        saved = agent.state("t1")["messages"][-1]
    assert saved.artifact["human_input"]["options"] == ["Paris", "Lyon"]


def test_a_form_request_is_version_2_in_state(tmp_path, registry):
    agent, _ = make_agent(tmp_path, registry, [ask_turn(
        question="Trip details", fields=[{"name": "city", "required": True},
                                         {"name": "terms", "type": "checkbox",
                                          "required": True}])])
    with agent:
        agent.invoke("Plan a trip", thread_id="t1")
        request = agent.state("t1")["messages"][-1].artifact["human_input"]
    assert request["version"] == 2
    assert request["fields"][1] == {"name": "terms", "label": "terms", "type": "checkbox",
                                    "required": True, "default": False}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_run_also_ends_when_other_tools_ran_alongside(tmp_path, registry, mode):
    ran = []

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        ran.append(query)
        return "found"

    agent, model = make_agent(tmp_path, registry, [
        {"tool_calls": [{"name": "lookup", "args": {"query": "hotels"}, "id": "l1"},
                        {"name": TOOL_NAME, "args": {"question": "Budget?"}, "id": "a1"}]},
        "must not be used in this run",
    ], tools=[lookup])
    with agent:
        if mode == "sync":
            state = agent.invoke("Find a hotel", thread_id="t1")
        else:
            state = asyncio.run(agent.graph.ainvoke(agent.input("Find a hotel"),
                                                    config=agent.run_config("t1"),
                                                    context=agent.context("t1")))
    assert ran == ["hotels"]
    assert model.remaining == 1
    assert {m.tool_call_id for m in state["messages"] if isinstance(m, ToolMessage)} == {
        "l1", "a1"}


def test_async_runs_end_the_same_way(tmp_path, registry):
    agent, model = make_agent(tmp_path, registry, [ask_turn(question="Which?"), "unused"])

    async def run() -> dict[str, Any]:
        return await agent.graph.ainvoke(
            agent.input("Do it"), config=agent.run_config("t1"), context=agent.context("t1"))

    with agent:
        state = asyncio.run(run())
    assert model.remaining == 1
    assert state["messages"][-1].artifact["human_input"]["mode"] == "free_text"
