"""`antler chain report --html`: a self-contained page, checked in a real headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from antler.cli import cli
from antler.cli.report import fusion_rows, hook_phases, left_out, problem_banner
from tests.machine import require


def chain_json(*args: str) -> dict:
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
        require("no Chromium on this machine", "apt-get install chromium to run this test")
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


# -- what a person sees: layout, legends, problems, at 1400 and 900 pixels --------------------

CYCLE = """\
api_version: 1
plugins:
  - name: fx_a
    factory: fx_missing.m:a
    hooks: [before_model]
    order: {after: [fx_c]}
  - name: fx_b
    factory: fx_missing.m:b
    hooks: [after_model]
    order: {after: [fx_a]}
  - name: fx_c
    factory: fx_missing.m:c
    hooks: [wrap_tool_call]
    order: {after: [fx_b]}
"""

MEASURE = """<script>
(function () {
  function rgb(text) { return (text.match(/[\\d.]+/g) || []).map(Number); }
  function luminance(c) {
    var v = c.slice(0, 3).map(function (x) { x /= 255;
      return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
  }
  function background(node) {
    for (; node; node = node.parentElement) {
      var c = rgb(getComputedStyle(node).backgroundColor);
      if (c.length === 3 || c[3] > 0) { return c; }
    }
    return [255, 255, 255];
  }
  var out = {viewport: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
             overflow: [], broken: [], lowContrast: []};
  document.querySelectorAll("section.chain *").forEach(function (node) {
    var box = node.getBoundingClientRect(), scroller = node.closest(".scroll");
    var frame = (scroller || node.closest("section.chain")).getBoundingClientRect();
    if (box.width && (box.right > frame.right + 1 || box.left < frame.left - 1)
        && !(scroller && scroller.scrollWidth <= scroller.clientWidth + 1)) {
      out.overflow.push(node.tagName + ": " + node.textContent.slice(0, 40));
    }
  });
  document.querySelectorAll("details.plugin summary, table.fusion td.node, td.source")
    .forEach(function (node) {  // the lines its text takes: one, for a name kept whole
      var range = document.createRange(), tops = {};
      range.selectNodeContents(node);
      Array.prototype.forEach.call(range.getClientRects(), function (r) {
        if (r.width) { tops[Math.round(r.top)] = true; } });
      if (Object.keys(tops).length > 1) { out.broken.push(node.textContent); }
    });
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (var text = walker.nextNode(); text; text = walker.nextNode()) {
    var owner = text.parentElement;
    if (!text.textContent.trim() || owner.closest("script, noscript")) { continue; }
    var fg = luminance(rgb(getComputedStyle(owner).color)), bg = luminance(background(owner));
    var ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    if (ratio < 4.5) { out.lowContrast.push(text.textContent.trim().slice(0, 30) + " "
                                            + ratio.toFixed(2)); }
  }
  out.text = document.body.innerText;
  out.legend = Array.prototype.map.call(document.querySelectorAll("[data-legend]"),
                                        function (n) { return n.textContent; });
  var banner = document.querySelector(".banner");
  out.banner = banner ? banner.innerText : null;
  out.bannerTop = banner ? banner.getBoundingClientRect().top : null;
  function bgOf(selector) {
    var node = document.querySelector(selector);
    return node ? getComputedStyle(node.closest("li")).backgroundColor : null;
  }
  out.problemBg = bgOf("ul.left-out [data-off]");
  out.offBg = bgOf("ul.off [data-kind=off_by_default]");
  out.sections = Array.prototype.map.call(document.querySelectorAll("section.chain"),
    function (n) { var b = n.getBoundingClientRect(); return [b.left, b.top, b.bottom]; });
  document.body.setAttribute("data-measure", JSON.stringify(out));
})();
</script>
"""


def _measured(chromium: str, page: Path, width: int) -> dict:
    probe = page.with_name(f"measure-{width}.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _browser(chromium, f"--window-size={width},1200", "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-measure="([^"]*)"', dom.stdout)
    assert found, dom.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def cycle_page(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    manifest = folder / "cycle.yaml"
    manifest.write_text(CYCLE)
    page = folder / "chains.html"
    result = CliRunner().invoke(cli, ["chain", "report", "--html", str(page), "--subagents",
                                      "--manifest", str(manifest)])
    assert result.exit_code == 0, result.output
    return page


def test_the_page_separates_problems_from_what_is_merely_off(cycle_page):
    report = chain_json("--manifest", str(cycle_page.with_name("cycle.yaml")))
    [problem] = left_out(report)
    assert problem["plugins"] == ["fx_a", "fx_b", "fx_c"] and "cycle" in problem["message"]
    subagent = chain_json("--manifest", str(cycle_page.with_name("cycle.yaml")), "--chain",
                          "subagent")
    [line] = problem_banner([report, subagent])  # one problem, both chains, one line
    assert line.startswith("fx_a, fx_b, fx_c (lead and subagent chains): ordering constraints")
    assert left_out(chain_json()) == []


def test_after_agent_is_shown_in_every_place_it_runs():
    report = chain_json()
    rows = [row for row in fusion_rows(report) if row["phase"] == "after_agent"]
    assert {row["node"] for row in rows} >= {"model", "tools"}
    assert all(row["members"] == rows[0]["members"] for row in rows)
    assert any("any other way" in row["how"] for row in rows)
    # `chain show`'s text says it too: the node is one of three places, not the only one
    [line] = [line for line in report["fusion"]["text"].splitlines()
              if line.strip().startswith("fused_") and ".after_agent:" in line]
    assert line.endswith("(when the run ends any other way)")


@pytest.mark.parametrize("width", [1400, 900])
def test_a_person_can_read_the_page(chromium, cycle_page, width):
    seen = _measured(chromium, cycle_page, width)
    assert seen["scrollWidth"] <= seen["viewport"], "the page scrolls sideways"
    assert seen["overflow"] == [], seen["overflow"]
    assert seen["broken"] == [], "names broken across lines: " + repr(seen["broken"])
    assert seen["lowContrast"] == [], seen["lowContrast"]
    for hook, short in (("before_agent", "bA"), ("wrap_tool_call", "wT"),
                        ("after_agent", "aA")):
        assert f"{short} {hook}" in seen["legend"]
    assert any(item.startswith("gate ") for item in seen["legend"])
    assert "`" not in seen["text"], "raw backticks in the page"
    # the cycle is in the header, above the chains, and styled apart from "off by default"
    assert seen["banner"] and "fx_a, fx_b, fx_c" in seen["banner"] and "cycle" in seen["banner"]
    assert seen["bannerTop"] < min(top for _left, top, _bottom in seen["sections"])
    assert seen["problemBg"] and seen["offBg"] and seen["problemBg"] != seen["offBg"]
    assert "3 left out by a problem" in seen["text"]
    assert "when the model ends the run" in seen["text"]
    (lead_left, lead_top, lead_bottom), (sub_left, sub_top, _bottom) = seen["sections"]
    if width == 1400:
        assert lead_top == sub_top and sub_left > lead_left  # side by side
    else:
        assert sub_top >= lead_bottom  # one under the other


def test_without_scripts_the_page_says_so(tmp_path):
    # (headless Chromium runs scripts whatever its flags say, so this reads the markup)
    from html.parser import HTMLParser

    page = tmp_path / "chains.html"
    assert CliRunner().invoke(cli, ["chain", "report", "--html", str(page)]).exit_code == 0

    class Reader(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.open: list[str] = []
            self.found: dict[str, str] = {"noscript": "", "h1": ""}

        def handle_starttag(self, tag: str, attrs: list) -> None:
            self.open.append(tag)

        def handle_endtag(self, tag: str) -> None:
            self.open.pop()

        def handle_data(self, data: str) -> None:
            for tag in self.found:
                if tag in self.open:
                    self.found[tag] += data

    reader = Reader()
    reader.feed(page.read_text())
    notice = " ".join(reader.found["noscript"].split())
    assert "scripts are off in this browser" in notice and "antler chain show" in notice
    assert reader.found["h1"].startswith("Antler chains (")  # the title needs no script


# A Chromium each (about a CPU-second): in the long checks. `make test` takes a screenshot of
# the page at 1400 pixels (test_the_page_renders_in_chromium) and measures this page's layout
# at both widths (test_a_person_can_read_the_page).
@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 900])
def test_screenshots_at_both_widths(chromium, cycle_page, tmp_path, width):
    shot = tmp_path / f"chains-{width}.png"
    result = _browser(chromium, f"--screenshot={shot}", f"--window-size={width},1200",
                      "--hide-scrollbars", cycle_page.as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    got_width, got_height, colours = _png_pixels(shot)
    assert (got_width, got_height) == (width, 1200)
    assert len(colours) > 8
