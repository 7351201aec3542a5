"""`mcp_servers:` — the MCP servers whose tools the agent gets, and their routing."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator

__all__ = ["McpRouting", "McpServerSettings", "McpServersSection", "McpToolSettings"]


class McpRouting(BaseModel):
    """`routing:` of an MCP server or tool: when mcp_routing promotes its tools unasked."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["off", "prefer"] = Field(
        "off", description="'prefer': with tool_search on, the tools are promoted before a "
        "model call when the user's message contains one of `keywords`.")
    priority: int = Field(
        50, description="Rank among matching tools, higher first (clamped to 0-100).")
    keywords: list[str] = Field(
        default_factory=list, description="Words or phrases matched case-insensitively as "
        "substrings of the user's message (any script).")

    @field_validator("priority")
    @classmethod
    def _clamp(cls, value: int) -> int:
        return max(0, min(100, value))

    @field_validator("keywords")
    @classmethod
    def _keywords(cls, value: list[str]) -> list[str]:
        return [word.strip() for word in value if word.strip()]


class McpToolSettings(BaseModel):
    """`mcp_servers.<name>.tools.<tool>:` settings of one tool of a server."""

    model_config = ConfigDict(extra="forbid")

    routing: McpRouting | None = Field(None, description="Overrides the server's routing.")


class McpServerSettings(BaseModel):
    """One MCP server: a command started over stdio, or a streamable-HTTP `url`."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(None, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict, description="stdio: extra environment variables; `${VAR}` "
        "takes VAR from Antler's environment (secrets stay out of the file).")
    cwd: str | None = Field(None, description="stdio: working directory of the server.")
    url: str | None = Field(None, description="Streamable HTTP: the endpoint URL.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Streamable HTTP: request headers (`${VAR}` works).")
    enabled: bool = Field(True, description="false: the server is not started.")
    required: bool = Field(
        False, description="true: an agent is not built when this server fails to start "
        "(otherwise a warning names it and its tools are absent).")
    tool_name_prefix: str | None = Field(
        None, description="Prepended to each of the server's tool names (avoids clashes).")
    start_timeout: float = Field(
        30.0, gt=0, description="Seconds the server may take to start and list its tools.")
    call_timeout: float = Field(
        60.0, gt=0, description="Seconds one tool call may take before it fails.")
    routing: McpRouting = Field(default_factory=McpRouting,
                                description="Auto-promotion of the server's tools.")
    tools: dict[str, McpToolSettings] = Field(
        default_factory=dict, description="Per-tool settings, by the server's tool name "
        "(with or without `tool_name_prefix`).")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (a stdio server) or `url` (a "
                             "streamable-HTTP server)")
        if self.command is not None and self.headers:
            raise ValueError("`headers` are for a `url` server; a stdio server takes `env`")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("`args`, `env` and `cwd` are for a `command` server")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable_http"

    def routing_for(self, tool: str) -> McpRouting:
        """The routing of the server's tool `tool` (its own, else the server's)."""
        own = self.tools.get(tool)
        if own is None and self.tool_name_prefix:  # keyed by the name `mcp list` shows
            own = self.tools.get(f"{self.tool_name_prefix}{tool}")
        return own.routing if own is not None and own.routing is not None else self.routing

    @property
    def routes_by_keywords(self) -> bool:
        """Whether the server or one of its tools prefers routing by keywords."""
        routings = [self.routing, *(t.routing for t in self.tools.values() if t.routing)]
        return self.enabled and any(r.mode == "prefer" and r.keywords for r in routings)


class McpServersSection(RootModel[dict[str, McpServerSettings]]):
    """`mcp_servers:` — MCP servers whose tools the agent gets, keyed by a name of your choice."""

    @model_validator(mode="before")
    @classmethod
    def _string_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for name in value:
                if not isinstance(name, str):
                    raise ValueError(f"server name {name!r} is not text (YAML reads off, on, "
                                     "yes, no and numbers as other types): quote it")
        return value

    @field_validator("root")
    @classmethod
    def _names(cls, value: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"server name {name!r} may hold only letters, digits, '_', "
                                 "'.' and '-', starting with a letter or digit")
        return value
