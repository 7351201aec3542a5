"""The operator config: validation with locations, toggles, extensions, schema, secrets.

Plugins here come from a small manifest (no entry points), built with the
`antler_manifest_registry` fixture of `antler.testing`. Factories and config
models live in this module and are named by `__name__`, so the tests do not
depend on how pytest imports them.
"""

from __future__ import annotations

import json
import sys

import pytest
from langchain.agents.middleware import AgentMiddleware
from pydantic import BaseModel, ConfigDict, Field

from antler.chain import build_chain
from antler.chain.config import config_schema, load_config, parse_config
from antler.errors import BuildError, ConfigError
from antler.testing import assert_adjacent, assert_before, assert_in_slot, slot_members

HERE = __name__


class Guard(AgentMiddleware):
    def __init__(self, context=None):
        super().__init__()


class Summarizer(AgentMiddleware):
    def __init__(self, context):
        super().__init__()
        self.settings = context.config


class SummarizationConfig(BaseModel):
    """`summarization:` section."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(4000, description="Summarize once the history exceeds this.")
    keep_last: int = Field(10, description="Messages kept verbatim.")


class GreetingMiddleware(AgentMiddleware):
    """A zero-argument extension, as DeerFlow's `extensions.middlewares` strings expect."""

    def __init__(self, greeting: str = "hello", shout: bool = False):
        super().__init__()
        self.greeting = greeting.upper() if shout else greeting


class NotAMiddleware:
    pass


class Publisher(AgentMiddleware):
    """Publishes a decision the consumer must be able to trust."""

    def __init__(self, context):
        super().__init__()
        self.token = context.secrets.token("handoff")


class Consumer(Publisher):
    """Accepts only decisions signed with the chain's token."""


MANIFEST = f"""
    api_version: 1
    plugins:
      - name: guard
        factory: "{HERE}:Guard"
        summary: Checks every tool call
        enabled: always
        always_reason: every tool call must pass the guard before it runs
        order: {{before: ["@guards_end"]}}
      - name: summarization
        factory: "{HERE}:Summarizer"
        summary: Summarizes long histories
        config_model: "{HERE}:SummarizationConfig"
        order: {{after: [guard], before: ["@guards_end"]}}
      - name: loop_detection
        factory: "{HERE}:Guard"
        summary: Stops repeated tool calls
        enabled: "off"
        order: {{before: ["@guards_end"]}}
      - name: todo
        factory: "{HERE}:Guard"
        summary: Plan-mode todo list
        when: {{plan_mode: true}}
        chains: [lead]
        order: {{before: ["@guards_end"]}}
      - name: tail
        factory: "{HERE}:Guard"
        summary: Terminal-response tail
        enabled: always
        order: {{after: ["@tail_start"]}}
"""


@pytest.fixture
def registry(antler_manifest_registry):
    return antler_manifest_registry(MANIFEST)


def config_error(text: str, registry, source: str = "antler.yaml") -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, registry, source)
    return str(caught.value)


# -- unknown sections and keys --------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("chain: {}\nsummarizaton: {max_tokens: 10}\n",
     "antler.yaml:2:1: summarizaton: unknown key 'summarizaton' (did you mean "
     "'summarization'?)"),
    ("summarization:\n  keep_last: 3\n  max_token: 10\n",
     "antler.yaml:3:3: summarization.max_token: unknown key 'max_token' (did you mean "
     "'max_tokens'?)"),
    ("loop_detection: {enabeld: true}\n",
     "antler.yaml:1:18: loop_detection.enabeld: unknown key 'enabeld' (did you mean "
     "'enabled'?)"),
    ("extensions:\n  middlewares:\n    - use: pkg.mod:Cls\n      aftr: [guard]\n",
     "antler.yaml:4:7: extensions.middlewares[0].aftr: unknown key 'aftr' (did you mean "
     "'after'?)"),
    ("extensions:\n  middlewaers: []\n",
     "antler.yaml:2:3: extensions.middlewaers: unknown key 'middlewaers' (did you mean "
     "'middlewares'?)"),
    ("plugins:\n  guard: {requird: true}\n",
     "antler.yaml:2:11: plugins.guard.requird: unknown key 'requird' (did you mean "
     "'required'?)"),
    ("summarization: {colour: red}\n",
     "antler.yaml:1:17: summarization.colour: unknown key 'colour'; valid keys: enabled, "
     "keep_last, max_tokens"),
    ("plugins:\n  sumarization: {required: true}\n",
     "antler.yaml:2:3: plugins.sumarization: no installed plugin, entry point or distribution "
     "is named 'sumarization' (did you mean 'summarization'?)"),
])
def test_unknown_keys_name_file_line_column_and_suggest(registry, text, expected):
    assert expected in config_error(text, registry)


def test_union_errors_report_only_the_shape_that_was_given(registry):
    message = config_error("extensions:\n  middlewares:\n    - use: pkg.mod:Cls\n"
                           "      aftr: [guard]\n", registry)
    assert "valid string" not in message  # a mapping entry is not told to be a string

    message = config_error("extensions:\n  middlewares:\n    - 12\n", registry)
    assert ("antler.yaml:3:7: extensions.middlewares[0]: expects a string or a mapping; got a "
            "number (12)") in message


def test_errors_in_a_file_name_the_file(registry, tmp_path):
    path = tmp_path / "antler.yaml"
    path.write_text("summarization:\n  max_tokens: lots\n", encoding="utf-8")

    with pytest.raises(ConfigError) as caught:
        load_config(path, registry)

    assert f"{path}:2:3: summarization.max_tokens: expects a whole number" in str(
        caught.value)


# -- YAML itself ----------------------------------------------------------------------------


def test_yaml_syntax_error_has_a_location(registry):
    message = config_error("summarization:\n  max_tokens: [1, 2\nchain: {}\n", registry)
    assert message.startswith("antler.yaml:3:6: invalid YAML:")


@pytest.mark.parametrize("tagged", [
    '!!python/object/apply:os.system ["echo pwned"]',
    "!!python/object/new:os.system [echo]",
    "!!python/object:antler.config.OperatorConfig {source: x}",
    "!!python/name:os.system",
    "!!set {a, b}",
    "!local {a: 1}",
])
def test_object_tags_are_refused(registry, tagged):
    message = config_error(f"summarization:\n  max_tokens: {tagged}\n", registry)
    assert message.startswith("antler.yaml:2:15: ")
    assert "only plain YAML values are allowed" in message


@pytest.mark.parametrize(("text", "where"), [
    ("summarization: {}\nchain: {}\nsummarization: {}\n", "antler.yaml:3:1"),
    ("summarization:\n  max_tokens: 1\n  max_tokens: 2\n", "antler.yaml:3:3"),
])
def test_duplicate_keys_are_refused(registry, text, where):
    message = config_error(text, registry)
    assert message.startswith(f"{where}: duplicate key")
    assert "keep one" in message


def test_merge_keys_are_refused(registry):
    message = config_error("base: &b {max_tokens: 1}\nsummarization:\n  <<: *b\n", registry)
    assert "antler.yaml:3:3: YAML merge keys ('<<') are not supported" in message


# -- enablement -----------------------------------------------------------------------------


def test_disabling_an_always_plugin_says_why(registry):
    message = config_error("chain: {}\nguard:\n  enabled: false\n", registry)
    assert ("antler.yaml:3:3: guard.enabled: plugin 'guard' cannot be disabled: every tool "
            "call must pass the guard before it runs. Remove `enabled: false`.") in message


def test_enabling_an_off_plugin_turns_it_on(registry, antler_plan):
    plan = antler_plan(registry=registry)
    assert "loop_detection" not in plan.order
    assert "enable with `loop_detection: {enabled: true}`" in plan.excluded[
        "loop_detection"].reason

    plan = antler_plan("loop_detection: {enabled: true}\n", registry=registry)
    assert_before(plan, "summarization", "loop_detection")
    assert_before(plan, "loop_detection", "tail")


def test_disabling_an_on_plugin_points_at_the_setting(registry, antler_plan):
    plan = antler_plan("summarization:\n  enabled: false\n", registry=registry,
                       source="ops.yaml")
    assert "summarization" not in plan.order
    assert plan.excluded["summarization"].reason == "disabled by config (ops.yaml:2:3)"


def test_when_conditions_follow_the_runtime(registry, antler_plan):
    plain = antler_plan(registry=registry)
    planning = antler_plan(registry=registry, runtime={"plan_mode": True})
    subagent = antler_plan(registry=registry, chain="subagent", runtime={"plan_mode": True})

    assert "todo" not in plain.order
    assert plain.excluded["todo"].reason == "runtime condition plan_mode is False, needs True"
    assert "todo" in planning.order
    assert "todo" not in subagent.order  # the chain filter holds whatever the runtime
    assert "does not join the subagent chain" in subagent.explain("todo")


# -- extensions -----------------------------------------------------------------------------


def test_string_extension_joins_both_chains_in_the_extension_slot(registry, antler_build):
    config = f"extensions:\n  middlewares:\n    - {HERE}:GreetingMiddleware\n"

    for chain in ("lead", "subagent"):
        built = antler_build(config, chain=chain, registry=registry)
        assert_in_slot(built, "greeting_middleware", "extensions")
        assert_before(built, "greeting_middleware", "tail")
        middleware = built.middlewares[built.names.index("greeting_middleware")]
        assert isinstance(middleware, GreetingMiddleware)
        assert middleware.greeting == "hello"  # constructed with no arguments
        assert "declared at <test config>:3" in built.explain("greeting_middleware")


def test_mapping_extension_with_name_chains_ordering_and_config(registry, antler_build):
    config = f"""
        extensions:
          middlewares:
            - use: {HERE}:GreetingMiddleware
              name: shouter
              chains: [lead]
              after: [guard]
              before: [summarization]
              config: {{greeting: hi, shout: true}}
            - use: {HERE}:GreetingMiddleware
              name: polite
    """
    lead = antler_build(config, registry=registry)
    sub = antler_build(config, chain="subagent", registry=registry)

    assert_adjacent(lead, "guard", "shouter")
    assert_adjacent(lead, "shouter", "summarization")
    assert lead.middlewares[lead.names.index("shouter")].greeting == "HI"
    assert "shouter declares after: guard" in lead.explain("shouter")
    assert "<test config>:4" in lead.explain("shouter")  # where it was configured
    assert "shouter" not in sub.names
    assert "does not join the subagent chain" in sub.explain("shouter")
    assert slot_members(lead, "extensions") == ["polite"]


def test_custom_middlewares_sit_just_before_configured_extensions(registry, antler_build):
    config = f"extensions:\n  middlewares: ['{HERE}:GreetingMiddleware']\n"
    custom = GreetingMiddleware("custom")

    built = antler_build(config, registry=registry, custom_middlewares=[custom])

    assert_in_slot(built, "custom_0_greeting_middleware", "custom")
    assert_in_slot(built, "greeting_middleware", "extensions")
    assert_adjacent(built, "custom_0_greeting_middleware", "greeting_middleware")
    assert built.middlewares[built.names.index("custom_0_greeting_middleware")] is custom


def test_extension_names_must_be_distinct(registry):
    message = config_error(
        f"extensions:\n  middlewares:\n    - {HERE}:GreetingMiddleware\n"
        f"    - {{use: '{HERE}:GreetingMiddleware'}}\n", registry)
    assert ("antler.yaml:4:7: extensions.middlewares[1]: name 'greeting_middleware' is already "
            "used by entry 0; give one of them a distinct `name:`") in message


MISSING_DEPENDENCY = """
    import langchain_anthropic  # noqa: F401

    class Wrapper:
        pass
"""


@pytest.mark.parametrize(("entry", "expected"), [
    ("langchain_openai:OpenAIModerationMiddleware",
     "module 'langchain_openai' is not installed; install it with `pip install "
     "langchain-openai`"),
    ("antler_needs_anthropic:Wrapper",
     "importing 'antler_needs_anthropic' failed because it needs 'langchain_anthropic', which "
     "is not installed; install it with `pip install langchain-anthropic`"),
    (f"{HERE}:GreetingMiddlewar",
     f"'{HERE}' has no attribute 'GreetingMiddlewar' (did you mean 'GreetingMiddleware'?)"),
    (f"{HERE}:NotAMiddleware",
     "names a class <class '" + HERE + ".NotAMiddleware'>, not a subclass of "
     "langchain.agents.middleware.AgentMiddleware"),
    (f"{{use: '{HERE}:GreetingMiddleware', config: {{greting: hi, loud: 1}}}}",
     "unknown argument 'greting' (did you mean 'greeting'?); unknown argument 'loud' (the "
     "constructor is GreetingMiddleware(greeting: 'str' = 'hello', shout: 'bool' = False))"),
])
def test_reflection_errors_are_actionable(registry, site, monkeypatch, entry, expected):
    monkeypatch.setitem(sys.modules, "langchain_openai", None)  # not installed, wherever
    monkeypatch.setitem(sys.modules, "langchain_anthropic", None)
    site.module("antler_needs_anthropic", MISSING_DEPENDENCY)
    config = parse_config(f"extensions:\n  middlewares:\n    - {entry}\n", registry)

    with pytest.raises(BuildError) as caught:
        build_chain(config, registry=registry)

    message = str(caught.value)
    assert message.startswith("<config>:3:7: extensions.middlewares: ")
    assert expected in message


def test_malformed_class_path_is_a_config_error(registry):
    message = config_error(f"extensions:\n  middlewares:\n    - {HERE}.GreetingMiddleware\n",
                           registry)
    assert (f"antler.yaml:3:7: extensions.middlewares[0]: class path "
            f"'{HERE}.GreetingMiddleware' is not of the form 'package.module:ClassName' "
            f"(did you mean '{HERE}:GreetingMiddleware'?)") in message


def test_optional_broken_extension_fails_open_with_the_reason(registry, antler_build,
                                                              monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    config = f"""
        extensions:
          middlewares:
            - {{use: "langchain_openai:Moderation", name: moderation, required: false}}
            - {HERE}:GreetingMiddleware
    """

    built = antler_build(config, registry=registry)

    assert "moderation" not in built.names
    assert "greeting_middleware" in built.names
    reason = built.plan.excluded["moderation"].reason
    assert reason.startswith("optional extension failed to load: ")
    assert "pip install langchain-openai" in reason
    assert "moderation is not in the lead chain: optional extension failed to load" in (
        built.explain("moderation"))


# -- schema ---------------------------------------------------------------------------------


def test_schema_has_every_section_with_descriptions(registry):
    schema = json.loads(json.dumps(config_schema(registry)))

    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    sections = set(schema["properties"])
    assert {"chain", "plugins", "extensions", "guard", "summarization", "loop_detection",
            "todo", "tail"} <= sections
    for name in sections:
        assert schema["properties"][name].get("description"), name
    assert "summarization: Summarizes long histories" in (
        schema["properties"]["summarization"]["description"])
    text = json.dumps(schema)
    for description in ("Summarize once the history exceeds this.",
                        "'module.path:ClassName' of an AgentMiddleware subclass.",
                        "Stop the build if this plugin's distribution fails to load.",
                        "Turn the plugin on or off."):
        assert description in text


EXAMPLE = """
chain: {fuse: false}
plugins:
  guard: {required: true}
summarization: {max_tokens: 8000}
loop_detection: {enabled: true}
extensions:
  middlewares:
    - pkg.mod:Greeting
    - {use: "pkg.mod:Other", after: [guard], chains: [lead], config: {a: 1}}
"""


def test_example_config_validates_against_the_schema(registry):
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = config_schema(registry)
    jsonschema.Draft202012Validator.check_schema(schema)
    parse_config(EXAMPLE, registry)  # Antler accepts it...
    jsonschema.validate(yaml.safe_load(EXAMPLE), schema)  # ...and so does the schema
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"summarizaton": {}}, schema)


# -- chain-scoped secrets -------------------------------------------------------------------


def test_chain_secret_is_shared_within_a_build_and_differs_between_builds(
        antler_manifest_registry, antler_build):
    registry = antler_manifest_registry(
        {"name": "publisher", "factory": f"{HERE}:Publisher"},
        {"name": "consumer", "factory": f"{HERE}:Consumer", "order": {"after": ["publisher"]}},
    )

    first = antler_build(registry=registry)
    second = antler_build(registry=registry)

    publisher, consumer = first.middlewares
    assert first.names == ["publisher", "consumer"]
    assert publisher.token == consumer.token
    assert len(publisher.token) >= 32
    assert second.middlewares[0].token == second.middlewares[1].token
    assert second.middlewares[0].token != publisher.token


# -- antler.testing's assertions ------------------------------------------------------------


def test_assertion_helpers_explain_their_failures(registry, antler_plan):
    plan = antler_plan(f"extensions:\n  middlewares: ['{HERE}:GreetingMiddleware']\n",
                       registry=registry)
    assert plan.order == ["guard", "summarization", "greeting_middleware", "tail"]
    assert slot_members(plan, "extensions") == ["greeting_middleware"]
    assert slot_members(plan, "custom") == []

    with pytest.raises(pytest.fail.Exception) as caught:
        assert_before(plan, "tail", "guard")
    assert "expected 'tail' before 'guard'" in str(caught.value)
    assert "lead chain: guard -> summarization -> greeting_middleware -> tail" in str(
        caught.value)
    assert "tail is at position 4 of 4" in str(caught.value)  # the explanation follows

    with pytest.raises(pytest.fail.Exception, match="expected 'tail' immediately after 'guard'"):
        assert_adjacent(plan, "guard", "tail")
    with pytest.raises(pytest.fail.Exception,
                       match=r"expected 'guard' in slot 'extensions' \(@custom_end .. "
                             r"@tail_start\), which holds \['greeting_middleware'\]"):
        assert_in_slot(plan, "guard", "extensions")
    with pytest.raises(pytest.fail.Exception,
                       match="'loop_detection' is not in the lead chain: off by default"):
        assert_before(plan, "guard", "loop_detection")
    with pytest.raises(pytest.fail.Exception, match="no plugin named 'gaurd'"):
        assert_adjacent(plan, "gaurd", "summarization")
    with pytest.raises(KeyError, match="no slot named 'extension'"):
        slot_members(plan, "extension")


def test_manifest_registry_takes_specs_dicts_and_text(antler_manifest_registry, antler_plan):
    from antler.plugin_api.spec import PluginSpec

    registry = antler_manifest_registry(
        "api_version: 1\nplugins:\n  - {name: first, factory: 'pkg:First'}\n",
        PluginSpec(name="second", factory="pkg:Second"),
        [{"name": "third", "factory": "pkg:Third"}],
    )

    plan = antler_plan(registry=registry)
    assert plan.order == ["first", "second", "third"]  # declaration order breaks ties
    assert "declared at <test manifest>:3" in plan.explain("first")
    assert slot_members(plan, "extensions") == plan.order  # the default slot
    with pytest.raises(TypeError, match="not int"):
        antler_manifest_registry(3)
