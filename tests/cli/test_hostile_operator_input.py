"""Operator input an attacker or a tired operator writes, through `antler config check`.

Each case is a config file (or a path) that used to pass silently, crash, or say what
was wrong without where or how to fix it. Every case must exit with its code, print
no traceback, and name the file, the line (where there is one), what is wrong and the
fix. Run in process through the real command (`CliRunner`), against the installed
plugins; the extensions are classes of this module.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain.agents.middleware import AgentMiddleware

from antler.cli import cli
from tests.plugin_api.test_hostile_plugins import NameNotText, NameRaises  # noqa: F401 - named by path below

HERE = __name__


class NodeHookWithoutState(AgentMiddleware):
    def before_model(self) -> None:  # type: ignore[override]
        return None


class WrapHookWithoutHandler(AgentMiddleware):
    def wrap_model_call(self, request: Any) -> Any:  # type: ignore[override]
        return None


class AsyncWrapHookWithoutHandler(AgentMiddleware):
    async def awrap_tool_call(self, request: Any) -> Any:  # type: ignore[override]
        return None


class HookThatIsNotAMethod(AgentMiddleware):
    after_model = 5  # type: ignore[assignment]


class StateOnlyHook(AgentMiddleware):
    """Valid: LangGraph passes the runtime only to a hook that names it."""

    def before_model(self, state: Any) -> None:  # type: ignore[override]
        return None


class RuntimeByKeyword(AgentMiddleware):
    """Valid: LangGraph passes `runtime` by keyword."""

    def before_model(self, state: Any, *, runtime: Any) -> None:  # type: ignore[override]
        return None


NOT_A_CLASS = 3


def check(path: Path | str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["config", "check", *args, str(path)])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def extension(entry: str) -> bytes:
    return f"extensions:\n  middlewares:\n    - {HERE}:{entry}\n".encode()


CASES: list[tuple[str, bytes, list[str]]] = [
    ("nul_byte", b"title: {enabled: false}\x00\n",
     [":1:24: invalid YAML: the character U+0000 (a control character) is not allowed",
      'write it as an escape inside double quotes ("\\x00")']),
    ("control_character_in_a_string", b'title:\n  enabled: false\nx: "a\x07b"\n',
     [":3:6: invalid YAML: the character U+0007"]),
    ("tab_indentation", b"title:\n\tenabled: false\n",
     [":2:1: invalid YAML:", "YAML indents with spaces, never tabs"]),
    ("second_document", b"title: {enabled: false}\n---\ntitle: {enabled: true}\n",
     [":2:1: invalid YAML:", "holds one YAML document: remove this `---`"]),
    ("number_as_section_name", b"1: 2\n",
     [":1:1: <root>: the key `1` is not text; quote it (`'1': ...`)"]),
    ("null_key_in_a_section", b"title:\n  enabled: false\n  ~: 3\n",
     [":3:3: title: the key `null` is not text"]),
    ("misspelt_plugin_section", b"sumarization:\n  enabled: true\n",
     [":1:1: sumarization: unknown key 'sumarization' (did you mean 'summarization'?)"]),
    ("wrong_shape_of_a_documented_section", b"models: [a, b]\n",
     [":1:1: models: expects a mapping (`models:` — which chat models the agent uses and "
      "what they can do), e.g. `models: {key: value}`; got a list"]),
    ("unclosed_environment_reference",
     b"models:\n  default: main\n  named:\n    main:\n      use: openai:gpt-4o\n"
     b"      api_key: ${OPENAI_KEY\n",
     [":6:7: models.named.main.api_key: '${OPENAI_KEY' is not an environment reference; "
      "write ${NAME} or $NAME"]),
    ("section_enables_what_plugins_switches_off",
     b"plugins:\n  title: {enabled: false}\ntitle:\n  enabled: true\n",
     [":4:3: title.enabled: true contradicts ", ":2:11: plugins.title.enabled: false, which "
      "switches plugin 'title' off; remove one of the two"]),
    ("extension_joining_no_chain",
     f"extensions:\n  middlewares:\n    - {{use: '{HERE}:StateOnlyHook', chains: []}}\n"
     .encode(),
     [".chains: is empty, so the extension would join no chain; list the chains it joins"]),
    ("extension_with_an_empty_path", b"extensions:\n  middlewares:\n    - ''\n",
     [":3:7: extensions.middlewares[0]: class path '' is not of the form "
      "'package.module:ClassName'"]),
    ("extension_gate_that_would_fail_open",
     f"extensions:\n  middlewares:\n    - {{use: '{HERE}:StateOnlyHook', security_gate: true,"
     " required: false}\n".encode(),
     [":3:7: extensions.middlewares[0]: security_gate: true fails closed, so `required: "
      "false` is refused"]),
    ("node_hook_without_state", extension("NodeHookWithoutState"),
     [":3:7: extensions.middlewares[0]: " + HERE + ":NodeHookWithoutState: `before_model(self)`"
      " cannot be called with (state, runtime); define `def before_model(self, state, "
      "runtime)`"]),
    ("wrap_hook_without_handler", extension("WrapHookWithoutHandler"),
     ["`wrap_model_call(self, request)` cannot be called with (request, handler)"]),
    ("async_wrap_hook_without_handler", extension("AsyncWrapHookWithoutHandler"),
     ["`awrap_tool_call(self, request)` cannot be called with (request, handler)"]),
    ("hook_that_is_not_a_method", extension("HookThatIsNotAMethod"),
     ["`after_model` is int, not a method; define `def after_model(self, state, runtime)`"]),
    ("name_that_raises", extension("NameRaises"),
     [":3:7: extensions.middlewares[0]: " + HERE + ":NameRaises: reading its `name` raised "
      "RuntimeError: no name today; make `name` a plain string attribute"]),
    ("name_that_is_not_text", extension("NameNotText"),
     ["its `name` is 5, not a non-empty string"]),
    ("extension_naming_a_value", extension("NOT_A_CLASS"),
     ["names a value of type int (3), not a subclass of langchain.agents.middleware."
      "AgentMiddleware; point it at a middleware class"]),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_bad_operator_input_is_one_located_error_with_its_fix(tmp_path, text, expected):
    path = tmp_path / "antler.yaml"
    path.write_bytes(text)

    code, output = check(path)

    assert code == 1, output
    assert output.startswith("error: "), output
    for part in expected:
        assert part in output, output
    assert "<unicode string>" not in output and "Value error," not in output
    assert "unexpected" not in output and "expects a string or" not in output


@pytest.mark.parametrize("entry", ["StateOnlyHook", "RuntimeByKeyword"])
def test_hooks_langgraph_can_call_are_not_flagged(tmp_path, entry):
    path = tmp_path / "antler.yaml"
    path.write_bytes(extension(entry))

    code, output = check(path)

    assert code == 0, output


def test_an_unset_environment_reference_is_a_warning_naming_the_variable(tmp_path,
                                                                          monkeypatch):
    monkeypatch.delenv("ANTLER_TEST_UNSET_KEY", raising=False)
    path = tmp_path / "antler.yaml"
    path.write_text("models:\n  default: main\n  named:\n    main:\n      use: openai:gpt-4o\n"
                    "      api_key: ${ANTLER_TEST_UNSET_KEY}\n")

    code, output = check(path)
    assert code == 0, output
    assert ("antler.yaml:6:7: models.named.main.api_key refers to $ANTLER_TEST_UNSET_KEY, "
            "which is not set here; export ANTLER_TEST_UNSET_KEY") in output
    assert check(path, "--strict")[0] == 1

    monkeypatch.setenv("ANTLER_TEST_UNSET_KEY", "sk-test")
    assert "ANTLER_TEST_UNSET_KEY" not in check(path)[1]


@pytest.mark.parametrize(("make", "expected"), [
    (lambda tmp: tmp / "missing.yaml",
     "cannot read: No such file or directory; check the path"),
    (lambda tmp: tmp,
     "cannot read: Is a directory; give the path of a file, not of a directory"),
], ids=["missing", "directory"])
def test_a_path_that_is_not_a_readable_file_says_why_and_what_to_do(tmp_path, make,
                                                                    expected):
    from antler.chain.config import load_config
    from antler.errors import ConfigError
    from antler.plugin_api.registry import PluginRegistry

    with pytest.raises(ConfigError) as caught:
        load_config(make(tmp_path), PluginRegistry())

    assert expected in str(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_file_says_to_fix_its_permissions(tmp_path):
    from antler.chain.config import load_config
    from antler.errors import ConfigError
    from antler.plugin_api.registry import PluginRegistry

    path = tmp_path / "antler.yaml"
    path.write_text("title: {enabled: false}\n")
    path.chmod(0)

    with pytest.raises(ConfigError, match="cannot read: Permission denied; make the file "
                                          "readable"):
        load_config(path, PluginRegistry())


LONG_ID = "x" * 500


@pytest.mark.parametrize(("args", "expected"), [
    (["threads", "show", "../x"], "Invalid thread id '../x': it contains a path separator"),
    (["threads", "delete", "--yes", "../.."], "Invalid thread id '../..': it contains a path"),
    (["threads", "delete", "--yes", LONG_ID],
     f"Invalid thread id '{LONG_ID[:39]}...' (500 chars): it is 500 characters long"),
    (["threads", "prune", "ok", "a\x01b"], "Invalid thread id 'a\\x01b': it contains a NUL"),
    (["threads", "show", "t", "--user", "../u"], "Invalid user id '../u'"),
    (["threads", "list", "--user", ".."], "Invalid user id '..'"),
], ids=["show_dotdot", "delete_dotdot", "delete_long", "prune_control", "show_user",
        "list_user"])
def test_threads_commands_refuse_an_impossible_id_with_its_rule(tmp_path, args, expected):
    """An id no thread can have is refused before the database is asked, with the rule
    it breaks (not 'there is no thread ...' echoing a 500-character id back)."""
    result = CliRunner().invoke(cli, [*args, "--home", str(tmp_path)])

    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"error: {expected}"), result.output
    assert len(result.output) < 400 and LONG_ID not in result.output


class CallsTheModelTwice(AgentMiddleware):
    """Legitimate (a retry does it), but the one-turn script then runs out mid-run."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        handler(request)
        return handler(request)


def test_a_run_that_fails_after_streaming_text_ends_the_line_before_the_error(tmp_path):
    (tmp_path / "script.yaml").write_text("turns: ['hello there']\n")
    (tmp_path / "antler.yaml").write_bytes(extension("CallsTheModelTwice"))

    result = CliRunner().invoke(cli, [
        "run", "hi", "--config", str(tmp_path / "antler.yaml"), "--model",
        f"scripted:{tmp_path / 'script.yaml'}", "--home", str(tmp_path / "home")])

    assert result.exit_code == 1
    assert result.stdout == "hello there\n"
    assert "ran out of script" in result.stderr and "Traceback" not in result.output


def test_doctor_warns_of_a_hook_langchain_cannot_call(tmp_path):
    import json

    path = tmp_path / "antler.yaml"
    path.write_bytes(extension("WrapHookWithoutHandler"))

    result = CliRunner().invoke(cli, ["doctor", "--json", "--config", str(path)])

    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["plugins"]["status"] == "warn"
    assert ("plugin 'wrap_hook_without_handler' [" in checks["plugins"]["detail"]
            and "`wrap_model_call(self, request)` cannot be called with (request, handler)"
            in checks["plugins"]["detail"])




def test_a_run_warns_of_an_optional_extension_it_leaves_out(tmp_path):
    """Left out silently before: the run went on without it and said nothing."""
    (tmp_path / "script.yaml").write_text("turns: ['hello there']\n")
    config = tmp_path / "antler.yaml"
    config.write_text("extensions:\n  middlewares:\n"
                      "    - {use: 'antler_no_such_module:Guard', required: false}\n")

    result = CliRunner().invoke(cli, [
        "run", "hi", "--config", str(config), "--model",
        f"scripted:{tmp_path / 'script.yaml'}", "--home", str(tmp_path / "home")])

    assert result.exit_code == 0, result.output
    assert result.stdout == "hello there\n"
    assert result.stderr.count("is left out") == 1, result.stderr
    assert (f"warning: 'guard' [{config}:3] is left out of the lead chain: optional extension "
            "failed to load: middleware class 'antler_no_such_module:Guard': module "
            "'antler_no_such_module' is not installed") in result.stderr


def hang_until_ended_and_signal(target: int, ended: Any) -> None:
    """Hang the main thread in a read (a hook blocked where Python never gets control back)
    and, once it is blocked there, send SIGTERM to the thread `target`. The read ends once
    `ended` is set (the process would have ended by then), or after a guard.

    The signal goes only when the kernel shows the main thread in that read: a handler
    noted for the main thread before it blocked would stop it before the hook hangs."""
    import signal
    import threading
    import time

    reader, writer = os.pipe()
    syscall = Path(f"/proc/self/task/{threading.main_thread().native_id}/syscall")
    if not os.access(syscall, os.R_OK):
        pytest.skip("the kernel does not show what a thread waits in (/proc/.../syscall)")

    def send() -> None:
        try:
            deadline = time.monotonic() + 10
            while not syscall.read_text().startswith(f"0 {reader:#x} "):  # read(reader)
                if time.monotonic() > deadline:
                    return
                time.sleep(0.001)
            signal.pthread_kill(target, signal.SIGTERM)
            ended.wait(5)
        finally:
            os.write(writer, b"x")

    sender = threading.Thread(target=send, name="sender", daemon=True)
    sender.start()
    try:
        os.read(reader, 1)
    finally:
        sender.join(10)
        os.close(reader)
        os.close(writer)


def test_a_stop_ends_a_run_whose_hook_never_returns(monkeypatch, capfd):
    """SIGTERM reaches the run through its watcher thread, which kills the commands and
    waits for the main thread to take the stop; a plugin's hook blocked where Python never
    gets control back (a sleep, a lock) kept the run alive. After the grace period the
    process ends, saying why. In process: `os._exit` is replaced, and the 'hook' is a read
    that the replacement ends."""
    import gc
    import signal
    import threading
    from types import SimpleNamespace

    import click

    from antler.cli import run as run_module

    ended = threading.Event()
    codes: list[int] = []

    def exit_(code: int) -> None:
        codes.append(code)
        ended.set()

    monkeypatch.setattr(run_module.os, "_exit", exit_)
    monkeypatch.setattr(run_module, "STOP_GRACE_SECONDS", 0.2)
    agent = SimpleNamespace(services=SimpleNamespace(items={}))

    try:
        with pytest.raises(click.exceptions.Exit) as caught, \
                run_module._stops_commands(agent, "t1"):
            watcher, = (thread for thread in threading.enumerate()
                        if thread.name == "antler-run-signals")
            hang_until_ended_and_signal(watcher.ident, ended)
    finally:
        gc.unfreeze()  # the stop freezes the collector, for a process about to end

    assert codes == [128 + signal.SIGTERM] and caught.value.exit_code == 128 + signal.SIGTERM
    assert "stopped: the run did not stop within 0.2 s (a plugin's hook does not return); "\
           "thread 't1' keeps what it saved" in capfd.readouterr().err


def test_a_stop_that_reaches_a_thread_started_before_the_run_still_stops_it(
        monkeypatch, capfd):
    """A thread started before the run (a library's, the test runner's) does not block the
    signals, so SIGTERM may land there rather than with the watcher. The interpreter then
    noted the stop for the main thread, but the watcher never saw it: the running commands
    were not killed and a hook that never returns kept the run alive past the grace
    period. Whichever thread takes it, the commands are killed and the grace applies."""
    import gc
    import signal
    import threading
    from types import SimpleNamespace

    import click

    from antler.cli import run as run_module

    ended, interrupted, release = threading.Event(), threading.Event(), threading.Event()
    codes: list[int] = []

    def exit_(code: int) -> None:
        codes.append(code)
        ended.set()

    monkeypatch.setattr(run_module.os, "_exit", exit_)
    monkeypatch.setattr(run_module, "STOP_GRACE_SECONDS", 0.2)
    provider = SimpleNamespace(interrupt=interrupted.set)
    agent = SimpleNamespace(services=SimpleNamespace(items={"sandbox_provider": provider}))
    early = threading.Thread(target=release.wait, name="started-before-the-run", daemon=True)
    early.start()  # its signal mask is the runner's: nothing blocked
    try:
        with pytest.raises(click.exceptions.Exit) as caught, \
                run_module._stops_commands(agent, "t1"):
            hang_until_ended_and_signal(early.ident, ended)
    finally:
        release.set()
        early.join(5)
        gc.unfreeze()

    assert interrupted.is_set(), "the running commands were not killed"
    assert codes == [128 + signal.SIGTERM] and caught.value.exit_code == 128 + signal.SIGTERM
    assert "stopped: the run did not stop within 0.2 s" in capfd.readouterr().err
