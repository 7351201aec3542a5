"""`antler doctor` checks what a run needs: models, storage, MCP servers, skills.

Through the real entry point (`antler doctor --json`): each problem is one
failing line that names the setting and says what to do; what is fine is an
ok line.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from antler.cli import cli


def doctor(config, env=None):
    result = CliRunner(env=env).invoke(cli, ["doctor", "--json", "--config", str(config)])
    return result.exit_code, json.loads(result.stdout)


def lines(report, name, status):
    return [check["detail"] for check in report["checks"]
            if check["name"] == name and check["status"] == status]


def test_doctor_fails_what_a_run_would_fail_on(tmp_path):
    skill = tmp_path / "skills" / "public" / "broken" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: broken\ndescription: [unclosed\n---\nbody\n")
    config = tmp_path / "antler.yaml"
    config.write_text(
        "models:\n  default: main\n  named:\n    main:\n      use: nosuchpkg_x.mod:Chat\n"
        "storage:\n  checkpointer: postgresql://u:secret@127.0.0.1:1/db\n"
        "mcp_servers:\n  gone:\n    command: /nonexistent/antler-doctor-mcp\n"
        "    start_timeout: 5\n"
        f"skills:\n  paths: [{tmp_path / 'skills'}]\n"
        "summarization:\n  enabled: true\n  model: nosuchmodel\n")
    code, report = doctor(config)
    assert code == 1 and report["ok"] is False
    models = lines(report, "model", "fail")
    assert any("models.default: models.named.main.use: the module 'nosuchpkg_x.mod' is not "
               "installed" in line and "pip install" in line for line in models), models
    assert any("summarization.model: 'nosuchmodel' is neither a model named" in line
               for line in models), models
    [storage] = lines(report, "storage", "fail")
    assert "not reachable within 3s" in storage and "secret" not in storage
    assert "storage.checkpointer: sqlite" in storage
    [mcp] = lines(report, "mcp", "fail")
    assert mcp.startswith("gone: ") and "antler mcp list" in mcp
    [skills] = lines(report, "skills", "fail")
    assert str(skill) in skills and "front matter" in skills


def test_doctor_says_ok_for_a_config_a_run_can_use(tmp_path):
    script = tmp_path / "script.yaml"
    script.write_text("- hi\n")
    config = tmp_path / "antler.yaml"
    config.write_text(f"models:\n  default: scripted:{script}\n"
                      f"storage:\n  base_dir: {tmp_path / 'home'}\n"
                      f"skills:\n  paths: [{tmp_path / 'none'}]\n")
    _, report = doctor(config)
    assert lines(report, "model", "fail") == [] and lines(report, "model", "ok")
    assert lines(report, "storage", "ok") == [f"SQLite under {tmp_path / 'home'}"]
    assert lines(report, "skills", "ok") == ["0 skill(s) parse"]
    assert all(check["status"] != "fail" for check in report["checks"]
               if check["name"] != "sandbox"), report


def test_doctor_names_the_mcp_extra_when_the_client_is_not_installed(tmp_path, monkeypatch):
    """Without the `mcp` extra, doctor says which extra to install (no crash), and a config
    with no MCP servers does not need it at all."""
    import sys

    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")
                 or m.startswith("antler.runtime.mcp.sessions")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` raises ImportError
    plain = tmp_path / "plain.yaml"
    plain.write_text("title: {enabled: false}\n")
    code, report = doctor(plain)
    assert lines(report, "mcp", "fail") == []
    with_mcp = tmp_path / "mcp.yaml"
    with_mcp.write_text("mcp_servers:\n  s:\n    command: server\n")
    code, report = doctor(with_mcp)
    assert code == 1
    (detail,) = lines(report, "mcp", "fail")
    assert "`mcp` extra" in detail
