"""`antler chain ...`: what runs, in what order, and why.

`show` and `explain` plan the chain from specs alone (`plan_chain`): no
middleware is instantiated, and a plugin's module is imported only when its
manifest does not declare `hooks:` and its factory must be inspected to list
them. `graph` draws the declared constraints; `diff` compares the chains two
configs produce.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from . import AntlerGroup, CliUsageError
from .graph import HOOK_COLUMNS
from .output import console, print_json, table, warn, write_file, write_or_echo
from .session import (
    CHAIN_CHOICES,
    CONDITION_FLAGS,
    Session,
    chain_inputs,
    chain_option,
    config_option,
    describe_runtime,
    json_option,
    manifest_option,
    pass_session,
    runtime_options_flags,
)

if TYPE_CHECKING:
    from antler.chain import ChainPlan, Exclusion
    from antler.chain.config import OperatorConfig
    from antler.chain.resolver import Placement
    from antler.plugin_api.registry import PluginRegistry
    from antler.plugin_api.spec import PluginSpec

    from .graph import ChainGraph

_KIND_ORDER = ["broken", "load_failed", "disabled", "off_by_default", "runtime_condition",
               "not_in_chain", "other"]
"""How `chain show` groups the plugins that are not in the chain."""


@click.group(cls=AntlerGroup)
def chain() -> None:
    """Show, explain, draw and compare the middleware chain."""


# -- shared facts about one plan ------------------------------------------------------------


def plugin_source(spec: PluginSpec, registry: PluginRegistry) -> str:
    """'distribution version' for installed plugins, else 'file:line' where it was declared."""
    source = registry.sources.get(spec.name)
    distribution = source.distribution if source else spec.provenance.distribution
    version = source.version if source else spec.provenance.version
    if distribution:
        return f"{distribution} {version}" if version else distribution
    prov = spec.provenance
    return f"{prov.source}:{prov.line}" if prov.line else prov.source


def plugin_hooks(spec: PluginSpec) -> tuple[list[str] | None, str | None]:
    """(hooks, where they came from): the manifest's `hooks:`, else the factory class."""
    if spec.hooks is not None:
        return list(spec.hooks), "manifest"
    from antler.errors import ReflectionError
    from antler.plugin_api.reflection import resolve_object

    try:
        target = resolve_object(spec.factory, f"factory of plugin {spec.name!r}")
    except ReflectionError:
        return None, None
    # A subclass of AgentMiddleware has imported langchain's middleware package already;
    # anything else (a factory function, another class) must not pay for importing it.
    if not isinstance(target, type) or "langchain.agents.middleware" not in sys.modules:
        return None, None
    from langchain.agents.middleware import AgentMiddleware

    from antler.chain import implemented_hooks

    if not issubclass(target, AgentMiddleware):
        return None, None
    return implemented_hooks(target), "class"


def exclusion(exclusion: Exclusion, plan: ChainPlan) -> dict[str, Any]:
    """One plugin that is not in the chain: kind, reason and what would bring it in."""
    reason, kind = exclusion.reason, exclusion.kind
    hint = None
    if kind == "runtime_condition":
        for condition, wanted in exclusion.spec.when.items():
            if plan.runtime.condition(condition) != wanted:
                flag = CONDITION_FLAGS.get(condition)
                if flag is None:  # an open condition: only the embedding application sets it
                    hint = f"the run must set RuntimeOptions.conditions[{condition!r}] = {wanted}"
                else:
                    hint = f"pass {flag}" if wanted else f"drop {flag}"
                break
    return {"name": exclusion.spec.name, "kind": kind, "reason": reason, "hint": hint,
            "source": plugin_source(exclusion.spec, plan.registry),
            "declared_at": str(exclusion.spec.provenance)}


def load_diagnostics(registry: PluginRegistry, config: OperatorConfig) -> list[dict[str, Any]]:
    """Entry points that failed to load; `required` ones stop `build_chain`."""
    fatal = registry.required_failures(config.required_plugins())
    return [{"distribution": d.distribution, "entry_point": d.entry_point, "plugin": d.plugin,
             "cause": d.cause, "message": str(d), "required": d in fatal}
            for d in registry.diagnostics]


def plan_problems(plan: ChainPlan) -> list[dict[str, Any]]:
    """The problems optional plugins were excluded for, each with where they come from."""
    rows = []
    for problem in plan.problems:
        specs = [plan.excluded[name].spec for name in problem.plugins]
        rows.append({
            "chain": plan.chain, "stage": problem.stage, "plugins": list(problem.plugins),
            "sources": [plugin_source(spec, plan.registry) for spec in specs],
            "message": problem.message,
        })
    return rows


def problem_text(row: dict[str, Any]) -> str:
    """'optional plugin 'x' (acme-antler 1.0) is excluded from the lead chain: <why>'."""
    by_source: dict[str, list[str]] = {}
    for name, source in zip(row["plugins"], row["sources"], strict=True):
        by_source.setdefault(source, []).append(repr(name))
    who = ", ".join(f"{', '.join(names)} ({source})" for source, names in by_source.items())
    plural = len(row["plugins"]) > 1
    return (f"optional plugin{'s' * plural} {who} {'are' if plural else 'is'} excluded from "
            f"the {row['chain']} chain: {row['message']}")


def print_plan_warnings(plan: ChainPlan, *, with_load: bool = True) -> None:
    """Every problem of the plan on stderr: failed distributions, then excluded plugins."""
    if with_load:
        _print_warnings(load_diagnostics(plan.registry, plan.config))
    for row in plan_problems(plan):
        warn(problem_text(row))


def _placed_by(placement: Placement) -> str:
    """The plugin's own declarations, compactly: 'position first; after a, b; slot ...'.

    A target outside the chain is marked '(absent)': the order still holds through
    it. Default-slot bounds read 'slot bound: extensions (before @tail_start)'.
    """
    from antler.chain.resolver import SLOT_BOUND

    groups: dict[str, list[str]] = {}
    absent = placement.through_absent
    for c in placement.constraints:
        if c.owner != placement.name:
            continue
        if c.slot is not None:
            key = f"slot bound: {c.slot}" if c.kind == SLOT_BOUND else f"slot {c.slot}"
            text = f"{c.side} {c.target}" if c.kind == SLOT_BOUND else ""
        elif c.kind.startswith("hook_order "):
            key, text = "hook_order", c.kind.removeprefix("hook_order ")
        else:
            key, text = c.kind, c.target + (" (absent)" if c.target in absent else "")
        texts = groups.setdefault(key, [])
        if text and text not in texts:
            texts.append(text)
    rank = {kind: i for i, kind in enumerate(_PLACED_BY_ORDER)}
    ordered = sorted(groups.items(), key=lambda item: rank.get(item[0].split(" ")[0],
                                                               len(rank)))
    return "; ".join(_placed_by_group(key, texts) for key, texts in ordered)


def _placed_by_group(key: str, texts: list[str]) -> str:
    if key.startswith("slot bound"):
        return f"{key} ({', '.join(texts)})"
    return f"{key} {', '.join(texts)}" if texts else key


_PLACED_BY_ORDER = ("position", "after", "before", "immediately_after", "immediately_before",
                    "outer_of", "inner_of", "after_model_before", "after_model_after",
                    "hook_order", "slot", "requires")


def show_report(plan: ChainPlan, graph: ChainGraph) -> dict[str, Any]:
    from antler.chain.policy import policy_report
    from antler.contracts.serverkeys import server_owned_keys

    registry = plan.registry
    plugins = []
    for name in plan.order:
        placement = plan.resolution.placements[name]
        hooks, hooks_from = plugin_hooks(placement.spec)
        plugins.append({
            "position": placement.position, "name": name, "summary": placement.spec.summary,
            "hooks": hooks, "hooks_from": hooks_from,
            "source": plugin_source(placement.spec, registry),
            "declared_at": str(placement.spec.provenance),
            **policy_report(placement.spec, plan.config),
            "placed_by": _placed_by(placement),
            "constraints": [{"owner": c.owner, "kind": c.kind, "target": c.target,
                             "declared_at": str(c.provenance)} for c in placement.constraints],
        })
    slots = list(registry.slots.values())
    points = []
    for point, after in graph.points.items():
        points.append({
            "name": point, "after_position": after, "summary": graph.summaries.get(point, ""),
            "slots_end": [s.name for s in slots if s.end == point],
            "slots_begin": [s.name for s in slots if s.start == point],
        })
    excluded = sorted((exclusion(ex, plan) for ex in plan.excluded.values()),
                      key=lambda row: (_KIND_ORDER.index(row["kind"]), row["name"]))
    return {
        "chain": plan.chain,
        "config": plan.config.source,
        "runtime": plan.runtime.model_dump(include={"plan_mode", "supports_vision",
                                                    "subagents_enabled", "agent_name"}),
        "plugins": plugins,
        "points": points,
        "excluded": excluded,
        "fusion": _fusion(plan),
        "server_owned_keys": [{"key": key, "declared_by": owners} for key, owners
                              in server_owned_keys(registry.specs.values()).items()],
        "warnings": load_diagnostics(registry, plan.config),
        "ordering_warnings": list(plan.resolution.warnings),
        "problems": plan_problems(plan),
        "sandbox": _sandbox(plan),
    }


def _sandbox(plan: ChainPlan) -> dict[str, Any] | None:
    """Which sandbox provider the chain's tools would run in, and why (None: no sandbox)."""
    if "sandbox" not in plan.order:
        return None
    from antler.runtime.sandbox.choice import describe_sandbox

    # A report only: the last recorded probe answers while it is valid (no bwrap run).
    return describe_sandbox(plan.config.section("sandbox"), remembered=True)


def _fusion(plan: ChainPlan) -> dict[str, Any]:
    """Which graph nodes the chain compiler fuses (from declared hooks; nothing imported)."""
    from antler.compiler import plan_for_specs

    fusion = plan_for_specs(plan.resolution.specs(), enabled=plan.config.chain.fuse,
                            into_model=plan.config.chain.fuse_into_model,
                            hooks=lambda spec: plugin_hooks(spec)[0])
    return {**fusion.as_dict(), "text": fusion.render()}


def _plan(session: Session, config_path: str | None, chain_name: str,
          runtime: dict[str, Any]) -> ChainPlan:
    return session.plan(session.config(config_path), chain_name, runtime)


def _checked_plan(session: Session, plan: ChainPlan, runtime: dict[str, Any]) -> ChainPlan:
    """`plan` as a build would leave it: every participant's factory imported, an optional
    plugin whose factory does not import left out; a required one is an error."""
    from antler.chain import factory_import_failures
    from antler.errors import BuildError

    failures = factory_import_failures(plan)
    fatal = [f"plugin {name!r} [{plan.registry.specs[name].provenance}]: {message}"
             for name, message in failures.items() if name in plan.required]
    if fatal:
        raise BuildError("building this chain fails:\n" + "\n".join(fatal))
    if not failures:
        return plan
    return session.plan(plan.config, plan.chain, runtime, unloadable=failures)


# -- show -----------------------------------------------------------------------------------


@chain.command("show")
@chain_inputs
@click.option("--check", is_flag=True,
              help="Also import every plugin's factory, as building the agent does.")
@json_option
@pass_session
def show(session: Session, chain_name: str, config_path: str | None, runtime: dict[str, Any],
         check: bool, as_json: bool) -> None:
    """What runs, in what order, and why.

    Lists the chain's plugins in list order (LangChain runs before_* hooks in
    this order, after_* hooks in reverse, and the first wrap_* is outermost),
    the hooks each implements, where each comes from, the synchronization
    points and slots between them, every known plugin that is not in the chain
    with the reason, and plugin distributions that failed to load.

    Plugin factories are not imported (that keeps `chain show` fast), so a
    factory that does not import is not seen: building the agent leaves such
    an optional plugin out, and fails on a required one. --check imports every
    participant's factory first and shows the chain the build would get (as
    `antler config check` does for every combination of flags).

    An optional plugin whose constraints cannot be satisfied (a misspelt name,
    a cycle) is left out with a warning that names its distribution, and the
    rest of the chain is shown; the exit code stays 0. A required one (always
    on, Antler's own, or marked `plugins: {NAME: {required: true}}`) is an
    error (exit code 1) listing every problem found.

    \b
    JSON (--json): an object with
      chain     "lead" | "subagent"
      config    the config file, or "<defaults>"
      runtime   {plan_mode, supports_vision, subagents_enabled, agent_name}
      plugins   [{position, name, summary, hooks (list, or null if unknown),
                  hooks_from ("manifest" | "class" | null), source, declared_at,
                  on_error ("fail" | "skip", effective), on_error_from (who decided it),
                  security_gate (what a skipped failure lets through, or null),
                  placed_by, constraints [{owner, kind, target, declared_at}]}]
      points    [{name, after_position (plugins before it), summary,
                  slots_end [..], slots_begin [..]}]
      fusion    {enabled, note, hook_nodes, hook_nodes_unfused, text,
                 nodes [{kind, node, members, fused, alone}]}: the graph nodes
                 the chain compiler fuses (chain.fuse in the config)
      server_owned_keys  [{key, declared_by [plugin names, "antler" for the core]}]:
                the additional_kwargs keys stripped from caller input
      excluded  [{name, kind, reason, hint, source, declared_at}]; kind is one
                of broken, load_failed, disabled, off_by_default,
                runtime_condition, not_in_chain, other
      warnings  [{distribution, entry_point, plugin, cause, message, required}]:
                distributions that failed to load
      problems  [{chain, stage ("order" | "load"), plugins [names], sources
                 [distribution or file:line, one per plugin], message}]: why
                optional plugins were excluded
      ordering_warnings  [text]: declarations that hold but probably do not
                mean what they say (outer_of a plugin with no wrap hook, ...)
      sandbox   {requested, require_isolation, provider, reason, isolated,
                 network, warning, error}: the provider the tools would run
                 in and why (null when the chain has no sandbox)
      factories_checked  true with --check (a factory that does not import is
                 then under excluded/problems, stage "load"), else false
    """
    from .graph import chain_graph

    plan = _plan(session, config_path, chain_name, runtime)
    if check:
        plan = _checked_plan(session, plan, runtime)
    report = {**show_report(plan, chain_graph(plan)), "factories_checked": check}
    if as_json:
        print_json(report)
        return
    _print_show(report, runtime)


WIDE_COLUMNS = 110
"""Below this terminal width `chain show` folds "placed by" under each plugin's name."""


def _folded(text: str, width: int) -> str:
    import textwrap

    return "\n" + textwrap.fill(text, width=width, initial_indent="  ",
                                subsequent_indent="  ", break_on_hyphens=False)


def _plugin_cells(plugin: dict[str, Any], marks: list[str], hooks: Any,
                  fold_width: int) -> list[Any]:
    """The cells after '#'; with `fold_width`, "placed by" goes under the name."""
    from rich.text import Text

    name = Text.assemble(Text(plugin["name"], style="bold"), *policy_marks(plugin))
    placed = plugin["placed_by"] or "-"
    if fold_width:
        name = Text.assemble(name, Text(_folded(placed, fold_width), style="dim"))
    cells = [name, Text("  ".join(marks), style="dim" if hooks is None else "")]
    return [*cells, *([] if fold_width else [Text(placed)]),
            Text(plugin["source"], style="dim")]


def policy_marks(plugin: dict[str, Any]) -> list[Any]:
    """Marks after a plugin's name: `skip` for on_error: skip, `gate` for a security gate."""
    from rich.text import Text

    marks = []
    if plugin["on_error"] == "skip":
        marks.append(Text(" skip", style="yellow"))
    if plugin["security_gate"]:
        marks.append(Text(" gate", style="bold red"))
    return marks


def _point_cells(point: dict[str, Any], notes: list[str], fold_width: int) -> list[Any]:
    from rich.text import Text

    text = " · ".join(notes) or point["summary"]
    if fold_width:
        return [Text.assemble(Text(point["name"], style="cyan"),
                              Text(_folded(text, fold_width), style="cyan")), "", ""]
    return [Text(point["name"], style="cyan"), "", Text(text, style="cyan"), ""]


def _print_show(report: dict[str, Any], runtime: dict[str, Any]) -> None:
    from rich.text import Text

    out = console()
    count = len(report["plugins"])
    out.print(Text(f"{report['chain']} chain: {count} plugin{'s' * (count != 1)} "
                   f"(config: {report['config']}; {describe_runtime(runtime)})", style="bold"))
    # The hooks column is a row of marks under "bA bM wM aM wT aA", one per hook. On a
    # narrow terminal "placed by" folds under the plugin's name instead of a column.
    folded = out.width < WIDE_COLUMNS
    columns = ["#", "plugin", " ".join(short for _, short in HOOK_COLUMNS),
               *([] if folded else ["placed by"]), "source"]
    rows = table(*columns, collapse_padding=True)
    rows.columns[0].justify = "right"
    rows.columns[2].no_wrap = True
    rows.columns[1].no_wrap = True
    fold_width = max(24, out.width - 40)

    def separators(position: int) -> None:
        # A point is a boundary, not a middleware: a rule, then the point and its slots.
        for point in report["points"]:
            if point["after_position"] != position:
                continue
            notes = [f"{s} slot ends" for s in point["slots_end"]]
            notes += [f"{s} slot begins" for s in point["slots_begin"]]
            if rows.rows:
                rows.add_section()
            rows.add_row("", *_point_cells(point, notes, fold_width if folded else 0))

    separators(0)
    for plugin in report["plugins"]:
        hooks = plugin["hooks"]
        marks = ["?" if hooks is None else "●" if hook in hooks else "·"
                 for hook, _ in HOOK_COLUMNS]
        rows.add_row(str(plugin["position"]),
                     *_plugin_cells(plugin, marks, hooks, fold_width if folded else 0))
        separators(plugin["position"])
    out.print(rows)
    out.print(Text("hooks: " + "  ".join(f"{short} {hook}" for hook, short in HOOK_COLUMNS)
                   + "  ? unknown", style="dim"))
    out.print(Text("on_error: fail unless marked skip (a hook that raises is logged and "
                   "skipped); gate: a security gate, fails closed", style="dim"))
    if report["excluded"]:
        absent = table("plugin", "why not", title=f"Not in the {report['chain']} chain")
        for row in report["excluded"]:
            why = row["reason"] + (f" ({row['hint']})" if row["hint"] else "")
            absent.add_row(Text(row["name"]), Text(why))
        out.print()
        out.print(absent)
    out.print()
    out.print(Text(report["fusion"]["text"], style="dim"))
    if not report["factories_checked"]:
        out.print(Text("plugin factories not imported: --check imports them, as building "
                       "the agent does", style="dim"))
    if report["sandbox"] is not None:
        from antler.runtime.sandbox.choice import sandbox_line

        out.print(Text(sandbox_line(report["sandbox"])))
    _print_warnings(report["warnings"])
    for text in report["ordering_warnings"]:
        warn(text)
    for row in report["problems"]:
        warn(problem_text(row))


def _print_warnings(warnings: list[dict[str, Any]]) -> None:
    for item in warnings:
        if item["required"]:
            warn(item["message"] + " (required: building the chain will fail)", label="error")
        else:
            warn(item["message"] + " (optional: skipped)")


# -- explain --------------------------------------------------------------------------------


@chain.command("explain")
@click.argument("name")
@chain_inputs
@json_option
@pass_session
def explain(session: Session, name: str, chain_name: str, config_path: str | None,
            runtime: dict[str, Any], as_json: bool) -> None:
    """Why NAME is where it is in the chain, or why it is not in it.

    Prints the constraints that placed the plugin (declared by it or by
    others, with where each was declared, and whether one goes through a
    plugin that is not in the chain), warnings about its declarations, and
    the tie-break. An unknown NAME is a
    usage error (exit code 2) with the nearest known name.

    \b
    JSON (--json): an object with
      name, chain, summary, source, declared_at
      in_chain      true | false
      position      1-based position, or null
      chain_length  number of plugins in the chain
      hooks         list, or null if unknown
      neighbours    [the plugin before, NAME, the plugin after]
      constraints   [{owner, kind, target, declared_at, text}]
      through_absent  {plugin: why it is not in the chain}, for constraints
                    that go through a plugin outside the chain
      warnings      [text]
      tie_break     text, or null
      excluded      {kind, reason, hint}, or null when in the chain
      on_error      fail | skip: what a hook that raises does (effective policy)
      on_error_from who decided it (the operator's plugins.<key>, the manifest, a default)
      security_gate what a skipped failure would let through, or null (not a gate)
      text          the human-readable explanation
    """
    from antler.plugin_api.diagnostics import did_you_mean

    plan = _plan(session, config_path, chain_name, runtime)
    known = [*plan.order, *plan.excluded]
    if name not in known:
        raise CliUsageError(
            f"no plugin named {name!r}{did_you_mean(name, known)}; `antler chain show` "
            "lists the chain and the plugins outside it")
    report = explain_report(plan, name)
    if as_json:
        print_json(report)
        return
    click.echo(report["text"])
    if report["summary"]:
        click.echo(f"  summary: {report['summary']}")
    if report["in_chain"]:
        hooks = report["hooks"]
        listed = "? (no `hooks:` in the manifest)" if hooks is None else ", ".join(hooks)
        click.echo(f"  hooks: {listed or '(none)'}")
    elif report["excluded"]["hint"]:
        click.echo(f"  to include it: {report['excluded']['hint']}")
    click.echo(f"  on_error: {report['on_error']} ({report['on_error_from']})")
    gate = report["security_gate"]
    click.echo("  security gate: " + (f"yes: a skipped failure would let through {gate}"
                                      if gate else "no"))


def explain_report(plan: ChainPlan, name: str) -> dict[str, Any]:
    from antler.chain.policy import policy_report

    placement = plan.resolution.placements.get(name)
    spec = placement.spec if placement else plan.excluded[name].spec
    report: dict[str, Any] = {
        "name": name, "chain": plan.chain, "summary": spec.summary,
        "source": plugin_source(spec, plan.registry), "declared_at": str(spec.provenance),
        "in_chain": placement is not None, "position": None,
        "chain_length": len(plan.order), "hooks": None, "neighbours": [], "constraints": [],
        "through_absent": {}, "warnings": [], "tie_break": None, "excluded": None,
        **policy_report(spec, plan.config),
        "text": plan.explain(name),
    }
    if placement is None:
        row = exclusion(plan.excluded[name], plan)
        report["excluded"] = {key: row[key] for key in ("kind", "reason", "hint")}
        return report
    report.update(
        position=placement.position,
        hooks=plugin_hooks(spec)[0],
        neighbours=plan.order[max(0, placement.position - 2):placement.position + 1],
        constraints=[{"owner": c.owner, "kind": c.kind, "target": c.target,
                      "declared_at": str(c.provenance), "text": c.describe()}
                     for c in placement.constraints],
        through_absent=placement.through_absent, warnings=list(placement.warnings),
        tie_break=placement.tie_break or None,
    )
    return report


# -- graph ----------------------------------------------------------------------------------


@chain.command("graph")
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot", "json"]),
              default="mermaid", show_default=True, help="Output format.")
@click.option("--output", "-o", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write to FILE instead of stdout.")
@click.option("--point-edges", is_flag=True,
              help="Also draw constraints that name a point (`before @guards_end`...); by "
                   "default a plugin's place between the points shows them.")
@chain_inputs
@json_option
@pass_session
def graph(session: Session, fmt: str, output: str | None, point_edges: bool, chain_name: str,
          config_path: str | None, runtime: dict[str, Any], as_json: bool) -> None:
    """The constraint graph of the chain, as Mermaid, Graphviz dot or JSON.

    Nodes are the plugins in list order (numbered, with their hooks under the
    name: bA before_agent, bM before_model, wM wrap_model_call, aM after_model,
    wT wrap_tool_call, aA after_agent) and the synchronization points
    (hexagons); edges are the declared constraints between plugins, drawn from
    the node that declared one to the node it names and labelled with its kind
    ('after', 'outer_of', ...). `requires` edges, which do not order, are
    dashed. Constraints naming a point are left out unless --point-edges: where
    a plugin sits between two points already shows them. JSON has every edge.

    \b
    JSON (--json, or --format json): an object with
      chain  "lead" | "subagent"
      nodes  [{id, kind ("plugin" | "point"), summary,
               position and hooks (plugins) | after_position (points)}] in chain order
      edges  [{from, to, kind, slot, side, declared_at}]; for slot
             constraints `to` is the slot's boundary point and side is
             "after" (its start) or "before" (its end)
    """
    from .graph import chain_graph, to_dot, to_mermaid

    plan = _plan(session, config_path, chain_name, runtime)
    drawn = chain_graph(plan)
    if as_json or fmt == "json":
        import json

        text = json.dumps(drawn.as_json(), indent=2, ensure_ascii=False) + "\n"
    else:
        render = to_mermaid if fmt == "mermaid" else to_dot
        text = render(drawn, point_edges=point_edges)
    write_or_echo(text, output, f"the {chain_name} chain graph")


# -- report ---------------------------------------------------------------------------------


@chain.command("report")
@click.option("--html", "html_path", metavar="FILE", required=True,
              type=click.Path(dir_okay=False), help="Write the page here.")
@config_option
@runtime_options_flags
@manifest_option
@pass_session
def report(session: Session, html_path: str, config_path: str | None,
           runtime: dict[str, Any]) -> None:
    """One self-contained HTML page of the lead and subagent chains, side by side.

    The header names every problem that left plugins out and explains the hook
    columns. For each chain: those problems, the plugins in order with their
    hooks (open one to see why it sits where it sits), per hook phase the order
    in which the hooks run (wrap hooks outermost first, after hooks in
    LangChain's reverse order), the graph nodes the hooks run in, and what is
    off, grouped by why. The page needs no network to be viewed.
    """
    from .graph import chain_graph
    from .report import render_report

    config = session.config(config_path)
    reports = []
    for name in CHAIN_CHOICES:
        plan = session.plan(config, name, runtime)
        reports.append(show_report(plan, chain_graph(plan)))
    title = f"Antler chains ({config.source}; {describe_runtime(runtime)})"
    write_file(html_path, render_report(reports, title=title), "the chain report")
    click.echo(f"wrote {html_path}: the lead and subagent chains", err=True)


# -- diff -----------------------------------------------------------------------------------


@chain.command("diff")
@click.argument("config_a", metavar="A.yaml", type=click.Path(dir_okay=False))
@click.argument("config_b", metavar="B.yaml", type=click.Path(dir_okay=False))
@chain_option
@runtime_options_flags
@manifest_option
@json_option
@pass_session
def diff(session: Session, config_a: str, config_b: str, chain_name: str,
         runtime: dict[str, Any], as_json: bool) -> None:
    """Compare the chains two config files produce (same plugins, same runtime flags).

    Added plugins are in B's chain only, removed ones in A's only (each with
    the reason it is absent from the other); moved plugins changed their order
    relative to the plugins both chains share. Plugins that only shift because
    others were added or removed are not reported as moved.

    \b
    JSON (--json): an object with
      chain      "lead" | "subagent"
      a, b       {config, order [names]}
      added      [{name, position (in B), reason_in_a}]
      removed    [{name, position (in A), reason_in_b}]
      moved      [{name, from (position in A), to (position in B)}]
      identical  true when both chains are the same list
    """
    plan_a = _plan(session, config_a, chain_name, runtime)
    plan_b = _plan(session, config_b, chain_name, runtime)
    report = diff_report(plan_a, plan_b, config_a, config_b)
    if as_json:
        print_json(report)
        return
    _print_diff(report, runtime)


def diff_report(plan_a: ChainPlan, plan_b: ChainPlan, name_a: str,
                name_b: str) -> dict[str, Any]:
    pos_a = {name: i for i, name in enumerate(plan_a.order, start=1)}
    pos_b = {name: i for i, name in enumerate(plan_b.order, start=1)}

    def absent(plan: ChainPlan, name: str, config: str) -> str:
        held = plan.excluded.get(name)
        return held.reason if held else f"not configured in {config}"

    shared_a = [n for n in plan_a.order if n in pos_b]
    shared_b = [n for n in plan_b.order if n in pos_a]
    kept = set(_longest_common_subsequence(shared_a, shared_b))
    return {
        "chain": plan_a.chain,
        "a": {"config": name_a, "order": list(plan_a.order)},
        "b": {"config": name_b, "order": list(plan_b.order)},
        "added": [{"name": n, "position": pos_b[n], "reason_in_a": absent(plan_a, n, name_a)}
                  for n in plan_b.order if n not in pos_a],
        "removed": [{"name": n, "position": pos_a[n], "reason_in_b": absent(plan_b, n, name_b)}
                    for n in plan_a.order if n not in pos_b],
        "moved": [{"name": n, "from": pos_a[n], "to": pos_b[n]}
                  for n in shared_b if n not in kept],
        "identical": plan_a.order == plan_b.order,
    }


def _longest_common_subsequence(a: list[str], b: list[str]) -> list[str]:
    # O(len(a) * len(b)); chains are tens of plugins long.
    lengths = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            lengths[i][j] = (lengths[i + 1][j + 1] + 1 if a[i] == b[j]
                             else max(lengths[i + 1][j], lengths[i][j + 1]))
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            out.append(a[i])
            i, j = i + 1, j + 1
        elif lengths[i + 1][j] >= lengths[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def _print_diff(report: dict[str, Any], runtime: dict[str, Any]) -> None:
    a, b = report["a"], report["b"]
    click.echo(f"{report['chain']} chain ({describe_runtime(runtime)}): {a['config']} "
               f"({len(a['order'])} plugins) -> {b['config']} ({len(b['order'])} plugins)")
    if report["identical"]:
        click.echo("no difference: both configs give the same chain")
        return
    lines = [("+", "green", row["name"], f"at {row['position']}",
              f"in {a['config']}: {row['reason_in_a']}") for row in report["added"]]
    lines += [("-", "red", row["name"], f"was {row['position']}",
               f"in {b['config']}: {row['reason_in_b']}") for row in report["removed"]]
    lines += [("~", "yellow", row["name"], f"{row['from']} -> {row['to']}", "")
              for row in report["moved"]]
    name_width = max(len(line[2]) for line in lines)
    where_width = max(len(line[3]) for line in lines)
    for mark, colour, name, where, why in lines:
        text = click.style(f"  {mark} {name:<{name_width}}  {where:<{where_width}}", fg=colour)
        click.echo(text + (f"  ({why})" if why else ""))
