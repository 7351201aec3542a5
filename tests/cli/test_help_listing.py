"""`antler --help` lists every command without importing one; `antler GROUP --help` loads only
its own module.

The listing's lines are compared with the ones click gives the real, imported
commands, so a command's help text and the listing cannot drift apart. What a
help run imports is read in a fresh interpreter (`sys.modules` after the run).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import click
import pytest
from click.testing import CliRunner

from antler.cli import COMMANDS, cli, plugin_commands
from antler.cli.listing import listed


def _modules_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after `antler ARGV` (its output discarded)."""
    code = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from antler.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            main({list(argv)!r})
        print(json.dumps(sorted(sys.modules)))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def _all_targets() -> dict[str, str]:
    return {**plugin_commands(), **COMMANDS}


def test_the_top_level_help_imports_no_command_module() -> None:
    loaded = _modules_after("--help")
    modules = {target.partition(":")[0] for target in _all_targets().values()}
    assert not modules & loaded, sorted(modules & loaded)
    assert not {m for m in loaded if m.split(".")[0] in {"langchain", "langgraph", "pydantic"}}


@pytest.mark.parametrize("group", ["chain", "config"])
def test_a_group_help_imports_its_module_and_not_the_resolver(group: str) -> None:
    loaded = _modules_after(group, "--help")
    assert f"antler.cli.{group}" in loaded
    assert not {m for m in loaded if m.startswith(("antler.chain", "langchain", "pydantic"))}


def test_every_listed_line_is_the_one_the_imported_command_gives() -> None:
    listing = CliRunner().invoke(cli, ["--help"]).output
    commands = listing.split("Commands:\n", 1)[1]
    targets = _all_targets()
    assert sorted(targets) == sorted(line.split()[0] for line in commands.splitlines() if line)
    limit = 100 - 6 - max(len(name) for name in targets)   # the root's max_content_width
    for name, target in targets.items():
        module, _, attribute = target.partition(":")
        __import__(module)
        real: Any = getattr(sys.modules[module], attribute)
        stand_in = listed(name, target)
        assert stand_in is not None, f"{name}: read from its source"
        assert stand_in.get_short_help_str(limit) == real.get_short_help_str(limit), name
        assert (stand_in.hidden, stand_in.deprecated) == (real.hidden, real.deprecated)
        assert f"  {name} " in commands and real.get_short_help_str(limit)[:30] in commands


def test_a_command_the_source_cannot_describe_is_imported(tmp_path, monkeypatch) -> None:
    package = tmp_path / "listing_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cmds.py").write_text(textwrap.dedent('''
        import click

        HELP = "Computed help."

        @click.command(help=HELP)
        def computed():
            pass

        @click.command(short_help="Short one.", hidden=False, deprecated=True)
        def literal():
            """Long help. More words."""

        @click.group()
        def grouped():
            """A group.

            With more.
            """

        @click.command(hidden=True)
        def secret():
            """Not listed."""

        plain = click.command(name="plain")(lambda: None)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert listed("computed", "listing_probe.cmds:computed") is None   # not a literal
    assert listed("plain", "listing_probe.cmds:plain") is None         # no decorated def
    assert listed("gone", "listing_probe.missing:gone") is None
    literal = listed("literal", "listing_probe.cmds:literal")
    assert literal is not None and literal.get_short_help_str() == "Short one. (DEPRECATED)"
    grouped = listed("grouped", "listing_probe.cmds:grouped")
    assert grouped is not None and grouped.get_short_help_str() == "A group."
    secret = listed("secret", "listing_probe.cmds:secret")
    assert secret is not None and secret.hidden
    assert "listing_probe" not in sys.modules                          # nothing was run

    # The root group imports a command the source cannot describe, and skips a hidden one.
    group = type(cli)(name="probe", lazy={"computed": "listing_probe.cmds:computed",
                                          "secret": "listing_probe.cmds:secret",
                                          "literal": "listing_probe.cmds:literal"})
    formatter = click.HelpFormatter()
    group.format_commands(click.Context(group), formatter)
    shown = formatter.getvalue()
    assert "Computed help." in shown and "Short one. (DEPRECATED)" in shown
    assert "secret" not in shown and "listing_probe.cmds" in sys.modules


def test_the_memory_help_imports_no_memory_library_and_no_langchain() -> None:
    loaded = _modules_after("memory", "--help")
    assert "antler.plugins.memory.cli" in loaded
    assert not {m for m in loaded if m.startswith(("antler.plugins._lib.memory", "langchain"))}
