"""`antler skills ...`: the installed skills, their state, and the files that failed to load."""

from __future__ import annotations

import click

from antler.plugin_api.commands import config_option, json_option

from . import AntlerGroup
from .output import console, print_json, table
from .session import Session, manifest_option, pass_session


# Each command group declares itself as `mcp` and `plugins` do: the decorators are its
# interface, not shared logic.
@click.group(cls=AntlerGroup)
def skills() -> None:
    """The skills the `skills:` section of the config installs."""


@skills.command("list")
@manifest_option
@config_option
@json_option
@pass_session
def list_skills(session: Session, config_path: str | None, as_json: bool) -> None:
    """Every installed skill, and every SKILL.md that could not be loaded.

    \b
    JSON (--json): {"skills": [...], "problems": [...]}, each skill with
      name, description, category, enabled, allowed_tools (null: no
      restriction), path (as the sandbox shows it), file (on the host);
    each problem with file, line and message.
    """
    from antler.runtime.skills import SkillsRegistry

    registry = SkillsRegistry.from_settings(session.config(config_path).skills)
    rows = [skill.summary() for skill in registry.skills()]
    problems = [{"file": str(p.file), "line": p.line, "message": p.message}
                for p in registry.problems()]
    if as_json:
        print_json({"skills": rows, "problems": problems})
        return
    from rich.text import Text

    out = console()
    listing = table("skill", "category", "enabled", "allowed tools", "description")
    listing.columns[0].no_wrap = True
    for row in rows:
        tools = "any" if row["allowed_tools"] is None else ", ".join(row["allowed_tools"]) or "-"
        listing.add_row(Text(f"/{row['name']}", style="bold"), Text(row["category"]),
                        Text("yes" if row["enabled"] else "no"), Text(tools),
                        Text(row["description"]))
    out.print(listing)
    roots = ", ".join(str(root) for root in registry.roots)
    out.print(Text(f"{len(rows)} skill{'s' * (len(rows) != 1)} from {roots}", style="dim"))
    for problem in registry.problems():
        out.print(Text(f"skipped: {problem}", style="yellow"))
