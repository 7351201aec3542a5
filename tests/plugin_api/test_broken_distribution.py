"""One third-party distribution with a fault of every kind, end to end through the CLI.

`globex-antler` ships, next to two healthy plugins (one of them with a partial
constraint), a plugin whose `before_agent` hook is ordered after
`input_provenance`, a cycle through an `immediately_after` pair, a misspelt
ordering name and a factory that does not import. Every command shows every
problem at once with the distribution's name, leaves the optional offenders out
and keeps the good plugins running; marked required, the distribution stops
the command with every problem listed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from antler.cli import cli

GLOBEX = "globex-antler"
SOURCE = f"{GLOBEX} 1.0"

MANIFEST = """\
api_version: 1
plugins:
  - name: globex_greeter
    factory: "globex_antler.middleware:Greeter"
    summary: Healthy, no constraints
    hooks: [before_model]
  - name: globex_partial
    factory: "globex_antler.middleware:Partial"
    summary: Healthy, constrains one side only
    hooks: [before_model]
    order: {after: [title]}
  - name: globex_late_intake
    factory: "globex_antler.middleware:LateIntake"
    summary: A before_agent hook that asks to run after input_provenance
    hooks: [before_agent]
    order: {after: [input_provenance]}
  - name: globex_first
    factory: "globex_antler.middleware:Greeter"
    hooks: [before_model]
  - name: globex_second
    factory: "globex_antler.middleware:Greeter"
    hooks: [before_model]
    order: {immediately_after: globex_first}
  - name: globex_wedge
    factory: "globex_antler.middleware:Greeter"
    hooks: [before_model]
    order: {after: [globex_first], before: [globex_second]}
  - name: globex_typo
    factory: "globex_antler.middleware:Greeter"
    hooks: [before_model]
    order: {after: [sumarization]}
  - name: globex_broken
    factory: "globex_antler.accelerator:Accelerator"
    summary: Its factory needs a compiled module that did not build
    hooks: [before_model]
"""

PLUGIN = '''
    from antler.plugin_api.hookspecs import hookimpl
    from antler.plugin_api.manifest import load_package_manifest


    @hookimpl
    def antler_plugin_specs():
        return load_package_manifest(__package__)


    @hookimpl
    def antler_tools():
        from langchain_core.tools import tool

        @tool
        def globex_lookup(query: str) -> str:
            """Look a term up in Globex's catalogue."""
            return f"globex: {query}"

        return [globex_lookup]
'''

MIDDLEWARE = '''
    from langchain.agents.middleware import AgentMiddleware


    def nothing(self, state, runtime):
        return None


    async def anothing(self, state, runtime):
        return None


    class Plugin(AgentMiddleware):
        def __init__(self, context):
            super().__init__()


    class Greeter(Plugin):
        before_model, abefore_model = nothing, anothing


    class Partial(Greeter):
        pass


    class LateIntake(Plugin):
        before_agent, abefore_agent = nothing, anothing
'''

EXCLUDED_FOR_ORDER = ["globex_first", "globex_second", "globex_typo", "globex_wedge"]
REQUIRED = f"plugins:\n  {GLOBEX}: {{required: true}}\n"


@pytest.fixture
def globex(site):
    site.distribution(GLOBEX, files={
        "globex_antler/__init__.py": "",
        "globex_antler/plugin.py": PLUGIN,
        "globex_antler/middleware.py": MIDDLEWARE,
        "globex_antler/accelerator.py": "import globex_native  # a compiled extension\n",
        "globex_antler/plugin-manifest.yaml": MANIFEST,
    }, entry_points={"antler.plugins": {"globex": "globex_antler.plugin"}})
    return site


def antler(*args: Any, code: int = 0) -> Result:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def warnings(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


# -- antler chain show -----------------------------------------------------------------------


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_chain_show_reports_every_problem_and_keeps_the_good_plugins(globex, chain):
    report = json.loads(antler("chain", "show", "--chain", chain, "--json").stdout)

    names = [plugin["name"] for plugin in report["plugins"]]
    assert {"globex_greeter", "globex_partial", "input_provenance"} <= set(names)
    assert "globex_broken" in names  # planning imports no factory: run and check find it
    excluded = {row["name"]: row for row in report["excluded"]}
    for name in EXCLUDED_FOR_ORDER:
        assert (excluded[name]["kind"], excluded[name]["source"]) == ("broken", SOURCE), name
    problems = {tuple(row["plugins"]): row for row in report["problems"]}
    typo = problems[("globex_typo",)]
    assert typo["sources"] == [SOURCE]
    assert ("declares after: 'sumarization', but no installed plugin is named 'sumarization' "
            "(did you mean 'summarization'?)") in typo["message"]
    [cycle] = [row for key, row in problems.items() if "globex_wedge" in key]
    assert sorted(cycle["plugins"]) == ["globex_first", "globex_second", "globex_wedge"]
    assert cycle["sources"] == [SOURCE] * 3
    assert cycle["message"].startswith(f"ordering constraints form a cycle in the {chain} chain")
    assert "an immediately_* pair moves as one block" in cycle["message"]
    assert "globex_second declares immediately_after: globex_first" in cycle["message"]

    shown = antler("chain", "show", "--chain", chain)
    assert len(warnings(shown)) == len(report["problems"])
    assert (f"warning: optional plugin 'globex_typo' ({SOURCE}) is excluded from the {chain} "
            "chain: globex_typo [globex_antler/plugin-manifest.yaml:28 (distribution "
            f"{SOURCE}, entry point 'globex')] declares after: 'sumarization'") in shown.stderr
    [cycle_line] = [line for line in warnings(shown) if "'globex_wedge'" in line]
    assert cycle_line.startswith("warning: optional plugins ")
    assert (f"({SOURCE}) are excluded from the {chain} chain: ordering constraints form a "
            "cycle") in cycle_line
    assert all(f"'{name}'" in cycle_line for name in ("globex_first", "globex_second"))
    assert cycle["message"] in shown.stderr  # every hop, with where it was declared
    explained = antler("chain", "explain", "globex_typo", "--chain", chain).stdout
    assert explained.startswith(f"globex_typo is not in the {chain} chain: excluded as broken: ")


def test_chain_show_stops_on_a_required_distribution_listing_every_problem(globex, tmp_path):
    config = write(tmp_path, "antler.yaml", REQUIRED)

    result = antler("chain", "show", "--config", config, code=1)

    first, *rest = result.stderr.splitlines()
    assert first.startswith("error: the lead chain cannot be resolved: ")
    assert first.endswith(" problems with required plugins")
    assert "(did you mean 'summarization'?)" in result.stderr
    assert "ordering constraints form a cycle in the lead chain" in result.stderr
    assert rest  # each problem on its own lines


# -- antler config check ---------------------------------------------------------------------


def test_config_check_warns_about_every_optional_problem(globex, tmp_path):
    config = write(tmp_path, "antler.yaml", "title: {enabled: true}\n")

    result = antler("config", "check", config)

    assert result.stdout == f"ok: {config} is valid (1 section)\n"
    found = warnings(result)
    assert any("'globex_typo'" in line and "did you mean 'summarization'" in line
               for line in found)
    assert any("'globex_wedge'" in line and "form a cycle" in line for line in found)
    assert [line for line in found if "globex_broken" in line] == [
        "warning: optional plugin 'globex_broken' [globex_antler/plugin-manifest.yaml:32 "
        f"(distribution {SOURCE}, entry point 'globex')] will be left out: factory of plugin "
        "'globex_broken' 'globex_antler.accelerator:Accelerator': importing "
        "'globex_antler.accelerator' failed because it needs 'globex_native', which is not "
        "installed"]
    assert all(SOURCE in line or "globex_antler/plugin-manifest.yaml" in line
               for line in found)

    strict = json.loads(antler("config", "check", config, "--strict", "--json", code=1).stdout)
    assert strict["valid"] is False and strict["problems"] == []
    assert [text.splitlines()[0] for text in strict["warnings"]] == [
        line.removeprefix("warning: ") for line in found]
    untrusted = antler("config", "check", config, "--no-import")
    assert "globex_broken" not in untrusted.stderr
    assert "globex_native" not in untrusted.stderr


def test_config_check_of_a_required_distribution_lists_every_problem(globex, tmp_path):
    config = write(tmp_path, "antler.yaml", REQUIRED)

    report = json.loads(antler("config", "check", config, "--json", code=1).stdout)

    problems = [p["text"] for p in report["problems"]]
    [typo] = [p for p in problems if "did you mean 'summarization'" in p]
    assert typo.startswith(f"{config}: the lead chain cannot be planned (no runtime flags):\n")
    for chain in ("lead", "subagent"):
        assert any(f"ordering constraints form a cycle in the {chain} chain" in p
                   for p in problems)
    assert any("plugin 'globex_broken'" in p and "globex_native" in p for p in problems)
    text = antler("config", "check", config, code=1).stderr
    assert text.startswith(f"error: {config}: {len(problems)} problems:\n- ")


# -- antler run ------------------------------------------------------------------------------


def script(tmp_path: Path) -> Path:
    return write(tmp_path, "script.yaml", yaml.safe_dump([
        {"content": "", "tool_calls": [{"name": "globex_lookup", "args": {"query": "anvil"}}]},
        "Found it.",
    ]))


@pytest.mark.parametrize("fuse", ["--fuse", "--no-fuse"])
def test_run_leaves_the_offenders_out_and_runs_the_good_plugins(globex, tmp_path, fuse):
    result = antler("run", "look up anvil", "--model", f"scripted:{script(tmp_path)}",
                    "--home", tmp_path / "home", "--trace", fuse)

    assert result.stdout.strip() == "Found it."
    assert "<- globex_lookup: globex: anvil" in result.stderr  # its tool, through its hook
    assert "globex_greeter.before_model" in result.stderr  # its middleware ran
    assert "globex_partial.before_model" in result.stderr
    for name in [*EXCLUDED_FOR_ORDER, "globex_broken"]:
        assert f"{name}.before_model" not in result.stderr
    found = warnings(result)
    assert any(line.startswith(f"warning: optional plugin 'globex_broken' ({SOURCE}) is "
                               "excluded from the lead chain: factory of plugin "
                               "'globex_broken'") for line in found)
    assert any("'globex_typo'" in line for line in found)
    assert any("'globex_wedge'" in line for line in found)


def test_run_stops_on_a_required_distribution_without_a_traceback(globex, tmp_path):
    config = write(tmp_path, "antler.yaml", REQUIRED)

    result = antler("run", "hi", "--config", config, "--model",
                    f"scripted:{script(tmp_path)}", "--home", tmp_path / "home", code=1)

    assert result.stderr.startswith("error: the lead chain cannot be resolved: ")
    assert "(did you mean 'summarization'?)" in result.stderr
    assert "ordering constraints form a cycle in the lead chain" in result.stderr


# -- switching the distribution off ----------------------------------------------------------


def test_operator_switches_the_distribution_or_one_plugin_off(globex, tmp_path):
    whole = write(tmp_path, "off.yaml", f"plugins:\n  {GLOBEX}: {{enabled: false}}\n")
    report = json.loads(antler("chain", "show", "--config", whole, "--json").stdout)
    assert report["problems"] == []
    assert not [p for p in report["plugins"] if p["name"].startswith("globex_")]
    off = {row["name"]: row for row in report["excluded"] if row["name"].startswith("globex_")}
    assert len(off) == 8 and {row["kind"] for row in off.values()} == {"disabled"}
    assert off["globex_typo"]["reason"] == (
        f"switched off by config ({whole}:2:19: plugins.{GLOBEX}.enabled)")
    ran = antler("run", "hi", "--config", whole, "--model",
                 f"scripted:{write(tmp_path, 's.yaml', yaml.safe_dump(['Hello.']))}",
                 "--home", tmp_path / "home")
    assert ran.stdout.strip() == "Hello." and warnings(ran) == []

    one = write(tmp_path, "one.yaml", "plugins:\n  globex_typo: {enabled: false}\n")
    report = json.loads(antler("chain", "show", "--config", one, "--json").stdout)
    assert [row["plugins"] for row in report["problems"]] != [] and all(
        "globex_typo" not in row["plugins"] for row in report["problems"])
    shown = antler("chain", "show", "--config", one).stdout
    assert f"switched off by config ({one}:2:17: plugins.globex_typo.enabled)" in shown


# -- the hook-level invariant of input_provenance --------------------------------------------


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_a_before_agent_hook_cannot_slip_past_input_provenance(globex, chain):
    """Provenance records what every before_agent hook left: a plugin asking to run its
    before_agent hook later is either left out with the problem shown, or placed before."""
    report = json.loads(antler("chain", "show", "--chain", chain, "--json").stdout)

    order = [plugin["name"] for plugin in report["plugins"]]
    if "globex_late_intake" in order:
        assert order.index("globex_late_intake") < order.index("input_provenance")
    else:
        excluded = {row["name"]: row for row in report["excluded"]}
        assert excluded["globex_late_intake"]["kind"] == "broken"
        [problem] = [row for row in report["problems"] if "globex_late_intake" in row["plugins"]]
        assert "input_provenance" in problem["message"]
        assert problem["sources"] == [SOURCE]
