"""Tool groups: the sandbox's tools by what they do, and group names usable in tool lists.

The sandbox plugin contributes seven tools. Plugins that reason about them
(which tools only read, which write a file, which may read a skill's own
files) take the sets from here rather than each keeping its own list, so a
new file tool is known everywhere at once:

========================  =================================================
group                     tools
========================  =================================================
``file:read``             ``ls``, ``read_file``, ``glob``, ``grep``
``file:write``            ``write_file``, ``str_replace``
``bash``                  ``bash``
========================  =================================================

A tool list an operator writes (authorization roles, the guardrail allowlist,
a skill's ``allowed-tools``) may name a group; `expand` replaces it by its
tools. ``bash`` is a tool and a group of one, so it means the same either way.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "BASH",
    "FILE_READ",
    "FILE_READ_TOOLS",
    "FILE_WRITE",
    "FILE_WRITE_TOOLS",
    "SANDBOX_TOOLS",
    "TOOL_GROUPS",
    "expand",
]

FILE_READ = "file:read"
FILE_WRITE = "file:write"
BASH = "bash"

FILE_READ_TOOLS = ("ls", "read_file", "glob", "grep")
"""The sandbox tools that only read the thread's files (and the skills)."""
FILE_WRITE_TOOLS = ("write_file", "str_replace")
"""The sandbox tools that write a file."""
SANDBOX_TOOLS = (BASH, *FILE_READ_TOOLS, *FILE_WRITE_TOOLS)

TOOL_GROUPS: dict[str, tuple[str, ...]] = {
    FILE_READ: FILE_READ_TOOLS,
    FILE_WRITE: FILE_WRITE_TOOLS,
    BASH: (BASH,),
}
"""Group name -> its tools."""


def expand(names: Iterable[str]) -> list[str]:
    """``names`` with each group name replaced by its tools (order kept, no duplicates)."""
    out: list[str] = []
    for name in names:
        for tool in TOOL_GROUPS.get(name, (name,)):
            if tool not in out:
                out.append(tool)
    return out
