"""The `antler` command line, run against small manifests and configs written per test.

Most tests pass `--isolated` so the chain holds only the fixture plugins (plus
Antler's points and slots) whatever built-ins are installed; the fixture names
start with `fx_` so they never collide with a real plugin either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from langchain.agents.middleware import AgentMiddleware

from antler.cli import cli, main
from antler.cli.session import CHAIN_CHOICES, CONDITION_FLAGS
from antler.plugin_api.context import RuntimeOptions
from antler.plugin_api.manifest import Manifest, builtin_manifest
from antler.plugin_api.registry import LoadDiagnostic, PluginRegistry
from antler.plugin_api.spec import CHAIN_NAMES, RuntimeCondition

MANIFEST = """\
api_version: 1
plugins:
  - name: fx_guard
    factory: fx_missing.guard:build
    summary: refuses unsafe tool calls
    hooks: [wrap_tool_call]
    order:
      before: ["@guards_end"]
  - name: fx_audit
    factory: fx_missing.audit:build
    summary: records every model call
    hooks: [before_model, after_model]
    order:
      after: [fx_guard]
      outer_of: [fx_todo]
      before: ["@guards_end"]
  - name: fx_recap
    factory: fx_missing.recap:build
    summary: summarises long threads
    hooks: [before_model]
  - name: fx_todo
    factory: fx_missing.todo:build
    summary: plan-mode todo list
    hooks: [wrap_model_call, after_model]
    when: {plan_mode: true}
    order:
      after: ["@tail_start"]
  - name: fx_vision
    factory: fx_missing.vision:build
    enabled: "off"
    chains: [lead]
    hooks: [before_model]
  - name: fx_sub
    factory: fx_missing.sub:build
    chains: [subagent]
    hooks: [after_agent]
"""

CYCLE = """\
api_version: 1
plugins:
  - name: fx_a
    factory: fx_missing.m:a
    order: {after: [fx_c]}
  - name: fx_b
    factory: fx_missing.m:b
    order: {after: [fx_a]}
  - name: fx_c
    factory: fx_missing.m:c
    order: {after: [fx_b]}
"""

SHOW_KEYS = {"chain", "config", "runtime", "plugins", "points", "excluded", "fusion", "warnings",
             "problems", "ordering_warnings", "server_owned_keys", "sandbox", "factories_checked"}
SHOW_PLUGIN_KEYS = {"position", "name", "summary", "hooks", "hooks_from", "source",
                    "declared_at", "on_error", "on_error_from", "security_gate", "placed_by",
                    "constraints"}
EXPLAIN_KEYS = {"name", "chain", "summary", "source", "declared_at", "in_chain", "position",
                "chain_length", "hooks", "neighbours", "constraints", "through_absent", "warnings",
                "tie_break", "on_error", "on_error_from", "security_gate",
                "excluded", "text"}
LIST_KEYS = {"name", "summary", "distribution", "version", "entry_point", "declared_at",
             "status", "cause", "enabled", "when", "chains", "server_owned_keys"}


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "fixture.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    return path


@pytest.fixture
def write(tmp_path: Path) -> typing.Callable[[str, str], Path]:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


def run(*args: object, code: int = 0, isolated: bool = True) -> Result:
    argv = [str(a) for a in args]
    if isolated:
        argv.insert(0, "--isolated")
    # Wide enough that no row is cut, however long the temporary paths are (under xdist
    # they gain a `popen-gwN` level).
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(cli, argv)
    assert result.exit_code == code, (result.output, result.exception)
    if code:
        assert "Traceback" not in result.output
    return result


def run_json(*args: object, **kwargs: typing.Any) -> typing.Any:
    return json.loads(run(*args, "--json", **kwargs).stdout)


# -- chain show -----------------------------------------------------------------------------


def test_show_lists_the_chain_in_order_between_points(manifest: Path) -> None:
    out = run("--manifest", manifest, "chain", "show").stdout
    rows = [line.split()[:2] for line in out.splitlines() if line.strip()]
    named = [row[1] if row[0].isdigit() else row[0] for row in rows if len(row) == 2]
    order = ["fx_guard", "fx_audit", "@guards_end", "@custom_end", "fx_recap", "@tail_start"]
    assert [name for name in named if name in order] == order
    assert ["1", "fx_guard"] in rows and ["3", "fx_recap"] in rows
    assert "lead chain: 3 plugins" in out
    assert "custom slot ends · extensions slot begins" in out
    assert "after fx_guard; before @guards_end" in out  # placed by
    assert f"{manifest}:3" in out  # source of a manifest plugin: file:line


def test_show_says_why_each_absent_plugin_is_absent(manifest: Path) -> None:
    out = run("--manifest", manifest, "chain", "show").stdout
    absent = out[out.index("Not in the lead chain"):]
    assert "fx_vision" in absent
    assert "off by default; enable with `fx_vision: {enabled: true}`" in absent
    assert "runtime condition plan_mode is False, needs True (pass --plan)" in absent
    assert "does not join the lead chain (chains: subagent)" in absent


def test_show_runtime_flags_and_chain_choice(manifest: Path) -> None:
    planned = run_json("--manifest", manifest, "chain", "show", "--plan")
    assert [p["name"] for p in planned["plugins"]] == ["fx_guard", "fx_audit", "fx_recap",
                                                       "fx_todo"]
    assert planned["runtime"]["plan_mode"] is True
    sub = run_json("--manifest", manifest, "chain", "show", "--chain", "subagent")
    assert [p["name"] for p in sub["plugins"]] == ["fx_guard", "fx_audit", "fx_recap", "fx_sub"]
    assert sub["chain"] == "subagent"


def test_show_json_has_the_documented_keys(manifest: Path) -> None:
    report = run_json("--manifest", manifest, "chain", "show")
    assert set(report) == SHOW_KEYS
    assert all(set(p) == SHOW_PLUGIN_KEYS for p in report["plugins"])
    guard = report["plugins"][0]
    assert (guard["position"], guard["name"], guard["hooks"], guard["hooks_from"]) == (
        1, "fx_guard", ["wrap_tool_call"], "manifest")
    assert {"owner": "fx_guard", "kind": "before", "target": "@guards_end"}.items() <= \
        guard["constraints"][0].items()
    points = {p["name"]: p for p in report["points"]}
    assert points["@guards_end"]["after_position"] == 2
    assert points["@custom_end"]["slots_begin"] == ["extensions"]
    assert points["@tail_start"]["after_position"] == 3
    kinds = {row["name"]: row["kind"] for row in report["excluded"]}
    assert kinds == {"fx_vision": "off_by_default", "fx_todo": "runtime_condition",
                     "fx_sub": "not_in_chain"}
    todo = next(row for row in report["excluded"] if row["name"] == "fx_todo")
    assert todo["hint"] == "pass --plan"
    assert report["warnings"] == []


CLASS_AND_MISSING = """\
api_version: 1
plugins:
  - name: fx_todo_list
    factory: langchain.agents.middleware:TodoListMiddleware
  - name: fx_opaque
    factory: fx_missing.module:build
"""
"""One factory that imports (a class) and one that does not."""


def test_show_hooks_come_from_the_class_when_the_manifest_does_not_say(write) -> None:
    path = write("classes.yaml", CLASS_AND_MISSING)
    plugins = {p["name"]: p for p in run_json("--manifest", path, "chain", "show")["plugins"]}
    assert plugins["fx_todo_list"]["hooks"] == ["wrap_model_call", "after_model"]
    assert plugins["fx_todo_list"]["hooks_from"] == "class"
    assert plugins["fx_opaque"]["hooks"] is None
    out = run("--manifest", path, "chain", "show").stdout
    assert "?  ?  ?  ?  ?  ?" in out


def test_show_says_factories_are_not_imported_and_check_imports_them(write) -> None:
    path = write("factories.yaml", CLASS_AND_MISSING)
    quick = run_json("--manifest", path, "chain", "show")
    assert [p["name"] for p in quick["plugins"]] == ["fx_todo_list", "fx_opaque"]
    assert quick["factories_checked"] is False and quick["problems"] == []
    assert "--check imports them" in run("--manifest", path, "chain", "show").stdout

    checked = run_json("--manifest", path, "chain", "show", "--check")
    assert checked["factories_checked"] is True
    assert [p["name"] for p in checked["plugins"]] == ["fx_todo_list"]
    (excluded,) = [row for row in checked["excluded"] if row["name"] == "fx_opaque"]
    assert excluded["kind"] == "load_failed" and "fx_missing" in excluded["reason"]
    assert [(row["stage"], row["plugins"]) for row in checked["problems"]] == [
        ("load", ["fx_opaque"])]
    shown = run("--manifest", path, "chain", "show", "--check")
    assert "--check imports them" not in shown.stdout
    assert "'fx_opaque'" in shown.stderr and "fx_missing" in shown.stderr

    required = write("required.yaml", "plugins:\n  fx_opaque: {required: true}\n")
    failed = run("--manifest", path, "chain", "show", "--check", "--config", required, code=1)
    assert "building this chain fails" in failed.stderr and "fx_opaque" in failed.stderr
    run("--manifest", path, "chain", "show", "--config", required)  # fast path: not imported


def test_show_config_disables_enables_and_extends(manifest: Path, write) -> None:
    config = write("antler.yaml", """\
fx_recap:
  enabled: false
fx_vision: {enabled: true}
extensions:
  middlewares:
    - fx_missing.ext:Required
    - use: fx_missing.ext:Optional
      required: false
""")
    report = run_json("--manifest", manifest, "chain", "show", "--config", config)
    names = [p["name"] for p in report["plugins"]]
    assert "fx_vision" in names and "required" in names and "fx_recap" not in names
    required = next(p for p in report["plugins"] if p["name"] == "required")
    assert required["source"] == f"{config}:6"
    excluded = {row["name"]: row for row in report["excluded"]}
    assert excluded["fx_recap"]["kind"] == "disabled"
    assert f"disabled by config ({config}:2:3)" in excluded["fx_recap"]["reason"]
    assert excluded["optional"]["kind"] == "load_failed"
    assert "fx_missing" in excluded["optional"]["reason"]


def test_show_reports_broken_distributions_as_warnings(manifest: Path, monkeypatch,
                                                       write) -> None:
    def discover_with_failures() -> PluginRegistry:
        platform = builtin_manifest()
        registry = PluginRegistry.from_manifests([Manifest(
            source=platform.source, points=platform.points, slots=platform.slots,
            default_slot=platform.default_slot)])
        registry.diagnostics += [
            LoadDiagnostic("acme", "acme-antler", "importing 'acme_antler' failed: "
                           "ModuleNotFoundError: No module named 'acme_antler'"),
            LoadDiagnostic("core_thing", "antler", "antler_plugin_specs() raised KeyError"),
        ]
        return registry

    monkeypatch.setattr("antler.plugin_api.registry.discover", discover_with_failures)
    result = run("--manifest", manifest, "chain", "show", isolated=False)
    assert "warning: distribution 'acme-antler', entry point 'acme'" in result.stderr
    assert "No module named 'acme_antler'" in result.stderr
    assert "error: distribution 'antler'" in result.stderr  # a built-in is always required
    warnings = run_json("--manifest", manifest, "chain", "show", isolated=False)["warnings"]
    assert [(w["distribution"], w["required"]) for w in warnings] == [("acme-antler", False),
                                                                      ("antler", True)]
    checked = run_json("--manifest", manifest, "config", "check", write("a.yaml", "{}\n"),
                       "--no-import", isolated=False, code=1)
    assert [p["text"].split(",")[0] for p in checked["problems"]] == ["distribution 'antler'"]
    assert [w.split(",")[0] for w in checked["warnings"]] == ["distribution 'acme-antler'"]
    assert checked["warnings"][0].endswith("(optional: skipped)")
    listed = run_json("plugins", "list", isolated=False)
    failed = [row for row in listed if row["status"] == "failed"]
    assert [row["entry_point"] for row in failed] == ["acme", "core_thing"]
    assert "No module named 'acme_antler'" in failed[0]["cause"]


def test_manifest_option_works_after_the_command_too(manifest: Path) -> None:
    report = run_json("chain", "show", "--manifest", manifest)
    assert [p["name"] for p in report["plugins"]] == ["fx_guard", "fx_audit", "fx_recap"]


def assert_whole_cycle(first_line: str, text: str, path: Path) -> None:
    cycle = first_line.rpartition(": ")[2].split(" -> ")
    assert cycle[0] == cycle[-1] and sorted(cycle[:-1]) == ["fx_a", "fx_b", "fx_c"]
    for line in ("fx_b declares after: fx_a", "fx_c declares after: fx_b",
                 "fx_a declares after: fx_c"):
        assert line in text
    assert f"{path}:3" in text


def test_a_cycle_of_optional_plugins_is_printed_whole_and_left_out(write) -> None:
    path = write("cycle.yaml", CYCLE)
    result = run("--manifest", path, "chain", "show")
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"warning: optional plugins 'fx_a' ({path}:3), 'fx_b' ({path}:6), "
                            f"'fx_c' ({path}:9) are excluded from the lead chain: ordering "
                            "constraints form a cycle in the lead chain: ")
    assert_whole_cycle(first, result.stderr, path)
    assert "lead chain: 0 plugins" in result.stdout
    report = run_json("--manifest", path, "chain", "show")
    assert {row["name"]: row["kind"] for row in report["excluded"]} == dict.fromkeys(
        ["fx_a", "fx_b", "fx_c"], "broken")
    [problem] = report["problems"]
    assert (problem["stage"], problem["plugins"]) == ("order", ["fx_a", "fx_b", "fx_c"])
    assert problem["message"].startswith("ordering constraints form a cycle")


REQUIRE_CYCLE = "plugins:\n" + "".join(f"  fx_{x}: {{required: true}}\n" for x in "abc")


def test_a_cycle_of_required_plugins_is_an_error(write) -> None:
    path = write("cycle.yaml", CYCLE)
    config = write("antler.yaml", REQUIRE_CYCLE)
    result = run("--manifest", path, "chain", "show", "--config", config, code=1)
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: ordering constraints form a cycle in the lead chain: ")
    assert_whole_cycle(first, result.stderr, path)


def test_debug_shows_the_traceback(write) -> None:
    path = write("cycle.yaml", CYCLE)
    config = write("antler.yaml", REQUIRE_CYCLE)
    result = CliRunner().invoke(cli, ["--debug", "--isolated", "--manifest", str(path),
                                      "chain", "show", "--config", str(config)])
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "CycleError" in result.stderr
    assert "error: ordering constraints form a cycle" in result.stderr


def test_an_invalid_extra_manifest_names_file_and_line(write) -> None:
    path = write("bad.yaml", "api_version: 1\nplugins:\n  - name: fx_x\n    factroy: a.b:c\n")
    result = run("--manifest", path, "chain", "show", code=1)
    assert f"{path}:4:5" in result.stderr and "'factroy'" in result.stderr


def test_a_missing_manifest_file_is_a_usage_error(tmp_path: Path) -> None:
    run("--manifest", tmp_path / "nope.yaml", "chain", "show", code=2)


# -- chain explain --------------------------------------------------------------------------


def test_explain_prints_the_constraints_that_placed_a_plugin(manifest: Path) -> None:
    out = run("--manifest", manifest, "chain", "explain", "fx_audit").stdout
    assert out.startswith("fx_audit is at position 2 of 3 in the lead chain")
    assert "neighbours: fx_guard -> fx_audit -> fx_recap" in out
    assert f"fx_audit declares after: fx_guard [{manifest}:9]" in out
    assert "fx_todo is not in the chain (runtime condition plan_mode is False, needs True), " \
           "the order still holds through it" in out
    assert "hooks: before_model, after_model" in out


def test_explain_says_why_a_plugin_is_absent(manifest: Path) -> None:
    out = run("--manifest", manifest, "chain", "explain", "fx_todo").stdout
    assert "fx_todo is not in the lead chain: runtime condition plan_mode is False" in out
    assert "to include it: pass --plan" in out
    out = run("--manifest", manifest, "chain", "explain", "fx_todo", "--plan").stdout
    assert "fx_todo is at position 4 of 4" in out
    assert "fx_audit declares outer_of: fx_todo (the first wrap_* middleware" in out


def test_explain_unknown_name_suggests_and_exits_2(manifest: Path) -> None:
    result = run("--manifest", manifest, "chain", "explain", "fx_adit", code=2)
    assert result.stderr.startswith("error: no plugin named 'fx_adit' (did you mean "
                                    "'fx_audit'?)")


def test_explain_json(manifest: Path) -> None:
    placed = run_json("--manifest", manifest, "chain", "explain", "fx_audit")
    assert set(placed) == EXPLAIN_KEYS
    assert (placed["in_chain"], placed["position"], placed["chain_length"]) == (True, 2, 3)
    assert placed["neighbours"] == ["fx_guard", "fx_audit", "fx_recap"]
    assert any(c["owner"] == "fx_audit" and c["kind"] == "after" and c["target"] == "fx_guard"
               and c["declared_at"] == f"{manifest}:9" for c in placed["constraints"])
    absent = run_json("--manifest", manifest, "chain", "explain", "fx_vision")
    assert set(absent) == EXPLAIN_KEYS
    assert absent["in_chain"] is False and absent["position"] is None
    assert absent["excluded"]["kind"] == "off_by_default"


# -- chain graph ----------------------------------------------------------------------------


def test_graph_mermaid(manifest: Path) -> None:
    out = run("--manifest", manifest, "chain", "graph", "--plan", "--point-edges").stdout
    assert out.startswith("flowchart TD\n")
    assert 'pt_guards_end{{"@guards_end"}}' in out
    assert 'pl_fx_audit["2. fx_audit' in out  # then its hooks, when the manifest declares them
    assert 'pl_fx_audit -->|"after"| pl_fx_guard' in out
    assert 'pl_fx_audit -->|"outer_of"| pl_fx_todo' in out
    assert 'pl_fx_recap -->|"after (slot bound extensions)"| pt_custom_end' in out
    assert 'pt_tail_start -->|"after"| pt_custom_end' in out


def test_graph_dot_and_json(manifest: Path, tmp_path: Path) -> None:
    out = run("--manifest", manifest, "chain", "graph", "--format", "dot").stdout
    assert out.startswith('digraph "antler lead chain" {')
    assert '"@guards_end" [shape=hexagon, style=dashed];' in out
    assert '"fx_audit" -> "fx_guard" [label="after", constraint=false];' in out
    target = tmp_path / "chain.dot"
    run("--manifest", manifest, "chain", "graph", "--format", "dot", "-o", target)
    assert target.read_text(encoding="utf-8") == out
    graph = run_json("--manifest", manifest, "chain", "graph")
    assert set(graph) == {"chain", "nodes", "edges"}
    assert [n["id"] for n in graph["nodes"]] == ["@base_end", "fx_guard", "fx_audit", "@guards_end",
                                                 "@custom_end", "fx_recap", "@tail_start"]
    assert all(set(e) == {"from", "to", "kind", "slot", "side", "declared_at"}
               for e in graph["edges"])
    assert {"from": "fx_recap", "to": "@tail_start", "kind": "slot bound",
            "slot": "extensions", "side": "before"}.items() <= next(
        e for e in graph["edges"] if e["from"] == "fx_recap" and e["side"] == "before").items()


# -- chain diff -----------------------------------------------------------------------------


DIFF_A = """\
extensions:
  middlewares: [fx_missing.ext:One, fx_missing.ext:Two]
"""
DIFF_B = """\
fx_recap: {enabled: false}
fx_vision: {enabled: true}
extensions:
  middlewares: [fx_missing.ext:Two, fx_missing.ext:One]
"""


def test_diff_shows_added_removed_and_moved(manifest: Path, write) -> None:
    a, b = write("a.yaml", DIFF_A), write("b.yaml", DIFF_B)
    report = run_json("--manifest", manifest, "chain", "diff", a, b)
    assert set(report) == {"chain", "a", "b", "added", "removed", "moved", "identical"}
    assert report["a"]["order"] == ["fx_guard", "fx_audit", "fx_recap", "one", "two"]
    assert report["b"]["order"] == ["fx_guard", "fx_audit", "fx_vision", "two", "one"]
    assert report["added"] == [{"name": "fx_vision", "position": 3, "reason_in_a":
                                "off by default; enable with `fx_vision: {enabled: true}`"}]
    assert report["removed"][0]["name"] == "fx_recap"
    assert report["removed"][0]["reason_in_b"] == f"disabled by config ({b}:1:12)"
    # one of the two extensions changed order relative to the other; nothing else moved
    assert len(report["moved"]) == 1 and report["moved"][0]["name"] in {"one", "two"}
    moved = report["moved"][0]
    assert (moved["from"], moved["to"]) == ((4, 5) if moved["name"] == "one" else (5, 4))
    out = run("--manifest", manifest, "chain", "diff", a, b).stdout
    assert "+ fx_vision" in out and "- fx_recap" in out
    assert f"~ {moved['name']}" in out and f"{moved['from']} -> {moved['to']}" in out


def test_diff_of_equal_configs(manifest: Path, write) -> None:
    a = write("a.yaml", DIFF_A)
    out = run("--manifest", manifest, "chain", "diff", a, a).stdout
    assert "no difference" in out
    assert run_json("--manifest", manifest, "chain", "diff", a, a)["identical"] is True


# -- config ---------------------------------------------------------------------------------


def test_config_check_ok(manifest: Path, write) -> None:
    config = write("antler.yaml", "fx_recap: {enabled: true}\nchain: {fuse: false}\n")
    out = run("--manifest", manifest, "config", "check", config).stdout
    assert out == f"ok: {config} is valid (2 sections)\n"
    report = run_json("--manifest", manifest, "config", "check", config, "--no-import")
    assert report == {"file": str(config), "valid": True, "sections": ["chain", "fx_recap"],
                      "error": None, "problems": [], "warnings": []}


def test_config_typo_names_file_line_column_and_suggests(manifest: Path, write) -> None:
    config = write("antler.yaml", "fx_recap:\n  enabeld: true\n")
    result = run("--manifest", manifest, "config", "check", config, code=1)
    assert f"error: {config}:2:3: fx_recap.enabeld: unknown key 'enabeld' (did you mean " \
           "'enabled'?)" in result.stderr
    shown = run("--manifest", manifest, "chain", "show", "--config", config, code=1)
    assert "did you mean 'enabled'?" in shown.stderr
    report = json.loads(run("--manifest", manifest, "config", "check", config, "--json",
                            code=1).stdout)
    assert report["valid"] is False and "did you mean 'enabled'?" in report["error"]


def test_config_check_loads_required_extensions(manifest: Path, write) -> None:
    config = write("antler.yaml", "extensions:\n  middlewares:\n    - fx_missing.ext:Gone\n")
    result = run("--manifest", manifest, "config", "check", config, code=1)
    assert f"{config}:3:7: extensions.middlewares[0]:" in result.stderr
    assert "'fx_missing' is not installed" in result.stderr


def test_config_check_plans_every_runtime_combination(write) -> None:
    path = write("needs.yaml", """\
api_version: 1
plugins:
  - name: fx_planner
    factory: fx_missing.m:planner
    when: {plan_mode: true}
    order: {requires: [fx_helper]}
  - name: fx_helper
    factory: fx_missing.m:helper
    enabled: "off"
""")
    config = write("antler.yaml", "plugins:\n  fx_planner: {required: true}\n")
    result = run("--manifest", path, "config", "check", config, code=1)
    assert "the lead chain cannot be planned (--plan)" in result.stderr
    assert "fx_planner' requires 'fx_helper'" in result.stderr


class HookedMiddleware(AgentMiddleware):
    """Implements before_model and after_agent (its manifest below says otherwise)."""

    def __init__(self, context: typing.Any = None) -> None:
        super().__init__()

    def before_model(self, state: typing.Any, runtime: typing.Any) -> None:
        return None

    async def abefore_model(self, state: typing.Any, runtime: typing.Any) -> None:
        return None

    def after_agent(self, state: typing.Any, runtime: typing.Any) -> None:
        return None

    async def aafter_agent(self, state: typing.Any, runtime: typing.Any) -> None:
        return None


class NeedsArgs(AgentMiddleware):
    """An extension whose constructor needs `color`."""

    def __init__(self, color: str, *, level: int = 1) -> None:
        super().__init__()
        self.color, self.level = color, level


HOOKED = f"""\
api_version: 1
plugins:
  - name: fx_hooked
    factory: {__name__}:HookedMiddleware
    hooks: [before_model, wrap_tool_call]
"""

EVERY_PROBLEM = f"""\
extensions:
  middlewares:
    - use: {__name__}:NeedsArgs
      config: {{colour: red}}
    - use: {__name__}:NeedsArgs
      name: needs_args_bare
    - fx_missing.ext:Gone
    - use: fx_missing.ext:Optional
      required: false
"""


def test_config_check_reports_every_problem_run_would_hit(write) -> None:
    manifest = write("hooked.yaml", HOOKED)
    config = write("antler.yaml", EVERY_PROBLEM)

    result = run("--manifest", manifest, "config", "check", config, code=1)

    error = result.stderr[result.stderr.index("error: "):]
    assert error.startswith(f"error: {config}: 5 problems:\n- ")
    problems = error.split("\n- ")[1:]
    assert problems[0].startswith(f"{manifest}:3: plugin 'fx_hooked': {__name__}:"
                                  "HookedMiddleware implements ['after_agent'], which its "
                                  "manifest's `hooks:` ['before_model', 'wrap_tool_call'] leaves "
                                  "out; add them")
    assert problems[1] == (f"{config}:4:16: extensions.middlewares[0].config.colour: unknown "
                           "argument 'colour' (did you mean 'color'?)")
    assert problems[2].startswith(
        f"{config}:4:7: extensions.middlewares[0].config: missing required argument 'color'; "
        "add it under `config:` (the constructor is NeedsArgs(color: 'str', *, level: 'int' = 1))")
    assert problems[3].startswith(f"{config}:5:7: extensions.middlewares[1]: missing required "
                                  "argument 'color'")
    assert problems[4].startswith(f"{config}:7:7: extensions.middlewares[2]: middleware class "
                                  "'fx_missing.ext:Gone': module 'fx_missing' is not installed")
    warned = result.stderr[:result.stderr.index("error: ")]
    assert (f"warning: {manifest}:3: plugin 'fx_hooked': `hooks:` declares ['wrap_tool_call'], "
            f"which {__name__}:HookedMiddleware does not implement") in warned
    assert (f"warning: {config}:8:7: extensions.middlewares[3]: optional extension will be left "
            "out: middleware class 'fx_missing.ext:Optional'") in warned
    report = json.loads(run("--manifest", manifest, "config", "check", config, "--json",
                            code=1).stdout)
    assert (report["valid"], len(report["problems"]), len(report["warnings"])) == (False, 5, 2)
    assert report["error"] == error.removeprefix("error: ").rstrip("\n")


def test_config_check_no_import_skips_what_needs_imports(write) -> None:
    manifest = write("hooked.yaml", HOOKED)
    config = write("antler.yaml", EVERY_PROBLEM)

    result = run("--manifest", manifest, "config", "check", config, "--no-import")

    assert result.stdout == f"ok: {config} is valid (1 section)\n"
    assert "NeedsArgs" not in result.stderr and "fx_missing" not in result.stderr


PROBE = f"""\
api_version: 1
plugins:
  - name: fx_probe
    factory: {__name__}:HookedMiddleware
    hooks: [before_model, after_agent]
"""


@pytest.mark.parametrize("where", ["before the command", "after the command"])
def test_run_honours_manifest_in_either_place(write, tmp_path: Path, where: str) -> None:
    manifest = write("probe.yaml", PROBE)
    script = write("script.yaml", "- Hello from the script.\n")
    args: list[object] = ["run", "hi", "--model", f"scripted:{script}", "--home",
                          tmp_path / "home", "--trace"]
    args = (["--manifest", manifest, *args] if where == "before the command"
            else [*args, "--manifest", manifest])

    result = run(*args)

    assert result.stdout.strip() == "Hello from the script."
    assert "fx_probe.before_model" in result.stderr and "fx_probe.after_agent" in result.stderr


def test_demo_honours_manifest(write, tmp_path: Path) -> None:
    manifest = write("probe.yaml", PROBE)

    out = run("demo", "--home", tmp_path / "demo", "--manifest", manifest,
              isolated=False).stdout

    chain_line = next(line for line in out.splitlines() if line.startswith("Lead chain: "))
    assert "fx_probe" in chain_line.split(" -> ")


def test_config_check_missing_file(tmp_path: Path) -> None:
    result = run("config", "check", tmp_path / "absent.yaml", code=1)
    assert "cannot read" in result.stderr


def test_config_schema(manifest: Path, tmp_path: Path) -> None:
    schema = json.loads(run("--manifest", manifest, "config", "schema").stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"fx_recap", "extensions", "chain"} <= set(schema["properties"])
    target = tmp_path / "schema.json"
    run("--manifest", manifest, "config", "schema", "--output", target)
    assert json.loads(target.read_text(encoding="utf-8")) == schema


# -- plugins list ---------------------------------------------------------------------------


def test_plugins_list(manifest: Path) -> None:
    out = run("--manifest", manifest, "plugins", "list").stdout
    assert "fx_todo" in out and "on, when plan_mode" in out and "6 plugins ok, 0 failed" in out
    rows = run_json("--manifest", manifest, "plugins", "list")
    assert all(set(row) == LIST_KEYS for row in rows)
    todo = next(row for row in rows if row["name"] == "fx_todo")
    assert todo["status"] == "ok" and todo["when"] == {"plan_mode": True}
    assert todo["declared_at"] == f"{manifest}:21" and todo["distribution"] is None


def test_plugins_list_includes_installed_plugins(manifest: Path) -> None:
    rows = run_json("--manifest", manifest, "plugins", "list", isolated=False)
    assert all(set(row) == LIST_KEYS for row in rows)
    assert {"fx_guard", "fx_sub"} <= {row["name"] for row in rows}
    installed = [row for row in rows if row["distribution"] == "antler"]
    assert all(row["entry_point"] and row["version"] for row in installed)


# -- the command line itself ----------------------------------------------------------------


def test_unknown_command_suggests() -> None:
    result = run("chain", "shwo", code=2)
    assert "no command 'shwo' (did you mean 'show'?)" in result.stderr


def test_help_documents_json_keys() -> None:
    for command in (["chain", "show"], ["chain", "explain"], ["chain", "graph"],
                    ["chain", "diff"], ["config", "check"], ["plugins", "list"]):
        out = run(*command, "--help").stdout
        assert "JSON (--json" in out, command


def test_option_spellings_match_the_core() -> None:
    assert CHAIN_CHOICES == CHAIN_NAMES
    assert set(CONDITION_FLAGS) == set(typing.get_args(RuntimeCondition))
    assert set(CONDITION_FLAGS) <= set(RuntimeOptions.model_fields)


def test_main_runs_a_command_at_the_command_gc_threshold_and_restores_the_callers(
        manifest: Path, capsys, monkeypatch) -> None:
    import gc

    from antler.cli import COMMAND_GC_THRESHOLD
    from antler.cli.session import Session

    seen: list[tuple[int, int, int]] = []
    registry = Session.registry

    def recording(self: Session) -> typing.Any:
        seen.append(gc.get_threshold())
        return registry(self)

    monkeypatch.setattr(Session, "registry", recording)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 7, 9)
        assert main(["--isolated", "--manifest", str(manifest), "chain", "show", "--json"]) == 0
        assert seen and seen[0] == (COMMAND_GC_THRESHOLD, 7, 9)
        assert gc.get_threshold() == (700, 7, 9)
        assert main(["--isolated", "--manifest", str(manifest), "chain", "explain", "x"]) == 2
        assert gc.get_threshold() == (700, 7, 9)   # restored after an error too
    finally:
        gc.set_threshold(*before)
    capsys.readouterr()


def test_main_returns_the_exit_code(manifest: Path, capsys) -> None:
    assert main(["--isolated", "--manifest", str(manifest), "chain", "explain", "fx_x"]) == 2
    assert "error: no plugin named 'fx_x'" in capsys.readouterr().err
    assert main(["--isolated", "--manifest", str(manifest), "chain", "show", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chain"] == "lead"


def test_python_m_antler_chain_show_runs_without_langchain(manifest: Path) -> None:
    command = [sys.executable, "-m", "antler", "--isolated", "--manifest", str(manifest),
               "chain", "show"]
    shown = subprocess.run(command, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "200"}, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "lead chain: 3 plugins" in shown.stdout and "fx_audit" in shown.stdout
    # Every fixture plugin declares its hooks, so nothing needs langchain.
    probe = ("import sys; from antler.cli import main; "
             f"code = main(['--isolated', '--manifest', {str(manifest)!r}, 'chain', 'show', "
             "'--json']); "
             "print('langchain loaded:', any(m.split('.')[0] == 'langchain' for m in "
             "sys.modules), file=sys.stderr); sys.exit(code)")
    probed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=False)
    assert probed.returncode == 0, probed.stderr
    assert json.loads(probed.stdout)["plugins"][0]["name"] == "fx_guard"
    assert "langchain loaded: False" in probed.stderr


def test_show_reports_which_hook_nodes_are_fused(manifest: Path, tmp_path: Path) -> None:
    fusion = run_json("--manifest", manifest, "chain", "show")["fusion"]
    assert fusion["enabled"] is True
    assert fusion["hook_nodes"] <= fusion["hook_nodes_unfused"]
    off = tmp_path / "nofuse.yaml"
    off.write_text("chain: {fuse: false}\n")
    fusion_off = run_json("--manifest", manifest, "chain", "show", "--config", off)["fusion"]
    assert fusion_off["enabled"] is False
    assert "node fusion: off" in run("--manifest", manifest, "chain", "show", "--config",
                                     off).stdout


def test_show_says_which_hooks_run_inside_the_model_node(tmp_path: Path) -> None:
    fusion = run_json("chain", "show", isolated=False)["fusion"]
    inside = {node["kind"]: node["members"] for node in fusion["nodes"] if node["absorbed"]}
    after_model = ["safety_finish_reason", "model_length_finish_reason", "terminal_response",
                   "loop_detection", "title", "token_usage", "durable_context"]
    before_agent = ["input_sanitization", "thread_data", "uploads", "sandbox",
                    "dynamic_context", "loop_detection", "terminal_response", "input_provenance"]
    assert inside == {"before_agent": before_agent,
                      "before_model": ["durable_context", "clarification"],
                      "after_model": after_model}
    assert all(node["node"] == ("__start__" if node["kind"] == "before_agent" else "model")
               for node in fusion["nodes"] if node["absorbed"])
    assert ("model (after_model, inside the model node): " + " -> ".join(after_model)
            in " ".join(fusion["text"].split()))
    assert ("__start__ (before_agent, inside the input step): " + " -> ".join(before_agent)
            in " ".join(fusion["text"].split()))
    nodes_only = tmp_path / "nodes.yaml"
    nodes_only.write_text("chain: {fuse_into_model: false}\n")
    fusion = run_json("chain", "show", "--config", nodes_only, isolated=False)["fusion"]
    assert not any(node["absorbed"] for node in fusion["nodes"])
    assert fusion["hook_nodes"] == 4


PARTIAL = """\
api_version: 1
plugins:
  - name: fx_partial
    factory: fx_missing.partial:build
    hooks: [before_agent, wrap_tool_call]
    order: {after: [title], inner_of: [memory]}
  - name: fx_gated
    factory: fx_missing.gated:build
    when: {deferred_tools: true}
"""


def test_show_and_explain_say_which_slot_bound_placed_a_partial_plugin(write) -> None:
    path = write("partial.yaml", PARTIAL)
    show = run_json("--manifest", path, "chain", "show", isolated=False)
    order = [p["name"] for p in show["plugins"]]
    row = next(p for p in show["plugins"] if p["name"] == "fx_partial")
    # after: [title] alone: in the extensions slot, so before the tail's provenance record.
    assert order.index("memory") < order.index("fx_partial") < order.index("input_provenance")
    assert row["placed_by"] == ("after title; inner_of memory; slot bound: extensions (after "
                                "@custom_end, before @tail_start)")
    assert any("fx_partial declares inner_of: memory" in w and "memory has no wrap_tool_call "
               "hook (its hooks: after_agent)" in w for w in show["ordering_warnings"])
    text = run("--manifest", path, "chain", "show", isolated=False).output
    assert "fx_partial declares inner_of: memory" in text
    explain = run("--manifest", path, "chain", "explain", "fx_partial", isolated=False).stdout
    assert "fx_partial slot bound: extensions (after @custom_end)" in explain
    assert "warning: fx_partial declares inner_of: memory" in explain
    # On subagents title and memory are absent, yet the plugin keeps its place.
    sub = run_json("--manifest", path, "chain", "show", "--chain", "subagent", isolated=False)
    row = next(p for p in sub["plugins"] if p["name"] == "fx_partial")
    gated = next(p for p in sub["excluded"] if p["name"] == "fx_gated")
    assert gated["reason"] == ("runtime condition deferred_tools is False (no runtime option "
                               "sets it), needs True")
    assert gated["hint"] == "the run must set RuntimeOptions.conditions['deferred_tools'] = True"
    assert row["placed_by"] == ("after title (absent); inner_of memory (absent); slot bound: "
                                "extensions (after @custom_end, before @tail_start)")


@pytest.mark.parametrize("args", [("config", "schema", "-o"), ("chain", "graph", "-o"),
                                  ("chain", "report", "--html")])
def test_an_output_path_that_cannot_be_written_is_a_one_line_error(tmp_path, args) -> None:
    target = tmp_path / "missing-folder" / "out.txt"
    result = run(*args, target, code=1)
    text = result.output.strip()
    assert text.startswith("error: cannot write ") and f"to {target}: No such file" in text
    assert "choose a path in a folder that exists" in text
    assert "Traceback" not in text and len(text.splitlines()) == 1
    assert not target.parent.exists()
