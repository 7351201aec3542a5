"""The skills registry: SKILL.md parsing, problems named by file and line, and `antler skills`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from antler.chain.config import SkillsSettings
from antler.cli import cli
from antler.runtime.skills import SkillError, SkillsRegistry, parse_skill

FIXTURES = Path(__file__).parents[1] / "fixtures" / "skills"


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


GOOD = "---\nname: notes\ndescription: Takes notes.\n---\nWrite notes.\n"


def test_front_matter_and_body_are_read():
    data, body = parse_skill("---\nname: a-b\ndescription: d\nallowed-tools: [ls]\n---\n\nBody\n")
    assert data == {"name": "a-b", "description": "d", "allowed-tools": ["ls"]}
    assert body == "Body"


@pytest.mark.parametrize("text, line, message", [
    ("name: x\n", 1, "starts with a '---' line"),
    ("---\nname: x\n", 1, "never closed"),
    ("---\nname: x\ndescription: a: b\n---\n", 3, 'must be quoted, e.g. description: "a: b"'),
    ("---\nname: x\n---\n", 2, "'description' must be a non-empty string"),
    ("---\nname: Data Report\ndescription: d\n---\n", 2, "lowercase letters and digits"),
    ("---\nname: x\ndescription: d\nallowed-tools: ls\n---\n", 4, "list of tool names"),
    ("---\nname: x\ndescription: d\nallowed-tools: [1]\n---\n", 4, "list of tool names"),
    ("---\nname: x\ndescription: d\ntools: [ls]\n---\n", 4, "unknown front-matter key 'tools'"),
    ("---\n- a list\n---\n", 2, "must be a mapping"),
])
def test_bad_front_matter_names_the_line_and_the_fix(text, line, message):
    with pytest.raises(SkillError, match=None) as caught:
        parse_skill(text)
    assert caught.value.line == line and message in str(caught.value)


def test_a_bad_skill_is_skipped_with_file_and_line_and_the_others_load(tmp_path, caplog):
    write(tmp_path, "public/notes", GOOD)
    bad = write(tmp_path, "custom/bad", "---\nname: bad\ndescription: a: b\n---\n")
    loose = write(tmp_path, "loose", GOOD.replace("notes", "loose"))
    registry = SkillsRegistry([tmp_path])
    assert [s.name for s in registry.skills()] == ["notes"]
    problems = {p.file: p for p in registry.problems()}
    assert problems[bad].line == 3 and f"{bad}:3: invalid YAML" in str(problems[bad])
    assert "category folder" in problems[loose].message
    assert "the skill is skipped" in caplog.text


def test_layout_paths_duplicates_and_disabled_skills(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    write(first, "public/notes", GOOD)
    write(second, "custom/notes", GOOD)
    write(second, "custom/team/report", GOOD.replace("notes", "report"))
    registry = SkillsRegistry([first, second, tmp_path / "missing"], disabled=["report"])
    notes, report = registry.get("notes"), registry.get("report")
    assert notes.category == "public" and notes.container_path == \
        "/mnt/skills/public/notes/SKILL.md"
    assert report.container_path == "/mnt/skills/custom/team/report/SKILL.md"
    assert not report.enabled and [s.name for s in registry.enabled()] == ["notes"]
    assert "already loaded from" in registry.problems()[0].message
    assert "- notes (/mnt/skills/public/notes/SKILL.md): Takes notes." in registry.index()
    assert "report" not in registry.index()


def test_a_symlink_out_of_the_root_is_refused(tmp_path):
    outside = write(tmp_path / "outside", "x/secret", GOOD.replace("notes", "secret"))
    (tmp_path / "root" / "public" / "secret").mkdir(parents=True)
    (tmp_path / "root" / "public" / "secret" / "SKILL.md").symlink_to(outside)
    registry = SkillsRegistry([tmp_path / "root"])
    assert registry.skills() == []
    assert "outside its skills root" in registry.problems()[0].message


def test_default_settings_read_the_project_skills_folder():
    assert SkillsSettings().paths == ["skills"]
    assert SkillsRegistry.from_settings(None).roots == [Path("skills").absolute()]


def test_cli_lists_skills_and_problems(tmp_path):
    config = tmp_path / "antler.yaml"
    config.write_text(f"skills:\n  paths: [{FIXTURES}]\n  disabled: [data-report]\n")
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["skills", "list", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    (skill,) = listing["skills"]
    assert skill["name"] == "data-report" and skill["enabled"] is False
    assert skill["allowed_tools"] == ["read_file", "ls"]
    (problem,) = listing["problems"]
    assert problem["file"].endswith("custom/broken/SKILL.md") and problem["line"] == 3

    text = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["skills", "list", "--config", str(config)])
    assert text.exit_code == 0 and "/data-report" in text.stdout
    assert "skipped:" in text.stdout and "broken/SKILL.md:3" in text.stdout


def test_a_bad_skills_section_is_a_config_error(tmp_path):
    config = tmp_path / "antler.yaml"
    config.write_text("skills:\n  path: [x]\n")
    result = CliRunner().invoke(cli, ["skills", "list", "--config", str(config)])
    assert result.exit_code == 1 and "paths" in result.output and "Traceback" not in result.output


def test_the_sandbox_shows_the_skills_read_only(tmp_path):
    from antler.plugin_api.paths import PathEscapeError, PathLayout
    from antler.runtime.sandbox.local import LocalSandboxProvider

    other = tmp_path / "other"
    write(other, "custom/notes", GOOD)
    layout = PathLayout(tmp_path / "home", skill_roots=(FIXTURES, other))
    provider = LocalSandboxProvider(default_timeout=10)
    try:
        sandbox = provider.get(provider.acquire(layout.thread("alice", "t1")))
        text = sandbox.read_file("/mnt/skills/public/data-report/SKILL.md")
        assert text.startswith("---\nname: data-report")
        assert sandbox.read_file("/mnt/skills/custom/notes/SKILL.md") == GOOD  # second root
        assert "/mnt/skills/public/data-report/SKILL.md" in sandbox.list_dir("/mnt/skills/public")
        with pytest.raises(PermissionError, match="read-only"):
            sandbox.write_file("/mnt/skills/public/data-report/SKILL.md", "mine")
        with pytest.raises(PathEscapeError, match="climbs above"):
            sandbox.read_file("/mnt/skills/../../etc/passwd")
        assert "name: data-report" in (FIXTURES / "public/data-report/SKILL.md").read_text()
        sandbox.write_file("/mnt/user-data/outputs/x.txt", "fine")   # the rest is unchanged
        assert sandbox.read_file("/mnt/user-data/outputs/x.txt") == "fine"
    finally:
        provider.shutdown()
