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
import re
from typing import Any

from antler.htmlpage import HEAD

from .graph import HOOK_COLUMNS

__all__ = ["PHASES", "fusion_rows", "hook_phases", "left_out", "off_groups", "render_report"]

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


PROBLEM_KINDS = ("broken", "load_failed", "other")
"""Exclusion kinds that mean something is wrong (shown at the top, in red), as opposed
to a plugin that is merely off (by default, by the config, by a runtime condition)."""

OFF_GROUPS = (
    ("disabled", "Switched off in the config"),
    ("off_by_default", "Off by default"),
    ("runtime_condition", "Off for this run's conditions"),
    ("not_in_chain", "Not part of this chain"),
)
"""How the plugins that are merely off are grouped, in the order shown."""


def after_agent_places(report: dict[str, Any]) -> list[str]:
    """Where the `after_agent` hooks run: each names a node and when it is that one."""
    fusion = report["fusion"]
    nodes = [node["node"] for node in fusion["nodes"] if node["kind"] == "after_agent"]
    places = []
    if fusion.get("after_agent_in_model"):
        places.append("inside the model node, when the model ends the run (an answer with no "
                      "tool calls)")
    if fusion.get("after_agent_in_tools"):
        places.append("inside the tools node, when a lone return_direct tool call ends it")
    if nodes:
        places.append(f"in {', '.join(nodes)}" + (", when the run ends any other way" if places
                                                  else ""))
    return places


def fusion_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The graph nodes the hooks run in, one row each: node, hook phase, how, members."""
    fusion = report["fusion"]
    rows = []
    for node in fusion["nodes"]:
        if node["absorbed"]:
            how = ("inside the input step" if node["node"] == "__start__"
                   else "inside the model node")
        elif node["fused"]:
            how = "one fused node"
        elif node["alone"]:
            how = f"its own node: {node['alone']}"
        else:
            how = "its own node"
        if node["kind"] == "after_agent" and (fusion.get("after_agent_in_model")
                                              or fusion.get("after_agent_in_tools")):
            how += ", when the run ends any other way"
        rows.append({"node": node["node"], "phase": node["kind"], "how": how,
                     "members": list(node["members"])})
    if fusion.get("after_agent_in_model"):
        rows.append({"node": "model", "phase": "after_agent",
                     "how": "inside the model node, when the model ends the run",
                     "members": list(fusion["after_agent_in_model"])})
    if fusion.get("after_agent_in_tools"):
        rows.append({"node": "tools", "phase": "after_agent",
                     "how": "inside the tools node, when a lone return_direct call ends the "
                            "run", "members": list(fusion["after_agent_in_tools"])})
    for layer in fusion.get("wrap_layers", []):
        rows.append({"node": "model" if layer["kind"] == "wrap_model_call" else "tools",
                     "phase": layer["kind"], "how": "one wrap layer, outermost first",
                     "members": list(layer["members"])})
    return rows


def fusion_summary(report: dict[str, Any]) -> str:
    """One sentence: how many hook nodes fusion leaves, or why it is off."""
    fusion = report["fusion"]
    note = f" ({fusion['note']})" if fusion.get("note") else ""
    if not fusion["enabled"]:
        return f"Node fusion is off{note}: every hook has its own graph node."
    return (f"Node fusion: {fusion['hook_nodes_unfused']} hook nodes without it, "
            f"{fusion['hook_nodes']} with it{note}. Each row is a place hooks run, in the order "
            "the hooks run there.")


def left_out(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The problems that kept plugins out of the chain: each with its plugins, where they
    are declared, and the problem's whole message."""
    problems = [{"plugins": list(problem["plugins"]), "sources": list(problem["sources"]),
                 "message": problem["message"]} for problem in report["problems"]]
    named = {name for problem in problems for name in problem["plugins"]}
    problems += [{"plugins": [row["name"]], "sources": [row["source"]],
                  "message": row["reason"]}
                 for row in report["excluded"]
                 if row["kind"] in PROBLEM_KINDS and row["name"] not in named]
    return problems


def problem_banner(reports: list[dict[str, Any]]) -> list[str]:
    """One line per problem that left plugins out, over every chain (a problem both chains
    have is one line naming both), then each distribution that failed to load."""
    lines: dict[tuple[str, ...], tuple[list[str], str]] = {}
    for report in reports:
        for problem in left_out(report):
            first = problem["message"].splitlines()[0]
            key = (*problem["plugins"], first.replace(f" in the {report['chain']} chain", ""))
            chains, _ = lines.setdefault(key, ([], first))
            chains.append(report["chain"])
    banner = []
    for key, (chains, first) in lines.items():
        where = " and ".join(chains) + f" chain{'s' * (len(chains) > 1)}"
        text = key[-1] if len(chains) > 1 else first
        banner.append(f"{', '.join(key[:-1])} ({where}): {text}")
    return banner + _failed_distributions(reports)


def off_groups(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The plugins that are merely off, grouped by why (`OFF_GROUPS`)."""
    groups = []
    for kind, title in OFF_GROUPS:
        rows = [row for row in report["excluded"] if row["kind"] == kind]
        if rows:
            groups.append({"kind": kind, "title": title, "rows": rows})
    return groups


def render_report(reports: list[dict[str, Any]], *, title: str = "Antler chains") -> str:
    """The HTML page for `reports` (each a `chain show --json` report)."""
    data = []
    for report in reports:
        phases = hook_phases(report)
        places = after_agent_places(report)
        for phase in phases:
            if phase["phase"] == "after_agent" and len(places) > 1:
                phase["note"] += "; they run once, " + "; or ".join(places)
                for step in phase["steps"]:
                    step["node"] = "where the run ends"
        data.append({**report, "phases": phases, "fusion_rows": fusion_rows(report),
                     "fusion_summary": fusion_summary(report), "left_out": left_out(report),
                     "off_groups": off_groups(report)})
    payload = json.dumps({"title": title, "chains": data,
                          "hooks": [short for _, short in HOOK_COLUMNS],
                          "hook_names": [hook for hook, _ in HOOK_COLUMNS],
                          "problems": problem_banner(reports)},
                         ensure_ascii=False)
    # `</` cannot end the data block early once escaped.
    payload = payload.replace("</", "<\\/")
    fills = {"{{TITLE}}": html.escape(title), "{{DATA}}": payload}
    return re.sub(r"\{\{(TITLE|DATA)\}\}", lambda match: fills[match.group(0)], _PAGE)


def _failed_distributions(reports: list[dict[str, Any]]) -> list[str]:
    """Each distribution that failed to load, once (every chain's report repeats them)."""
    seen: dict[str, None] = {}
    for report in reports:
        seen.update(dict.fromkeys(warning["message"] for warning in report["warnings"]))
    return list(seen)


_PAGE = HEAD + """  :root { --fg: #1d2430; --dim: #525a66; --line: #d9dee7; --accent: #2456b8;
          --fused: #e9f1ff; --point: #0b6870; --point-bg: #eef8f8;
          --problem: #9b1c1c; --problem-bg: #fdecec; --off-bg: #f1f3f6; }
  header h1 { margin: 0 0 4px; font-size: 20px; overflow-wrap: anywhere; }
  header p { margin: 0 0 6px; color: var(--dim); }
  code { font-family: ui-monospace, monospace; font-size: 12px; background: #eef1f5;
         border-radius: 3px; padding: 0 3px; overflow-wrap: anywhere; }
  .banner { border: 1px solid var(--problem); background: var(--problem-bg);
            color: var(--problem); border-radius: 6px; padding: 8px 12px; margin: 8px 0; }
  .banner ul { margin: 4px 0 0; padding-left: 20px; }
  .legend { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: 12px;
            color: var(--dim); margin: 6px 0 0; padding: 0; list-style: none; }
  .legend b { color: var(--fg); font-family: ui-monospace, monospace; }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(640px, 1fr));
         gap: 20px; padding: 20px 24px; }
  section.chain { background: #fff; border: 1px solid var(--line); border-radius: 8px;
                  padding: 14px 16px; min-width: 0; }
  section.chain h2 { margin: 0 0 6px; font-size: 17px; }
  h3 { font-size: 14px; margin: 18px 0 6px; }
  h4 { font-size: 13px; margin: 10px 0 4px; color: var(--dim); }
  .scroll { overflow-x: auto; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid var(--line);
           vertical-align: top; }
  th { font-weight: 600; color: var(--dim); font-size: 12px; }
  th.mark { text-align: center; cursor: help; }
  td.mark { text-align: center; font-family: ui-monospace, monospace; width: 28px; }
  td.mark.on { color: var(--accent); font-weight: 700; }
  td.policy, td.source { white-space: nowrap; }
  @media (max-width: 760px) {
    main { padding: 12px 8px; grid-template-columns: 100%; }
    td.source { white-space: normal; }
  }
  tr.point td { color: var(--point); font-style: italic; background: var(--point-bg); }
  details summary { cursor: pointer; white-space: nowrap; }
  details .why { color: var(--dim); font-size: 12px; margin: 2px 0 4px 14px;
                 overflow-wrap: anywhere; }
  ol.phase { margin: 0; padding-left: 26px; }
  ol.phase li { margin: 1px 0; }
  .node { color: var(--dim); font-size: 12px; font-family: ui-monospace, monospace;
          overflow-wrap: anywhere; }
  li.fused { background: var(--fused); border-radius: 3px; }
  .phase-block { border-left: 3px solid var(--accent); padding: 2px 0 2px 10px;
                 margin: 8px 0; }
  .phase-block .note { color: var(--dim); font-size: 12px; }
  ul.off, ul.left-out { padding-left: 0; margin: 0; }
  ul.off li, ul.left-out li { list-style: none; border-radius: 3px; padding: 2px 6px;
                              margin: 2px 0; overflow-wrap: anywhere; }
  ul.off li { background: var(--off-bg); }
  ul.left-out li { background: var(--problem-bg); color: var(--problem);
                   border-left: 3px solid var(--problem); }
  ul.left-out pre { margin: 4px 0 2px; white-space: pre-wrap; font-size: 12px;
                    color: var(--fg); }
  .hint { color: var(--dim); }
  .empty { color: var(--dim); font-style: italic; }
  table.fusion td.node { white-space: nowrap; }
  table.fusion td.members { font-family: ui-monospace, monospace; font-size: 12px;
                            overflow-wrap: anywhere; }
  p.fusion-summary { margin: 0 0 6px; color: var(--dim); font-size: 12px; }
  .noscript { margin: 20px 24px; padding: 10px 14px; border: 1px solid var(--problem);
              background: var(--problem-bg); color: var(--problem); border-radius: 6px; }
</style>
</head>
<body>
<header>
  <h1 id="title">{{TITLE}}</h1>
  <p>Open a plugin to see why it sits where it sits; hover a hook column for its name.
     Highlighted steps run inside one fused graph node.</p>
  <div id="problems"></div>
  <ul class="legend" id="legend" aria-label="legend"></ul>
</header>
<noscript><div class="noscript">This page draws the chains with its own script (it fetches
nothing), and scripts are off in this browser: allow them for this file, or run
<code>antler chain show</code> and <code>antler chain explain NAME</code> in a terminal
for the same facts.</div></noscript>
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
    (children || []).forEach(function (child) {
      if (child) { node.appendChild(typeof child === "string"
                                    ? document.createTextNode(child) : child); }
    });
    return node;
  }

  // Text with `code` spans (config snippets in reasons and hints) as <code> elements.
  function prose(text) {
    return String(text).split("`").map(function (part, i) {
      return i % 2 ? el("code", {text: part}) : document.createTextNode(part);
    });
  }

  var legend = document.getElementById("legend");
  data.hook_names.forEach(function (hook, i) {
    legend.appendChild(el("li", {"data-legend": data.hooks[i]},
                          [el("b", {text: data.hooks[i]}), " " + hook]));
  });
  [["\\u25cf", "implements the hook"], ["\\u00b7", "does not"],
   ["?", "unknown (hooks not declared; --check imports the class)"],
   ["fail", "an error in the plugin fails the run"],
   ["skip", "an error is logged and the plugin skipped"],
   ["gate", "a security gate: skipping it would let something through"]]
    .forEach(function (pair) {
      legend.appendChild(el("li", {"data-legend": pair[0]}, [el("b", {text: pair[0]}),
                                                             " " + pair[1]]));
    });

  if (data.problems.length) {
    var many = data.problems.length !== 1;
    document.getElementById("problems").appendChild(el("div", {
      "class": "banner", role: "alert", "data-problems": String(data.problems.length)}, [
      el("strong", {text: data.problems.length + (many ? " problems leave" : " problem leaves")
                          + " plugins out of the chains:"}),
      el("ul", {}, data.problems.map(function (line) { return el("li", {text: line}); }))]));
  }

  function pluginTable(chain) {
    var head = el("tr", {}, [el("th", {text: "#"}), el("th", {text: "plugin"})]
      .concat(data.hooks.map(function (short, i) {
        return el("th", {"class": "mark", text: short, title: data.hook_names[i]});
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
                             text: plugin.on_error + (plugin.security_gate ? " \\u00b7 gate"
                                                      : "")})])
          .concat([el("td", {"class": "node source", text: plugin.source})])));
      points(plugin.position);
    });
    return el("div", {"class": "scroll"}, [el("table", {"class": "plugins"}, body)]);
  }

  function phases(chain) {
    return el("div", {"class": "phases"}, chain.phases.map(function (phase) {
      var items = phase.steps.map(function (step) {
        return el("li", {"class": step.fused ? "fused" : "", "data-step": step.plugin,
                         title: "graph node: " + step.node}, [
          step.plugin + " ", el("span", {"class": "node", text: "(" + step.node + ")"})]);
      });
      return el("div", {"class": "phase-block", "data-phase": phase.phase}, [
        el("strong", {text: phase.phase}),
        el("span", {"class": "note", text: " \\u2014 " + phase.note}),
        items.length ? el("ol", {"class": "phase"}, items)
                     : el("div", {"class": "empty", text: "no plugin has this hook"})]);
    }));
  }

  function fusion(chain) {
    var rows = [el("tr", {}, [el("th", {text: "graph node"}), el("th", {text: "hooks"}),
                              el("th", {text: "how they run"}),
                              el("th", {text: "plugins, in run order"})])];
    chain.fusion_rows.forEach(function (row) {
      rows.push(el("tr", {"data-fusion-node": row.node, "data-fusion-phase": row.phase}, [
        el("td", {"class": "node", text: row.node}), el("td", {text: row.phase}),
        el("td", {text: row.how}),
        el("td", {"class": "members", text: row.members.join(" \\u2192 ")})]));
    });
    return el("div", {}, [el("p", {"class": "fusion-summary", text: chain.fusion_summary}),
                          el("div", {"class": "scroll"},
                             [el("table", {"class": "fusion"}, rows)])]);
  }

  function leftOut(chain) {
    if (!chain.left_out.length) { return null; }
    return el("div", {"data-left-out": chain.chain}, [
      el("h3", {text: "Left out because of a problem"}),
      el("ul", {"class": "left-out"}, chain.left_out.map(function (problem) {
        var who = [];
        problem.plugins.forEach(function (name, i) {
          if (i) { who.push(", "); }
          who.push(el("strong", {"data-off": name, "data-kind": "problem", text: name}));
          who.push(" (" + problem.sources[i] + ")");
        });
        return el("li", {}, who.concat([el("pre", {text: problem.message})]));
      }))]);
  }

  function offGroups(chain) {
    if (!chain.off_groups.length) {
      return el("div", {"class": "empty", text: "every installed plugin is on"});
    }
    return el("div", {}, chain.off_groups.map(function (group) {
      return el("div", {"data-off-group": group.kind}, [
        el("h4", {text: group.title + " (" + group.rows.length + ")"}),
        el("ul", {"class": "off"}, group.rows.map(function (row) {
          var text = row.reason.replace(/^off by default; /, "");
          return el("li", {"data-off": row.name, "data-kind": row.kind},
                    [el("strong", {text: row.name}), ": "].concat(prose(text))
                      .concat(row.hint ? [el("span", {"class": "hint"},
                                             [" \\u2014 "].concat(prose(row.hint)))] : []));
        }))]);
    }));
  }

  data.chains.forEach(function (chain) {
    var out = chain.left_out.reduce(function (n, p) { return n + p.plugins.length; }, 0);
    var count = chain.plugins.length + " plugins" + (out ? ", " + out + " left out by a problem"
                                                         : "");
    main.appendChild(el("section", {"class": "chain", "data-chain": chain.chain}, [
      el("h2", {text: chain.chain + " chain \\u2014 " + count}),
      el("div", {"class": "node", text: "config: " + chain.config}),
      leftOut(chain),
      el("h3", {text: "Plugins in chain order"}), pluginTable(chain),
      el("h3", {text: "When each hook runs"}), phases(chain),
      el("h3", {text: "Graph nodes the hooks run in"}), fusion(chain),
      el("h3", {text: "Off, and why"}), offGroups(chain)]));
  });
  document.body.setAttribute("data-rendered", "true");
})();
</script>
</body>
</html>
"""
