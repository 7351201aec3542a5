"""Record and replay: recordings of real chains replay identically, config changes show up
in the behavioural diff with the plugin named, secrets never reach the file, bad files are
refused with where and why, and a directory replays as a suite."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from antler.chain.config import load_config
from antler.cli import cli
from antler.plugin_api.registry import discover
from antler.replay.check import check_recording
from antler.replay.recording import RecordingError, load_recording
from antler.replay.redact import REDACTED, Redactor
from antler.runtime.agent import create_agent
from antler.runtime.models import ScriptedChatModel

WRITE = "echo hello > /mnt/user-data/outputs/hi.txt && cat /mnt/user-data/outputs/hi.txt"


@pytest.fixture(scope="module")
def registry():
    return discover()


def run(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data,
                    encoding="utf-8")
    return path


def record_scripted(tmp_path: Path, registry, *, fuse: bool = True, config=None,
                    turns=None, name: str = "rec.yaml") -> Path:
    model = ScriptedChatModel(turns or [
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": WRITE}}]},
        "Wrote hi.txt for you.",
        {"content": "", "tool_calls": [{"name": "read_file",
                                        "args": {"path": "/mnt/user-data/outputs/hi.txt"}}]},
        "It says hello.",
    ], side_scripts={"title": ["Writing hi"]})
    path = tmp_path / name
    with create_agent(config, model=model, registry=registry, base_dir=tmp_path / "home",
                      checkpointer="memory", fuse=fuse, record=path) as agent:
        agent.invoke("write a file", thread_id="t1")
        agent.invoke("what does it say?", thread_id="t1")
        assert agent.recorder.problems == []
    return path


# -- recording real conversations and replaying them against their own config -------------


@pytest.mark.parametrize("fuse", [True, False])
def test_a_scripted_conversation_replays_identically_against_its_own_config(tmp_path,
                                                                            registry, fuse):
    path = record_scripted(tmp_path, registry, fuse=fuse)
    recording = load_recording(path)
    header = recording.recording
    assert header.format == 1 and header.thread_id == "t1" and "sandbox" in header.chain
    assert header.config["digest"].startswith("sha256:")
    assert [item.text for item in recording.inputs] == ["write a file", "what does it say?"]
    assert [item.calls for item in recording.inputs] == [2, 2]
    assert recording.turns[0].tool_calls[0].name == "bash"
    assert recording.inputs[0].tool_results[recording.turns[0].tool_calls[0].id].content \
        == "hello"
    assert [turn.content for turn in recording.title] == ["Writing hi"]
    observed = recording.inputs[0].observed
    assert observed.tools[0].outcome == "executed" and observed.final == "Wrote hi.txt for you."
    # A recording is a script too: the scripted model plays its replies.
    assert len(ScriptedChatModel.from_yaml(path).script) == 4

    config = load_config(None, registry)
    for stub in (False, True):
        diff = check_recording(path, config, registry=registry, stub=stub, fuse=fuse)
        assert diff.equal, diff.as_json()
        assert all(not run.b.divergences for run in diff.runs)
        assert diff.runs[1].b.tools[0].name == "read_file"
        assert diff.runs[1].b.final == "It says hello."


class ProviderShapedModel(BaseChatModel):
    """Answers like a provider's integration: its own message and tool-call ids, usage with
    details, finish reasons and metadata, text in content blocks, and a 500 on the first
    call."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "provider-shaped"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ProviderShapedModel:
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.calls += 1
        if self.calls == 1:
            error: Any = RuntimeError("The server had an error while processing your request.")
            error.status_code = 500
            error.code = "server_error"
            raise error
        usage = {"input_tokens": 1200 + self.calls, "output_tokens": 40,
                 "total_tokens": 1240 + self.calls,
                 "input_token_details": {"cache_read": 1024}}
        metadata = {"model_name": "gpt-fake-2024", "system_fingerprint": "fp_44709d6fcb",
                    "service_tier": "default"}
        if self.calls == 2:
            message = AIMessage(
                content=[{"type": "text", "text": "Let me check."}],
                id="chatcmpl-AbC123", usage_metadata=usage,
                tool_calls=[{"name": "bash", "args": {"command": "echo provider"},
                             "id": "call_Xy9Lk2Pq", "type": "tool_call"}],
                response_metadata={**metadata, "finish_reason": "tool_calls"})
        else:
            message = AIMessage(content="It printed provider.", id=f"chatcmpl-Z{self.calls}",
                                usage_metadata=usage,
                                response_metadata={**metadata, "finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_a_provider_shaped_conversation_replays_identically_and_offline(tmp_path, registry,
                                                                       monkeypatch):
    config_path = write(tmp_path / "a.yaml", {
        "models": {"default": "openai:gpt-4o", "title": "anthropic:claude-sonnet-4-5"},
        "llm_error_handling": {"retry_base_delay_ms": 0, "retry_cap_delay_ms": 0}})
    config = load_config(config_path, registry)
    path = tmp_path / "provider.yaml"
    with create_agent(config, model=ProviderShapedModel(), registry=registry,
                      base_dir=tmp_path / "home", checkpointer="memory", record=path,
                      services={"title_model": ScriptedChatModel(["Provider run"])}) as agent:
        agent.invoke("run echo", thread_id="p1")
    recording = load_recording(path)
    error, ask, answer = recording.turns
    assert error.error is not None and error.error.kind == "server"
    assert error.error.status_code == 500 and error.error.code == "server_error"
    assert ask.tool_calls[0].id == "call_Xy9Lk2Pq" and ask.content == "Let me check."
    assert ask.finish_reason == "tool_calls" and ask.usage.input_tokens == 1202
    assert answer.finish_reason == "stop"
    assert recording.inputs[0].observed.tools[0].status == "success"

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("replay opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    diff = check_recording(path, config, registry=registry)
    assert diff.equal, diff.as_json()
    assert diff.runs[0].b.final == "It printed provider."
    assert diff.runs[0].b.usage == recording.inputs[0].observed.usage


# -- behavioural diff through the command line -------------------------------------------------


def record_with_cli(tmp_path: Path) -> Path:
    script = write(tmp_path / "script.yaml", {"turns": [
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": WRITE}}]},
        "Wrote hi.txt for you."], "title": ["Writing hi"]})
    path = tmp_path / "conversation.yaml"
    code, _out, err = run("run", "write a file", "--model", f"scripted:{script}", "--home",
                         tmp_path / "home", "--thread", "t1", "--record", path)
    assert code == 0, err
    assert f"[recorded] {path}" in err
    return path


def test_a_guardrail_change_shows_in_the_diff_with_the_plugin_named(tmp_path):
    path = record_with_cli(tmp_path)
    a = write(tmp_path / "a.yaml", "agent: {max_model_calls: 50}\n")
    b = write(tmp_path / "b.yaml", "guardrails:\n  enabled: true\n  provider: allowlist\n"
                                   "  provider_options: {allow: [read_file, ls]}\n")
    code, out, err = run("replay", path, "--config", a)
    assert code == 0, out + err
    assert "behaviour is equal" in out
    html = tmp_path / "diff.html"
    code, out, err = run("replay", path, "--config", a, "--against", b, "--html", html)
    assert code == 1, out + err
    assert "tool bash (call_1):" in out and "a.yaml: executed (success)" in out
    assert "b.yaml: refused by guardrail:" in out and "not on the allowlist" in out
    assert "diverged" in out  # the model was answered from the recording, and said so
    page = html.read_text(encoding="utf-8")
    assert "refused by guardrail" in page and "<script" in page and "http" not in \
        page.replace("http-equiv", "")
    code, out, err = run("replay", path, "--config", a, "--against", b, "--json")
    assert code == 1
    data = json.loads(out)
    tool = data["recordings"][0]["diff"]["runs"][0]["b"]["tools"][0]
    assert tool["outcome"] == "refused" and tool["by"] == "guardrail"
    assert "not on the allowlist" in tool["reason"]


def test_an_authorization_change_shows_in_the_diff_with_the_plugin_named(tmp_path):
    path = record_with_cli(tmp_path)
    b = write(tmp_path / "b.yaml", "authorization:\n  enabled: true\n  default_role: user\n"
                                   "  provider_options:\n    roles:\n      user: [read_file]\n")
    code, out, err = run("replay", path, "--against", b, "--json")
    assert code == 1, out + err
    run_diff = json.loads(out)["recordings"][0]["diff"]["runs"][0]
    tool = run_diff["b"]["tools"][0]
    assert tool["outcome"] == "refused" and tool["by"] == "authorization", tool
    assert run_diff["a"]["tools"][0]["outcome"] == "executed"
    assert any(d["what"] == "tool bash (call_1)" for d in run_diff["differences"])


def test_a_tool_the_chain_does_not_have_is_reported_for_its_run_and_replay_goes_on(
        tmp_path, registry):
    path = record_scripted(tmp_path, registry, turns=[
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": "echo x"}}]},
        "done", "second", "third"])
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["turns"][0]["tool_calls"][0]["name"] = "weather_lookup"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    diff = check_recording(path, load_config(None, registry), registry=registry)
    first, second = diff.runs
    assert first.b.missing_tools == ["weather_lookup"]
    assert first.b.tools[0].outcome == "missing"
    assert second.b.final == "second" and second.b.error is None


# -- redaction ---------------------------------------------------------------------------


def test_redaction_of_keys_authorization_values_environment_secrets_and_patterns():
    redactor = Redactor(["ACME-[0-9]{4}"], environ={"VENDOR_API_KEY": "v3ndor-s3cret-value",
                                                    "HOME": "/root"})
    text = ("key sk-proj-abcdefghijklmnopqrstuv and sk-ant-api03-abcdefgh, "
            "Authorization: Bearer eyJhbGciOi.payload.sig, curl -H 'X-Api-Key: k123456' "
            "token v3ndor-s3cret-value, order ACME-1234, home /root")
    clean = redactor.text(text)
    for secret in ("sk-proj-abcdefghijklmnopqrstuv", "sk-ant-api03", "eyJhbGciOi",
                   "k123456", "v3ndor-s3cret-value", "ACME-1234"):
        assert secret not in clean, (secret, clean)
    assert "/root" in clean and clean.count(REDACTED) >= 5
    data = redactor.data({"headers": {"Authorization": "Basic dXNlcjpwYXNz"},
                          "api_key": "anything", "nested": [{"password": "hunter2"}]})
    assert data == {"headers": {"Authorization": REDACTED}, "api_key": REDACTED,
                    "nested": [{"password": REDACTED}]}


def test_a_recording_never_holds_the_secrets(tmp_path, registry, monkeypatch):
    monkeypatch.setenv("PAYMENTS_TOKEN", "tok-live-998877665544")
    config = load_config(write(tmp_path / "c.yaml", {"record": {"redact": ["ACME-[0-9]+"]}}),
                         registry)
    command = ("echo 'Authorization: Bearer abcdefghijkl123' tok-live-998877665544 "
               "ACME-42 sk-abcdefghijklmnopqrstuvwx")
    path = record_scripted(tmp_path, registry, config=config, turns=[
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": command}}]},
        "Your key sk-abcdefghijklmnopqrstuvwx works for ACME-42.", "ok", "ok"])
    text = path.read_text(encoding="utf-8")
    for secret in ("abcdefghijkl123", "tok-live-998877665544", "ACME-42",
                   "sk-abcdefghijklmnopqrstuvwx"):
        assert secret not in text, secret
    assert load_recording(path).recording.redact == ["ACME-[0-9]+"]
    # the redacted recording still replays against its config
    assert check_recording(path, config, registry=registry, stub=True).equal


# -- bad input ----------------------------------------------------------------------------


def test_other_versions_and_damaged_files_are_refused_with_where_and_how(tmp_path, registry):
    good = record_scripted(tmp_path, registry)
    data = yaml.safe_load(good.read_text(encoding="utf-8"))

    newer = dict(data, recording={**data["recording"], "format": 2,
                                  "antler_version": "9.0.0"})
    path = write(tmp_path / "newer.yaml", yaml.safe_dump(newer, sort_keys=False))
    code, _out, err = run("replay", path)
    assert code == 2 and "Traceback" not in err
    assert f"{path}:2:3: recording.format is 2" in err
    assert "written by Antler 9.0.0" in err and "record the conversation again" in err

    cut = dict(data, turns=data["turns"][:3])
    path = write(tmp_path / "cut.yaml", yaml.safe_dump(cut, sort_keys=False))
    with pytest.raises(RecordingError, match=r"account for 4 model call.* holds 3"):
        load_recording(path)

    bad_turn = json.loads(json.dumps(data))
    bad_turn["turns"][1] = {"content": 5}
    path = write(tmp_path / "badturn.yaml", yaml.safe_dump(bad_turn, sort_keys=False))
    code, _, err = run("replay", path)
    assert code == 2 and "turns[1].content: expects a string" in err and f"{path}:" in err

    path = write(tmp_path / "broken.yaml", good.read_text(encoding="utf-8")[:300] + "\n  - [")
    code, _, err = run("replay", path)
    assert code == 2 and "damaged recording, not readable YAML" in err

    path = write(tmp_path / "script.yaml", ["just a reply"])
    code, _, err = run("replay", path)
    assert code == 2 and "not a recording" in err and "--model scripted:FILE" in err

    code, _, err = run("replay", tmp_path / "nowhere.yaml")
    assert code == 2 and "no such recording" in err
    code, _, err = run("replay", good, "--config", write(tmp_path / "x.yaml", "nope: 1\n"))
    assert code == 2 and "nope" in err and "Traceback" not in err


# -- a directory as a suite -----------------------------------------------------------------


def test_a_directory_of_recordings_replays_as_a_suite(tmp_path, registry):
    suite = tmp_path / "suite"
    suite.mkdir()
    record_scripted(suite, registry, name="one.yaml")
    record_scripted(suite, registry, name="two.yaml", turns=["hi", "there", "a", "b"])
    code, out, err = run("replay", suite, "--jobs", "2")
    assert code == 0, out + err
    assert "Replay suite" in out and "one.yaml" in out and "two.yaml" in out
    assert out.count("equal") >= 2
    write(suite / "zz-damaged.yaml", "recording: {format: 1}\n")
    code, out, err = run("replay", suite, "--json", "--jobs", "1")  # in process
    assert code == 2
    rows = {Path(item["path"]).name: item for item in json.loads(out)["recordings"]}
    assert rows["one.yaml"]["diff"]["equal"] and rows["two.yaml"]["diff"]["equal"]
    assert "damaged recording" in rows["zz-damaged.yaml"]["error"]


# -- the served graph and the Python API ----------------------------------------------------


def test_the_served_graph_records_each_thread_only_when_the_config_says_so(tmp_path,
                                                                           registry):
    from antler.runtime.server import build_server_agent

    def scripted() -> ScriptedChatModel:
        return ScriptedChatModel(["Hello from the server.", "Hello again."])

    plain = write(tmp_path / "plain.yaml", "agent: {max_model_calls: 50}\n")
    agent = build_server_agent(plain, registry=registry, model=scripted(),
                               base_dir=tmp_path / "home")
    try:
        assert agent.recorder is None  # off by default
    finally:
        agent.close()
    directory = tmp_path / "recordings"
    config_path = write(tmp_path / "served.yaml", {"record": {"enabled": True,
                                                              "directory": str(directory)}})
    agent = build_server_agent(config_path, registry=registry, model=scripted(),
                               base_dir=tmp_path / "home")
    try:  # as LangGraph Server runs it: the graph itself, thread id in the config
        agent.graph.invoke({"messages": [{"role": "user", "content": "hi"}]},
                           config={"configurable": {"thread_id": "s-1"}})
        agent.graph.invoke({"messages": [{"role": "user", "content": "hi"}]},
                           config={"configurable": {"thread_id": "s-2"}})
    finally:
        agent.close()
    assert sorted(p.name for p in directory.iterdir()) == ["s-1.yaml", "s-2.yaml"]
    second = load_recording(directory / "s-2.yaml")
    assert second.inputs[0].observed.final == "Hello again."
    config = load_config(config_path, registry)
    assert check_recording(directory / "s-1.yaml", config, registry=registry).equal


def test_memory_facts_are_recorded_and_compared(tmp_path, registry):
    model = ScriptedChatModel(["Noted: you like tea."], side_scripts={
        "memory": ['["The user likes green tea."]']})
    path = tmp_path / "memory.yaml"
    with create_agent(model=model, registry=registry, base_dir=tmp_path / "home",
                      checkpointer="memory", record={"path": str(path)}) as agent:
        agent.invoke("I like green tea", thread_id="m1")
    recording = load_recording(path)
    assert [turn.content for turn in recording.memory] == ['["The user likes green tea."]']
    a = load_config(None, registry)
    b = load_config(write(tmp_path / "b.yaml", "memory: {enabled: false}\n"), registry)
    diff = check_recording(path, a, b, registry=registry)
    assert diff.memory is not None and "The user likes green tea." in diff.memory.a
    assert diff.memory.b == "-" and not diff.equal


def test_a_later_run_continues_the_recording_and_a_saved_thread_exports(tmp_path):
    script = write(tmp_path / "script.yaml", {"turns": [
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": WRITE}}]},
        "Wrote hi.txt for you.", "Still here."], "title": ["Writing hi"]})
    path, home = tmp_path / "conversation.yaml", tmp_path / "home"
    for prompt in ("write a file", "and now?"):
        code, _, err = run("run", prompt, "--model", f"scripted:{script}", "--home", home,
                           "--thread", "t1", "--record", path)
        assert code == 0, err
    recording = load_recording(path)
    assert [item.text for item in recording.inputs] == ["write a file", "and now?"]
    assert [item.calls for item in recording.inputs] == [2, 1]
    code, out, err = run("replay", path)
    assert code == 0, out + err

    exported = tmp_path / "exported.yaml"
    code, _, err = run("threads", "export", "t1", "--format", "script", "--home", home,
                       "-o", exported)
    assert code == 0, err
    copy = load_recording(exported)
    assert copy.recording.source == "thread-export"
    assert [item.text for item in copy.inputs] == ["write a file", "and now?"]
    assert [turn.content for turn in copy.turns] == [turn.content for turn in recording.turns]
    assert [turn.content for turn in copy.title] == ["Writing hi"]
    code, out, err = run("replay", exported, "--stub-tools")
    assert code == 0, out + err
    code, _, err = run("threads", "export", "nope", "--home", home)
    assert code == 1 and "Traceback" not in err


def test_a_loop_guard_change_shows_stripped_calls_the_stop_reason_and_hidden_warnings(
        tmp_path, registry):
    same = {"content": "", "tool_calls": [{"name": "bash", "args": {"command": "echo again"}}]}
    path = record_scripted(tmp_path, registry, turns=[
        same, same, same, "Gave up repeating.", "bye"])
    strict = load_config(write(tmp_path / "strict.yaml",
                               "loop_detection: {warn_threshold: 1, hard_limit: 2}\n"), registry)
    diff = check_recording(path, load_config(None, registry), strict, registry=registry,
                           stub=True)
    first = diff.runs[0]
    assert not first.equal
    stripped = [tool for tool in first.b.tools if tool.outcome == "stripped"]
    assert stripped and stripped[0].by == "loop_detection", first.b.tools
    assert first.a.stop_reason is None and first.b.stop_reason == "loop_capped"
    aspects = {difference.what for difference in first.differences}
    assert {"stop reason", f"tool bash ({stripped[0].id})"} <= aspects
    assert "loop_detection" in " ".join(note.source for note in first.b.hidden), first.b.hidden
    assert diff.runs[1].b.final == "bye"  # the next run still replays from its own calls
