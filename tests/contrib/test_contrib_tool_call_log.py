"""The contrib tool_call_log plugin: packaged like a third party's, logs real tool calls."""

from __future__ import annotations

import json

from antler.chain import plan_chain
from antler.chain.config import parse_config
from antler.plugin_api.registry import discover
from tests.plugins.support import make_agent


def test_it_lands_in_the_extension_slot_of_both_chains_when_enabled():
    registry = discover()
    config = parse_config("tool_call_log: {enabled: true}", registry)
    for chain in ("lead", "subagent"):
        plan = plan_chain(config, chain, registry=registry)
        position = plan.order.index("tool_call_log")
        points = plan.resolution.point_positions
        assert points["@custom_end"] <= position < points["@tail_start"]
    assert "tool_call_log" in plan_chain(None, registry=registry).excluded


def test_each_tool_call_becomes_one_json_line(tmp_path):
    registry = discover()
    config = parse_config("tool_call_log: {enabled: true, include_args: true}", registry)
    script = [
        {"content": "", "tool_calls": [
            {"name": "bash", "args": {"command": "echo hi"}},
            {"name": "ls", "args": {"path": "/mnt/user-data"}}]},
        {"content": "", "tool_calls": [{"name": "read_file", "args": {"path": "missing.txt"}}]},
        "done",
    ]
    agent, _ = make_agent(tmp_path, script, config=config, registry=registry)
    with agent:
        agent.invoke("go", thread_id="t1")
    log = tmp_path / "users" / "default" / "threads" / "t1" / "tool-calls.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["tool"] for r in records) == ["bash", "ls", "read_file"]
    by_tool = {r["tool"]: r for r in records}
    assert by_tool["bash"]["args"] == {"command": "echo hi"}
    assert by_tool["bash"]["status"] == "success"
    assert by_tool["read_file"]["status"] == "error"
    assert all(r["duration_ms"] >= 0 for r in records)


def test_disabled_by_default_nothing_is_written(tmp_path):
    agent, _ = make_agent(tmp_path, [
        {"content": "", "tool_calls": [{"name": "bash", "args": {"command": "true"}}]}, "ok"])
    with agent:
        agent.invoke("go", thread_id="t1")
    assert not list(tmp_path.rglob("tool-calls.jsonl"))
