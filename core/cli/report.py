"""`antler chain report --html FILE`: one self-contained page that shows the chains.

The page holds the `chain show --json` report of the lead and the subagent
chain, plus the order in which each hook phase runs, and draws them with its
own script: no network, no external file. Per hook phase the order comes from
the compiler's fusion plan (node hooks, in the order the graph runs them, after
hooks reversed as LangChain runs them) and from the chain order for the wrap
hooks (outermost first). Each plugin expands to say why it sits where it sits;
plugins that are off are listed with the reason.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .graph import HOOK_COLUMNS

__all__ = ["PHASES", "hook_phases", "render_report"]

PHASES = ("before_agent", "before_model", "wrap_model_call", "after_model", "wrap_tool_call",
          "after_agent")
"""The hook phases of one turn, in the order the turn reaches them."""

_WRAPS = {"wrap_model_call": "outermost first: each wraps the ones after it",
          "wrap_tool_call": "outermost first: each wraps the ones after it"}


def hook_phases(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase: the plugins in the order their hooks run, and the graph node of each.

    Node hooks follow the fusion plan's nodes (their members are in run order,
    so `after_model` and `after_agent` come out reversed); wrap hooks follow
    the chain order, outermost first.
    """
    phases = []
    for phase in PHASES:
        if phase in _WRAPS:
            steps = [{"plugin": p["name"], "node": "model" if phase == "wrap_model_call"
                      else "tools", "fused": False}
                     for p in report["plugins"] if p["hooks"] and phase in p["hooks"]]
            note = _WRAPS[phase]
        else:
            steps = [{"plugin": member, "node": node["node"],
                      "fused": node["fused"] or node["absorbed"]}
                     for node in report["fusion"]["nodes"] if node["kind"] == phase
                     for member in node["members"]]
            note = ("in reverse chain order, as LangChain runs after hooks"
                    if phase.startswith("after_") else "in chain order")
        phases.append({"phase": phase, "note": note, "steps": steps})
    return phases


def render_report(reports: list[dict[str, Any]], *, title: str = "Antler chains") -> str:
    """The HTML page for `reports` (each a `chain show --json` report)."""
    data = [{**report, "phases": hook_phases(report)} for report in reports]
    payload = json.dumps({"title": title, "chains": data,
                          "hooks": [short for _, short in HOOK_COLUMNS],
                          "hook_names": [hook for hook, _ in HOOK_COLUMNS]},
                         ensure_ascii=False)
    # `</` cannot end the data block early once escaped.
    payload = payload.replace("</", "<\\/")
    return _PAGE.replace("{{TITLE}}", html.escape(title)).replace("{{DATA}}", payload)


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{TITLE}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  :root { --fg: #1d2430; --dim: #6b7280; --line: #d9dee7; --accent: #2f6fde;
          --fused: #e9f1ff; --off: #fbeaea; --point: #0e7c86; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
         color: var(--fg); background: #fafbfc; }
  header { padding: 16px 24px; border-bottom: 1px solid var(--line); background: #fff; }
  header h1 { margin: 0 0 4px; font-size: 20px; }
  header p { margin: 0; color: var(--dim); }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr));
         gap: 20px; padding: 20px 24px; }
  section.chain { background: #fff; border: 1px solid var(--line); border-radius: 8px;
                  padding: 14px 16px; }
  section.chain h2 { margin: 0 0 6px; font-size: 17px; }
  h3 { font-size: 14px; margin: 18px 0 6px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid var(--line);
           vertical-align: top; }
  th { font-weight: 600; color: var(--dim); font-size: 12px; }
  td.mark { text-align: center; font-family: ui-monospace, monospace; width: 28px; }
  td.mark.on { color: var(--accent); font-weight: 700; }
  tr.point td { color: var(--point); font-style: italic; background: #f3fbfb; }
  details summary { cursor: pointer; }
  details .why { color: var(--dim); font-size: 12px; margin: 2px 0 4px 14px; }
  ol.phase { margin: 0; padding-left: 22px; }
  ol.phase li { margin: 1px 0; }
  .node { color: var(--dim); font-size: 12px; font-family: ui-monospace, monospace; }
  li.fused { background: var(--fused); border-radius: 3px; }
  .phase-block { border-left: 3px solid var(--accent); padding: 2px 0 2px 10px;
                 margin: 8px 0; }
  .phase-block .note { color: var(--dim); font-size: 12px; }
  ul.off li { background: var(--off); border-radius: 3px; padding: 2px 6px; margin: 2px 0;
              list-style: none; }
  ul.off { padding-left: 0; }
  .empty { color: var(--dim); font-style: italic; }
  pre.fusion { background: #f5f7fa; padding: 8px; border-radius: 4px; font-size: 12px;
               white-space: pre-wrap; }
</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <p>Hover a hook mark for its name; open a plugin to see why it sits where it sits.
     Highlighted steps run inside one fused graph node.</p>
</header>
<main id="chains"></main>
<script type="application/json" id="antler-data">{{DATA}}</script>
<script>
(function () {
  var data = JSON.parse(document.getElementById("antler-data").textContent);
  document.getElementById("title").textContent = data.title;
  document.title = data.title;
  var main = document.getElementById("chains");

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") { node.textContent = attrs[key]; }
      else { node.setAttribute(key, attrs[key]); }
    });
    (children || []).forEach(function (child) { if (child) { node.appendChild(child); } });
    return node;
  }

  function pluginTable(chain) {
    var head = el("tr", {}, [el("th", {text: "#"}), el("th", {text: "plugin"})]
      .concat(data.hooks.map(function (short, i) {
        return el("th", {text: short, title: data.hook_names[i]});
      })).concat([el("th", {text: "on_error"}), el("th", {text: "source"})]));
    var body = [head];
    function points(position) {
      chain.points.forEach(function (point) {
        if (point.after_position !== position) { return; }
        var notes = point.slots_end.map(function (s) { return s + " slot ends"; })
          .concat(point.slots_begin.map(function (s) { return s + " slot begins"; }));
        body.push(el("tr", {"class": "point", "data-point": point.name}, [
          el("td", {}), el("td", {colspan: String(data.hooks.length + 3),
                                  text: point.name + " \\u2014 " + (notes.join(" \\u00b7 ")
                                        || point.summary)})]));
      });
    }
    points(0);
    chain.plugins.forEach(function (plugin) {
      var why = el("details", {"class": "plugin", "data-plugin": plugin.name}, [
        el("summary", {text: plugin.name, title: plugin.summary}),
        el("div", {"class": "why", text: "placed by: " + (plugin.placed_by || "-")}),
        el("div", {"class": "why", text: plugin.summary}),
        el("div", {"class": "why", text: "declared at " + plugin.declared_at}),
        el("div", {"class": "why policy", text: "on_error: " + plugin.on_error + " ("
                   + plugin.on_error_from + ")"}),
        el("div", {"class": "why gate", text: plugin.security_gate
                   ? "security gate: a skipped failure would let through "
                     + plugin.security_gate : "security gate: no"})]);
      var marks = data.hook_names.map(function (hook, i) {
        var on = plugin.hooks && plugin.hooks.indexOf(hook) >= 0;
        return el("td", {"class": "mark" + (on ? " on" : ""),
                         title: plugin.name + (on ? " implements " : " does not implement ")
                                + hook, text: plugin.hooks === null ? "?" : (on ? "\\u25cf"
                                : "\\u00b7")});
      });
      body.push(el("tr", {"data-plugin-row": plugin.name},
        [el("td", {text: String(plugin.position)}), el("td", {}, [why])].concat(marks)
          .concat([el("td", {"class": "policy", "data-on-error": plugin.on_error,
                             text: plugin.on_error + (plugin.security_gate ? " \u00b7 gate"
                                                      : "")})])
          .concat([el("td", {"class": "node", text: plugin.source})])));
      points(plugin.position);
    });
    return el("table", {"class": "plugins"}, body);
  }

  function phases(chain) {
    return el("div", {"class": "phases"}, chain.phases.map(function (phase) {
      var items = phase.steps.map(function (step, i) {
        return el("li", {"class": step.fused ? "fused" : "", "data-step": step.plugin,
                         title: "graph node: " + step.node}, [
          document.createTextNode(step.plugin + " "),
          el("span", {"class": "node", text: "(" + step.node + ")"})]);
      });
      return el("div", {"class": "phase-block", "data-phase": phase.phase}, [
        el("strong", {text: phase.phase}),
        el("span", {"class": "note", text: " \\u2014 " + phase.note}),
        items.length ? el("ol", {"class": "phase"}, items)
                     : el("div", {"class": "empty", text: "no plugin has this hook"})]);
    }));
  }

  function excluded(chain) {
    if (!chain.excluded.length) {
      return el("div", {"class": "empty", text: "every installed plugin is on"});
    }
    return el("ul", {"class": "off"}, chain.excluded.map(function (row) {
      return el("li", {"data-off": row.name, title: row.kind}, [
        el("strong", {text: row.name}),
        document.createTextNode(": " + row.reason + (row.hint ? " (" + row.hint + ")" : ""))]);
    }));
  }

  data.chains.forEach(function (chain) {
    main.appendChild(el("section", {"class": "chain", "data-chain": chain.chain}, [
      el("h2", {text: chain.chain + " chain \\u2014 " + chain.plugins.length + " plugins"}),
      el("div", {"class": "node", text: "config: " + chain.config}),
      el("h3", {text: "Plugins in chain order"}), pluginTable(chain),
      el("h3", {text: "When each hook runs"}), phases(chain),
      el("h3", {text: "Fused graph nodes"}),
      el("pre", {"class": "fusion", text: chain.fusion.text}),
      el("h3", {text: "Off, and why"}), excluded(chain)]));
  });
  document.body.setAttribute("data-rendered", "true");
})();
</script>
</body>
</html>
"""
