"""`models:` named models with provider settings, early provider checks, one-line errors."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage

from antler.chain.config import parse_config
from antler.cli import cli
from antler.errors import ConfigError
from antler.plugin_api.context import MODEL
from antler.plugin_api.modelerrors import describe_provider_error
from antler.plugin_api.registry import discover
from antler.runtime.agent import create_agent
from antler.runtime.models import ModelCatalog, ModelConfigError, check_provider
from antler.runtime.models import factory as model_factory

MODEL_CLASS = "tests.fixtures.chat_models:ConfiguredScriptedModel"


@pytest.fixture(scope="module")
def registry():
    return discover()


def config_of(registry, text: str):
    return parse_config(text, registry, source="antler.yaml")


NAMED = f"""
models:
  default: main
  title: small
  named:
    main:
      use: {MODEL_CLASS}
      model: main-1
      api_key: ${{ANTLER_TEST_KEY}}
      base_url: http://127.0.0.1:9/v1
      temperature: 0.25
      supports_vision: true
      kwargs:
        greeting: hi $ANTLER_TEST_USER
        script: ["The answer from main."]
    small:
      use: {MODEL_CLASS}
      model: small-1
      kwargs:
        script: ["A Title From Small"]
"""


@pytest.mark.parametrize("fuse", [True, False])
def test_named_models_reach_the_agent_and_the_title_plugin(registry, tmp_path, monkeypatch,
                                                           fuse):
    monkeypatch.setenv("ANTLER_TEST_KEY", "sk-secret")
    monkeypatch.setenv("ANTLER_TEST_USER", "ops")
    config = config_of(registry, NAMED)
    with create_agent(config, registry=registry, base_dir=tmp_path, checkpointer="memory",
                      fuse=fuse) as agent:
        result = agent.invoke("What is it?", thread_id="t1")
        main = agent.services.get(MODEL)
        state = agent.state("t1")
    assert isinstance(result["messages"][-1], AIMessage)
    assert result["messages"][-1].content == "The answer from main."
    assert (main.model, main.api_key, main.base_url, main.temperature, main.greeting) == (
        "main-1", "sk-secret", "http://127.0.0.1:9/v1", 0.25, "hi ops")
    assert state["title"] == "A Title From Small"  # models.title, not the main script
    assert agent.chain.plan.runtime.supports_vision  # the named default model says so


def test_a_reference_to_an_unknown_name_is_a_config_error_with_a_hint(registry):
    with pytest.raises(ConfigError) as caught:
        config_of(registry, "models:\n  default: mian\n  named:\n"
                            f"    main: {{use: {MODEL_CLASS}}}\n")
    message = str(caught.value)
    assert "antler.yaml:2:3" in message and "did you mean 'main'" in message


def test_plain_specs_still_work_beside_names(registry):
    config = config_of(registry, "models:\n  default: scripted\n  subagent: openai:gpt-4o\n")
    assert config.models.default == "scripted" and config.models.named == {}


def test_an_unset_environment_reference_names_the_key_and_the_variable(monkeypatch, registry):
    monkeypatch.delenv("ANTLER_TEST_KEY", raising=False)
    catalog = ModelCatalog(config_of(registry, NAMED).models.named)
    with pytest.raises(ModelConfigError, match=r"models\.named\.main\.api_key refers to "
                                               r"\$ANTLER_TEST_KEY"):
        catalog.resolve("main")


def test_a_model_class_that_rejects_its_settings_is_one_clear_error(registry):
    config = config_of(registry, "models:\n  named:\n    odd:\n      use: "
                                 "tests.fixtures.chat_models:RefusingModel\n")
    with pytest.raises(ModelConfigError, match=r"models\.named\.odd: .*RefusingModel rejected its "
                                               r"settings: ValueError: unsupported setting"):
        ModelCatalog(config.models.named).resolve("odd")


def test_an_unknown_provider_lists_the_real_ones():
    with pytest.raises(ModelConfigError) as caught:
        check_provider("foo:bar")
    message = str(caught.value)
    assert "unknown provider 'foo'" in message
    assert "anthropic" in message and "openai" in message


def test_a_missing_provider_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(model_factory, "known_providers",
                        lambda: {"acme": "langchain_acme_not_installed"})
    with pytest.raises(ModelConfigError, match="pip install langchain-acme"):
        check_provider("acme:model-1")


def test_a_missing_api_key_fails_before_any_call(monkeypatch):
    monkeypatch.setattr(model_factory, "known_providers", lambda: {"openai": "json"})
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY is not set"):
        check_provider("openai:gpt-4o")
    check_provider("openai:gpt-4o", has_key=True)  # an entry's api_key satisfies it
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    check_provider("openai:gpt-4o")


def test_langchains_provider_table_is_read():
    providers = model_factory.known_providers()
    assert providers["openai"] == "langchain_openai"
    assert providers["anthropic"] == "langchain_anthropic"
    # the built-in fallback agrees with LangChain where both know a provider
    for key, module in model_factory._FALLBACK_MODULES.items():
        if key in providers:
            assert providers[key].split(".")[0] == module


def test_antler_run_with_an_unknown_provider_is_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["run", "hi", "--model", "foo:bar", "--home",
                                      str(tmp_path)])
    assert result.exit_code == 1
    assert "unknown provider 'foo'" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_provider_sdk_errors_are_described_in_one_line():
    openai = pytest.importorskip("openai")
    import httpx

    request = httpx.Request("POST", "https://api.example.com/v1/chat/completions")
    response = httpx.Response(401, request=request)
    error = openai.AuthenticationError("Incorrect API key provided", response=response,
                                       body=None)
    text = describe_provider_error(error)
    assert text is not None and text.startswith("model provider error (openai "
                                                "AuthenticationError)")
    assert "check the API key" in text
    limited = openai.RateLimitError("slow down", response=httpx.Response(429, request=request),
                                    body=None)
    assert "throttling" in (describe_provider_error(limited) or "")
    assert describe_provider_error(ValueError("x")) is None


def test_an_unexpected_error_in_a_command_is_one_line_without_debug(tmp_path, monkeypatch):
    openai = pytest.importorskip("openai")
    import httpx

    from antler.cli import config as cli_config

    def boom(*args, **kwargs):
        request = httpx.Request("POST", "https://api.example.com")
        raise openai.RateLimitError("quota hit", response=httpx.Response(429, request=request),
                                    body=None)

    monkeypatch.setattr(cli_config, "check_config", boom)
    path = tmp_path / "c.yaml"
    path.write_text("{}\n")
    result = CliRunner().invoke(cli, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert "model provider error (openai RateLimitError): quota hit" in result.stderr
    assert "Traceback" not in result.stderr
    debug = CliRunner().invoke(cli, ["--debug", "config", "check", str(path)])
    assert "Traceback" in debug.stderr
