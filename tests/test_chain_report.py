"""`antler chain report --html`: a self-contained page, checked in a real headless Chromium."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from antler.cli import cli
from antler.cli.report import hook_phases


def chain_json(*args: str) -> dict:
    import json

    result = CliRunner().invoke(cli, ["chain", "show", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_hook_phases_follow_the_compiled_order():
    report = chain_json()
    phases = {p["phase"]: [s["plugin"] for s in p["steps"]] for p in hook_phases(report)}
    order = [p["name"] for p in report["plugins"]]
    after_model = phases["after_model"]
    assert after_model, "the default chain has after_model hooks"
    # LangChain runs after hooks in reverse chain order
    assert [order.index(n) for n in after_model] == sorted(
        (order.index(n) for n in after_model), reverse=True)
    wraps = phases["wrap_model_call"]
    assert wraps[0] == "input_sanitization"  # outermost first
    assert [order.index(n) for n in wraps] == sorted(order.index(n) for n in wraps)
    before = phases["before_agent"]
    assert before == [m for node in report["fusion"]["nodes"] if node["kind"] == "before_agent"
                      for m in node["members"]]


def test_the_page_is_self_contained(tmp_path):
    page = tmp_path / "chains.html"
    result = CliRunner().invoke(cli, ["chain", "report", "--html", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing fetched at view time
    assert '<script type="application/json" id="antler-data">' in text
    assert '"chain": "subagent"' in text and "</script>" in text


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    found = _chromium()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is required under CI=true (.ci/run installs Debian's chromium)")
        pytest.skip("no Chromium on this machine: apt-get install chromium to run this test")
    return found


def _browser(chromium: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--disable-dev-shm-usage", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _png_pixels(path: Path) -> tuple[int, int, set[bytes]]:
    """Width, height and the distinct RGB(A) pixels of a PNG (8-bit, any filter)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, idat = 8, {}, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IDAT":
            idat += body
        chunks.setdefault(kind, body)
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8 and colour in (2, 6)
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    seen: set[bytes] = set()
    previous = bytearray(stride)
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                      else corner)) & 255
        previous = line
        if row % 8 == 0:
            seen.update(bytes(line[i:i + 3]) for i in range(0, stride, channels * 8))
    return width, height, seen


def test_the_page_renders_in_chromium(tmp_path, chromium):
    page = tmp_path / "chains.html"
    assert CliRunner().invoke(cli, ["chain", "report", "--html", str(page),
                                    "--subagents"]).exit_code == 0
    dom = _browser(chromium, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    # elements the page's script created, not text of the file
    assert 'data-rendered="true"' in html
    assert 'data-chain="lead"' in html and 'data-chain="subagent"' in html
    for phase in ("before_agent", "wrap_model_call", "after_model", "wrap_tool_call",
                  "after_agent"):
        assert f'data-phase="{phase}"' in html
    assert 'data-plugin="input_sanitization"' in html and "placed by: position first" in html
    assert 'data-step="safety_finish_reason"' in html
    assert 'data-off="' in html  # what is off, with its reason
    assert 'data-point="@base_end"' in html

    shot = tmp_path / "chains.png"
    result = _browser(chromium, f"--screenshot={shot}", "--window-size=1400,1000",
                      "--hide-scrollbars", page.as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    width, height, colours = _png_pixels(shot)
    assert (width, height) == (1400, 1000)
    assert len(colours) > 8  # text, marks and panels were drawn, not a blank page
