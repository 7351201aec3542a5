"""`antler replay ... --html FILE`: one self-contained page showing a behavioural diff.

Drawn like `antler chain report`'s page (same look, no network, no external
file): a summary table of the recordings, then per recording each run with the
aspects that differ side by side, and the runs that behave the same folded
away. The diff's JSON (`--json`'s) is embedded as ``#antler-data`` for tools.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from antler.htmlpage import HEAD

__all__ = ["render_diff_page"]


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _run(run: dict[str, Any], a: str, b: str) -> str:
    title = f"run {run['run']}: {_e(run['input'])}"
    if run["equal"]:
        return f'<li class="same">{title} <span class="dim">same behaviour</span></li>'
    rows = "".join(
        f"<tr><td>{_e(d['what'])}</td><td>{_e(d['a'])}</td><td>{_e(d['b'])}</td></tr>"
        for d in run["differences"])
    return (f'<li class="differs"><details open><summary>{title}</summary>'
            f'<table><tr><th>aspect</th><th>{_e(a)}</th><th>{_e(b)}</th></tr>{rows}'
            "</table></details></li>")


def _recording(item: dict[str, Any]) -> str:
    if item.get("error"):
        return (f'<section class="chain error"><h2>{_e(item["path"])}</h2>'
                f'<p class="problem">error: {_e(item["error"])}</p></section>')
    diff = item["diff"]
    runs = "".join(_run(run, diff["a"], diff["b"]) for run in diff["runs"])
    memory = ""
    if diff.get("memory"):
        m = diff["memory"]
        memory = (f'<h3>memory facts</h3><table><tr><th>{_e(diff["a"])}</th>'
                  f'<th>{_e(diff["b"])}</th></tr><tr><td>{_e(m["a"])}</td>'
                  f'<td>{_e(m["b"])}</td></tr></table>')
    notes = "".join(f"<li>{_e(note)}</li>" for note in diff.get("notes") or [])
    verdict = "equal" if diff["equal"] else "differs"
    return (f'<section class="chain {verdict}"><h2>{_e(item["path"])}</h2>'
            f'<p class="dim">{_e(diff["a"])} vs {_e(diff["b"])}: behaviour {verdict}</p>'
            f'<ol class="runs">{runs}</ol>{memory}'
            + (f'<ul class="notes">{notes}</ul>' if notes else "") + "</section>")


def render_diff_page(items: Sequence[dict[str, Any]], *,
                     title: str = "Antler replay") -> str:
    """The page for `items`: ``{"path", "diff"}`` (a diff's JSON) or ``{"path", "error"}``."""
    summary = "".join(
        f"<tr class=\"{_status(item)}\"><td>{_e(item['path'])}</td><td>{_status(item)}</td>"
        f"<td>{_count(item)}</td></tr>" for item in items)
    payload = json.dumps(list(items), ensure_ascii=False).replace("</", "<\\/")
    body = "".join(_recording(item) for item in items)
    return (_PAGE.replace("{{TITLE}}", _e(title)).replace("{{SUMMARY}}", summary)
            .replace("{{BODY}}", body).replace("{{DATA}}", payload))


def _status(item: dict[str, Any]) -> str:
    if item.get("error"):
        return "error"
    return "equal" if item["diff"]["equal"] else "differs"


def _count(item: dict[str, Any]) -> str:
    if item.get("error"):
        return "-"
    diff = item["diff"]
    return f"{diff['differing_runs']} of {len(diff['runs'])}"


_PAGE = HEAD + """  :root { --fg: #1d2430; --dim: #6b7280; --line: #d9dee7; --accent: #2f6fde;
          --same: #eef8f0; --off: #fbeaea; }
  header h1 { margin: 0 0 4px; font-size: 20px; }
  header p, .dim { margin: 0; color: var(--dim); }
  main { display: grid; grid-template-columns: 1fr; gap: 20px; padding: 20px 24px; }
  section.chain { background: #fff; border: 1px solid var(--line); border-radius: 8px;
                  padding: 14px 16px; }
  section.chain.differs { border-left: 4px solid #c0392b; }
  section.chain.equal { border-left: 4px solid #2e8b57; }
  section.chain.error { background: var(--off); }
  section.chain h2 { margin: 0 0 6px; font-size: 17px; }
  h3 { font-size: 14px; margin: 18px 0 6px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid var(--line);
           vertical-align: top; }
  th { font-weight: 600; color: var(--dim); font-size: 12px; }
  tr.differs td:nth-child(2), tr.error td:nth-child(2) { color: #c0392b; font-weight: 600; }
  tr.equal td:nth-child(2) { color: #2e8b57; }
  ol.runs li { margin: 4px 0; }
  li.same { background: var(--same); border-radius: 3px; padding: 1px 6px; }
  details summary { cursor: pointer; font-weight: 600; }
  .problem { color: #c0392b; }
  ul.notes { color: var(--dim); font-size: 12px; }
</style>
</head>
<body>
<header>
  <h1>{{TITLE}}</h1>
  <p>Each recorded conversation replayed offline; per run, the aspects of behaviour that
     differ between the two sides. Runs that behave the same are shaded.</p>
</header>
<main>
<section class="chain"><h2>Summary</h2>
<table><tr><th>recording</th><th>behaviour</th><th>runs that differ</th></tr>{{SUMMARY}}</table>
</section>
{{BODY}}
</main>
<script type="application/json" id="antler-data">{{DATA}}</script>
</body>
</html>
"""
