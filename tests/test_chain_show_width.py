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
