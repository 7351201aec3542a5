"""`antler chain show` fits the terminal: at 80 columns "placed by" folds under the name."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from antler.cli import cli


@pytest.mark.parametrize("width", [80, 100, 160])
def test_chain_show_fits_the_terminal(width):
    result = CliRunner().invoke(cli, ["chain", "show"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    text = result.stdout
    assert "input_sanitization" in text and "position first; before @base_end" in text
    folded = width < 110
    assert ("placed by" in lines[2]) is not folded
    if folded:  # the reason sits on its own indented line under the plugin
        at = next(i for i, line in enumerate(lines) if " input_sanitization " in line)
        assert lines[at + 1].strip() == "position first; before @base_end"


def test_chain_graph_shows_hooks_and_leaves_point_edges_out_unless_asked():
    plain = CliRunner().invoke(cli, ["chain", "graph", "--format", "dot"])
    assert plain.exit_code == 0, plain.output
    assert '"input_sanitization" [label="1. input_sanitization\\nbA wM"];' in plain.stdout
    drawn = [line for line in plain.stdout.splitlines()
             if "->" in line and "style=invis" not in line]
    assert drawn and not any('"@' in line.split("->")[1] for line in drawn)
    full = CliRunner().invoke(cli, ["chain", "graph", "--format", "mermaid", "--point-edges"])
    assert "pt_base_end" in full.stdout and '|"before"| pt_base_end' in full.stdout
    assert "1. input_sanitization<br/>bA wM" in full.stdout
