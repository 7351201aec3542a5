"""`antler run` reports how the run ended: stop reason, token totals, error replies."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from antler.cli import cli


def run(tmp_path: Path, turns: list, *args: object, config: str | None = None
        ) -> tuple[int, str, str]:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(turns), encoding="utf-8")
    extra: list[object] = []
    if config is not None:
        path = tmp_path / "antler.yaml"
        path.write_text("title: {enabled: false}\nmemory: {enabled: false}\n" + config,
                        encoding="utf-8")
        extra = ["--config", path]
    result = CliRunner().invoke(cli, [str(a) for a in ["run", "go", "--model",
                                                        f"scripted:{script}", "--home",
                                                        tmp_path / "home", *extra, *args]])
    return result.exit_code, result.stdout, result.stderr


def test_a_retried_rate_limit_ends_normally_with_token_totals(tmp_path):
    code, out, err = run(tmp_path, [
        {"error": {"kind": "rate_limit", "retry_after": 0}},
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": "echo hi"}}],
         "usage": {"input_tokens": 100, "output_tokens": 10}},
        {"content": "All done.", "usage": {"input_tokens": 150, "output_tokens": 5}},
    ], config="")
    assert code == 0, err
    assert out.strip() == "All done."
    assert "[tokens] 265 tokens (250 in, 15 out) over 2 model calls" in err
    assert "[stop]" not in err and "[error]" not in err


def test_an_error_reply_prints_its_reason_and_exits_1(tmp_path):
    code, out, err = run(tmp_path, [{"error": "auth"}], config="")
    assert code == 1
    assert "rejected the credentials" in out  # the reply itself, as the answer
    assert "[error] The model provider rejected the credentials" in err
    assert "[stop] error_fallback: the model call failed" in err
    assert "Traceback" not in err


def test_the_error_is_reported_without_a_checkpointer_too(tmp_path):
    code, _, err = run(tmp_path, [{"error": "timeout"}] * 3, config=(
        "storage: {checkpointer: none}\nllm_error_handling: {retry_base_delay_ms: 0, "
        "retry_cap_delay_ms: 0}\n"))
    assert code == 1
    assert "[error] The model provider kept failing (rate limits, timeouts or server errors) " \
           "after 3 attempts" in err
    assert "[stop] error_fallback" in err


def test_a_token_capped_run_prints_its_stop_reason(tmp_path):
    code, out, err = run(tmp_path, [
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": "echo one"}}],
         "usage": {"input_tokens": 1500, "output_tokens": 100}},
        "never reached",
    ], config="token_budget: {enabled: true, max_tokens: 1000}\n")
    assert code == 0, err
    assert out.startswith("[TOKEN BUDGET EXCEEDED]")
    assert "<- bash" not in err  # the model asked, but the call was stripped before it ran
    assert "[stop] token_capped: the run used its token budget (1600 of 1000 total tokens)" \
        in err


def test_without_token_usage_no_totals_are_printed(tmp_path):
    code, _, err = run(tmp_path, ["Hi."], config="token_usage: {enabled: false}\n")
    assert code == 0, err
    assert "[tokens]" not in err


def test_one_run_through_every_guard_ends_with_the_right_stop_reason(tmp_path):
    """A retried rate limit, a looping subagent warned then stopped, an empty answer
    retried, and a reply cut at the length limit: the run says why it ended."""
    same = {"tool_calls": [{"name": "bash", "args": {"command": "echo same"}}]}
    code, out, err = run(tmp_path, [
        {"error": {"kind": "rate_limit", "retry_after": 0}},                   # lead, retried
        {"tool_calls": [{"name": "task", "args": {"description": "research",
                                                  "prompt": "Find the page."}}]},
        same, same, same, same, same,                                           # subagent
        "",                                                                     # lead: empty
        {"content": "The page says that the answer is", "finish_reason": "length"},
    ], "--subagents", config="")
    assert code == 0, err
    assert out.strip() == "The page says that the answer is"
    assert err.count("-> task(") == 1 and err.count("<- task:") == 1  # edits not re-printed
    assert "<- task: [FORCED STOP] `bash` repeated 5 times" in err
    assert "[stop] model_length_capped: the reply was cut at the model's length limit " \
           "(openai: finish_reason=length)" in err
    assert "over 2 model calls and 1 subagent task" in err
    assert "[error]" not in err
