"""Hostile files against every parser Antler runs: alias bombs, deep nesting, huge sizes.

The CLI cases run in one child process under a 2 GB address-space cap and a wall-clock
guard, so a blow-up shows as what an operator would see (a crash, a hang, a traceback)
instead of exhausting the machine. The loaders' properties run in this process under a
memory cap (hypothesis generates the alias chains, nestings and JSON values).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from antler import jsonsource
from antler.contracts.toolmeta import is_error_payload, result_meta
from antler.errors import ManifestError
from antler.parselimits import (
    DEFAULT_MAX_FILE_BYTES,
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_FILE_BYTES_ENV,
    SourceLimitError,
    read_bounded,
)
from antler.plugin_api.manifest import load_manifest
from antler.plugin_api.yamlsource import YamlSyntaxError, load_yaml, load_yaml_file
from antler.plugins.loop_detection.middleware import call_signature
from antler.plugins.tool_output_budget.synopsis import describe
from antler.runtime.models.scripted import ScriptedChatModel, ScriptError
from antler.runtime.skills import SkillsRegistry

CAP = 2_000_000_000
"""The address-space cap of the child running the CLI (the issue's 2 GB)."""


def alias_bomb(levels: int = 9, width: int = 9, indent: str = "") -> str:
    """Each level lists `width` aliases of the one before: width**levels values, in
    a few hundred bytes."""
    lines = [f"{indent}l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"{indent}l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def nested_mappings(depth: int) -> str:
    return "".join(f"{' ' * i}k:\n" for i in range(depth)) + f"{' ' * depth}v\n"


def skill(root: Path, name: str, front: str, body: str = "Do it.\n") -> Path:
    path = root / "custom" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nname: {name}\n{front}---\n{body}", encoding="utf-8")
    return path


# -- the CLI, in a child under a memory cap ----------------------------------------------------

CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from click.testing import CliRunner
from antler.cli import cli
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(cli, args)
    print(json.dumps({{"args": args, "code": result.exit_code, "output": result.output,
                      "stdout": result.stdout}}), flush=True)
"""


def run_cli_capped(cases: list[list[str]], cwd: Path) -> dict[str, dict[str, Any]]:
    """Each `antler` argument list run in one child capped at `CAP`; its results by the
    joined arguments. A crash or a hang of any case fails here, naming the last case."""
    env = {**os.environ, "COLUMNS": "400", "ANTLER_HOME": str(cwd / "home")}
    env.pop("ANTLER_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", CHILD.format(cap=CAP), json.dumps(cases)],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=env,
                          check=False)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, (
        f"the child died ({done.returncode}) after {[r['args'] for r in results]}: "
        f"{done.stderr[-1500:]}")
    return {" ".join(result["args"]): result for result in results}


def refused(result: dict[str, Any], where: str, what: str) -> None:
    """The usual config error: exit 1, one message naming file:line and the problem."""
    output = " ".join(result["output"].split())
    assert result["code"] == 1, result
    assert where in output and what in output, output
    assert "Traceback" not in output and "unexpected" not in output, output


def test_hostile_configs_get_a_config_error_from_every_command_under_a_memory_cap(
        tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text("models: {}\n" + alias_bomb())
    (tmp_path / "brackets.yaml").write_text("models: " + "[" * 50_000 + "\n")
    (tmp_path / "mappings.yaml").write_text(nested_mappings(1_200))
    (tmp_path / "flow.yaml").write_text("models: " + "{a: " * 5_000 + "\n")
    (tmp_path / "itself.yaml").write_text("tools: &t [*t]\n")
    (tmp_path / "ok.yaml").write_text("models: {}\n")
    (tmp_path / "deep.json").write_text('{"mcpServers": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with (tmp_path / "huge.yaml").open("w") as huge:   # 20 MB of ordinary YAML
        for index in range(800_000):
            huge.write(f"k{index:08}: value\n")
    bomb_line = "bomb.yaml:6:"       # the first level whose aliases pass the bound
    cases = {
        ("config", "check", "bomb.yaml"): (bomb_line, "aliases"),
        ("config", "migrate", "bomb.yaml"): (bomb_line, "aliases"),
        ("mcp", "list", "--config", "bomb.yaml"): (bomb_line, "aliases"),
        ("skills", "list", "--config", "bomb.yaml"): (bomb_line, "aliases"),
        ("--manifest", "bomb.yaml", "chain", "show"): (bomb_line, "aliases"),
        ("config", "check", "brackets.yaml"): ("brackets.yaml:1:", "nesting depth"),
        ("config", "check", "mappings.yaml"): (f"mappings.yaml:{MAX_DEPTH + 1}:", "deeper"),
        ("config", "check", "flow.yaml"): (f"flow.yaml:1:{9 + 4 * (MAX_DEPTH - 1)}:", "deeper"),
        ("config", "check", "itself.yaml"): ("itself.yaml:1:12:", "inside the value it names"),
        ("config", "migrate", "--extensions", "deep.json", "ok.yaml"):
            (f"deep.json:1:{MAX_DEPTH + 15}:", "deeper than"),
        ("config", "check", "huge.yaml"): ("huge.yaml:1:1:", MAX_FILE_BYTES_ENV),
    }
    results = run_cli_capped([list(args) for args in cases], tmp_path)
    for args, (where, what) in cases.items():
        refused(results[" ".join(args)], where, what)


def test_skills_list_skips_each_hostile_skill_with_its_file_and_line(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    skill(root, "good", "description: Fine.\n")
    big = skill(root, "big", "description: " + "x" * 50_000_000 + "\n")
    bomb = skill(root, "bomb", "description: d\nmetadata:\n" + alias_bomb(indent="  "))
    deep = skill(root, "deep", "description: d\nmetadata: " + "[" * 20_000 + "\n")
    wide = skill(root, "wide", "description: " + "y" * 5_000 + "\n")
    (tmp_path / "config.yaml").write_text(f"skills: {{paths: [{root}]}}\n")
    result = run_cli_capped([["skills", "list", "--json", "--config", "config.yaml"]],
                            tmp_path)["skills list --json --config config.yaml"]
    assert result["code"] == 0, result
    listing = json.loads(result["stdout"])
    assert [row["name"] for row in listing["skills"]] == ["good"]
    problems = {Path(problem["file"]): problem for problem in listing["problems"]}
    expected = {big: (1, "skills.max_file_bytes"), bomb: (9, "aliases"),
                deep: (4, "nesting depth"), wide: (3, "more than 1,024")}
    for path, (line, what) in expected.items():
        assert problems[path]["line"] == line and what in problems[path]["message"], \
            problems[path]


# -- the loaders' properties, in this process under a memory cap -------------------------------

MEMORY_HEADROOM = 1024 * 1024 * 1024


@contextlib.contextmanager
def memory_capped() -> Iterator[None]:
    """Lower the soft address-space limit to what the process uses now plus a headroom,
    so an expansion fails with MemoryError instead of exhausting the machine."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        used = int(statm.read().split()[0]) * resource.getpagesize()
    cap = used + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard < 0 else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=150,
                    suppress_health_check=list(HealthCheck))


def test_an_alias_chain_loads_exactly_when_its_expansion_is_within_the_bound() -> None:
    @PROPERTY
    @given(st.integers(1, 12), st.integers(1, 12))
    def check(levels: int, width: int) -> None:
        text = alias_bomb(levels, width)
        size = [1 + width]                          # values of level 0 (the list + items)
        alias_values, crossed = 0, None
        for level in range(1, levels):
            for _ in range(width):
                alias_values += size[-1]
                if alias_values > MAX_ALIAS_NODES and crossed is None:
                    crossed = level
            size.append(1 + width * size[-1])
        try:
            doc = load_yaml(text, "chain.yaml")
        except YamlSyntaxError as exc:
            assert crossed is not None and exc.line == crossed + 1, (levels, width, exc)
            assert str(exc).startswith(f"chain.yaml:{crossed + 1}:") and "aliases" in str(exc)
            return
        assert crossed is None, (levels, width)
        expected: Any = ["lol"] * width
        for level in range(1, levels):
            expected = [expected] * width
            assert doc.data[f"l{level}"] == expected

    with memory_capped():
        check()


NESTINGS = {  # each style, and the deepest tried (block styles grow with the square)
    "flow lists": (lambda depth: "[" * depth + "]" * depth, 60_000),
    "flow mappings": (lambda depth: "{a: " * depth + "1" + "}" * depth, 60_000),
    "JSON": (lambda depth: '{"a": ' * depth + "1" + "}" * depth, 60_000),
    "block mappings": (nested_mappings, 1_500),
    "block lists": (lambda depth: "".join(f"{' ' * i}-\n" for i in range(depth)), 1_500),
}


@pytest.mark.parametrize("style", list(NESTINGS))
def test_yaml_nesting_past_the_bound_is_refused_with_a_line_never_a_recursion_error(
        style: str) -> None:
    nesting, deepest = NESTINGS[style]

    @PROPERTY
    @given(st.one_of(st.integers(1, MAX_DEPTH + 5), st.integers(MAX_DEPTH, deepest)))
    def check(depth: int) -> None:
        text = nesting(depth)
        try:
            load_yaml(text, "deep.yaml")
        except YamlSyntaxError as exc:
            assert depth > MAX_DEPTH, (depth, exc)
            assert 1 <= exc.line <= text.count("\n") + 1 and "deep.yaml:" in str(exc)
            assert "nesting depth" in str(exc) or "deeper than" in str(exc)
        else:
            assert depth <= MAX_DEPTH

    with memory_capped():
        check()


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


BRACKETY = st.text(alphabet='[]{}"\\ab,:\n', max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | BRACKETY,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(BRACKETY, children, max_size=3),
    max_leaves=40)


def test_json_decodes_like_the_standard_library_within_the_depth_and_refuses_past_it() -> None:
    @PROPERTY
    @given(json_values, st.integers(0, 3 * MAX_DEPTH), st.booleans())
    def check(value: Any, wrap: int, as_object: bool) -> None:
        for _ in range(wrap):
            value = {"k]": value} if as_object else [value, "[{"]
        text = json.dumps(value, indent=1 if wrap % 2 else None)
        if _depth(value) <= MAX_DEPTH:
            assert jsonsource.loads(text) == json.loads(text)
            return
        with pytest.raises(json.JSONDecodeError, match=f"deeper than {MAX_DEPTH}") as caught:
            jsonsource.loads(text)
        assert text[caught.value.pos] in "[{"

    with memory_capped():
        check()


def test_json_of_a_hundred_thousand_levels_is_refused_at_the_bracket_past_the_bound() -> None:
    text = "\n" + "[" * 100_000 + "]" * 100_000
    with pytest.raises(json.JSONDecodeError) as caught:
        jsonsource.loads(text)
    assert (caught.value.lineno, caught.value.colno) == (2, MAX_DEPTH + 1)


@pytest.mark.parametrize("value", ["2024-13-45", "!!int x", "!!float abc",
                                   "!!timestamp 2020-02-30"])
def test_a_value_that_looks_typed_but_is_not_is_a_located_error(value: str,
                                                                tmp_path: Path) -> None:
    with pytest.raises(YamlSyntaxError, match=r"^c\.yaml:2:7: .* is not a valid .*quote it"):
        load_yaml(f"a: 1\nwhen: {value}\n", "c.yaml")
    skill(tmp_path, "dated", f"description: d\nversion: {value}\n")
    skill(tmp_path, "fine", "description: d\n")
    registry = SkillsRegistry([tmp_path])
    assert [s.name for s in registry.skills()] == ["fine"]
    assert [problem.line for problem in registry.problems()] == [4]


# -- sizes -------------------------------------------------------------------------------------

def test_a_file_is_read_only_up_to_its_limit_plus_one_byte() -> None:
    # /dev/zero never ends: reading it whole would never return.
    with pytest.raises(SourceLimitError, match=r"/dev/zero:1:1: larger than the 1,000-byte"):
        read_bounded("/dev/zero", 1000)
    with pytest.raises(YamlSyntaxError, match=MAX_FILE_BYTES_ENV):
        load_yaml_file("/dev/zero")


def test_the_operator_limit_can_be_raised_and_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "big.yaml"
    config.write_text("notes: " + "x" * DEFAULT_MAX_FILE_BYTES + "\n")
    with pytest.raises(YamlSyntaxError, match=f"big.yaml:1:1: larger than .*{MAX_FILE_BYTES_ENV}"):
        load_yaml_file(config)
    monkeypatch.setenv(MAX_FILE_BYTES_ENV, str(2 * DEFAULT_MAX_FILE_BYTES))
    assert len(load_yaml_file(config).data["notes"]) == DEFAULT_MAX_FILE_BYTES
    monkeypatch.setenv(MAX_FILE_BYTES_ENV, "lots")
    with pytest.raises(YamlSyntaxError, match="not a size"):
        load_yaml_file(config)


def test_a_skill_over_its_own_limit_is_skipped_and_the_limit_is_a_setting(tmp_path: Path) -> None:
    skill(tmp_path, "long", "description: Long.\n", body="x" * 5_000)
    skill(tmp_path, "short", "description: Short.\n")
    registry = SkillsRegistry([tmp_path], max_file_bytes=4_096)
    assert [s.name for s in registry.skills()] == ["short"]
    (problem,) = registry.problems()
    assert problem.line == 1 and "4,096-byte" in problem.message and \
        "skills.max_file_bytes" in problem.message
    assert [s.name for s in SkillsRegistry([tmp_path]).skills()] == ["long", "short"]


# -- every other reader ------------------------------------------------------------------------

def test_manifests_scripts_and_token_tables_refuse_an_alias_bomb_with_file_and_line(
        tmp_path: Path) -> None:
    from antler.contrib.server_auth import TokenTableError, load_token_table

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    with pytest.raises(ManifestError, match=f"{bomb}:5:"):
        load_manifest(bomb)
    with pytest.raises(ScriptError, match=f"{bomb}:5:.*aliases"):
        ScriptedChatModel.from_yaml(bomb)
    with pytest.raises(TokenTableError, match=f"{bomb} .*line 5: aliases"):
        load_token_table(str(bomb))
    with pytest.raises(TokenTableError, match=r"line 1: .*nesting depth"):
        load_token_table("{a: " + "[" * 50_000)
    dup = tmp_path / "dup.yaml"
    dup.write_text("s3cret: {user: a}\ns3cret: {user: b}\n")
    with pytest.raises(TokenTableError, match="listed twice") as caught:
        load_token_table(str(dup))
    assert "s3cret" not in str(caught.value)


DEEP_JSON = '{"error": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_tool_results_and_arguments_nested_past_the_bound_are_plain_text() -> None:
    """A remote tool's result or a model's arguments are read as JSON by several hooks;
    a hundred thousand brackets must leave them text, never break the hook."""
    assert not is_error_payload(DEEP_JSON)
    assert result_meta(DEEP_JSON).status == "success"
    assert describe(DEEP_JSON).kind != "json"
    assert call_signature({"name": "lookup", "args": DEEP_JSON}).startswith("lookup:")
