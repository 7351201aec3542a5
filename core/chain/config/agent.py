"""The sections about the agent itself: `chain`, `tools`, `skills`, `input`, `agent`, `server`.

How its chains are compiled, which tools the operator adds, where its skills
are, what a caller may send, how many model calls one run may make, and how
LangGraph Server serves it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from antler.errors import ReflectionError
from antler.plugin_api.reflection import split_path
from antler.plugin_api.spec import Chain

__all__ = ["DEFAULT_SKILL_FILE_BYTES", "AgentSettings", "ChainSettings", "InputSettings",
           "MessageRole", "ServerSettings", "SkillsSettings", "ToolEntry"]


def _lead_chain() -> list[Chain]:
    return ["lead"]


class ChainSettings(BaseModel):
    """`chain:` — how chains are compiled."""

    model_config = ConfigDict(extra="forbid")

    fuse: bool = Field(True, description="Fuse consecutive node hooks into one graph node.")
    fuse_into_model: bool = Field(
        True, description="With fuse: also run the before_model and after_model hooks inside "
        "the model node, so a model call costs one graph step (see docs/compiler.md).")


class ToolEntry(BaseModel):
    """One `tools:` entry: a LangChain tool the operator adds to the agent."""

    model_config = ConfigDict(extra="forbid")

    use: str = Field(
        description="'module:attr' of a LangChain tool (a BaseTool, such as a function "
        "decorated with @tool) or of a factory that returns one or a list of them.")
    chains: list[Chain] = Field(
        default_factory=_lead_chain, description="Chains whose agent gets the tool(s).")
    config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the factory (a tool object "
        "takes none).")

    @field_validator("use")
    @classmethod
    def _a_path(cls, value: str) -> str:
        try:
            split_path(value, "tool")
        except ReflectionError as exc:
            raise ValueError(str(exc)) from None
        return value


class ServerSettings(BaseModel):
    """`server:` — the lead agent as LangGraph Server serves it (`antler.server`)."""

    model_config = ConfigDict(extra="forbid")

    trust_client_identity: bool = Field(
        False, description="Let a run's `context` set user_id, roles, is_internal and "
        "attributes. Only behind a front end that authenticates users itself: by default "
        "the identity is the user the server's auth handler authenticated.",
    )
    plan_mode: bool = Field(False, description="Serve the agent in plan mode (todo list).")
    subagents: bool = Field(False, description="The served agent may delegate with `task`.")
    agent_name: str | None = Field(None, description="The served agent's name.")


DEFAULT_SKILL_FILE_BYTES = 256 * 1024
"""Size limit of one SKILL.md unless `skills.max_file_bytes` says otherwise."""


class SkillsSettings(BaseModel):
    """`skills:` — where the operator's `SKILL.md` files are and which are turned off."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(
        default_factory=lambda: ["skills"],
        description="Skill roots, each holding <category>/<name>/SKILL.md (relative paths "
        "are taken from the working directory).")
    disabled: list[str] = Field(
        default_factory=list, description="Names of installed skills to turn off.")
    max_file_bytes: int = Field(
        default=DEFAULT_SKILL_FILE_BYTES, gt=0,
        description="A SKILL.md larger than this is skipped with its file (read no further).")


MessageRole = Literal["human", "ai", "tool", "system"]


def _human_only() -> list[MessageRole]:
    return ["human"]


class InputSettings(BaseModel):
    """`input:` — what a caller may put in a run's input (see README, "Caller input")."""

    model_config = ConfigDict(extra="forbid")

    allow_roles: list[MessageRole] = Field(
        default_factory=_human_only, min_length=1,
        description="Message roles a caller may send. Human only by default: an assistant "
        "reply, a tool result or a system message in caller input could forge history.")


class AgentSettings(BaseModel):
    """`agent:` — limits of one run of an agent (the lead's, and each subagent task's)."""

    model_config = ConfigDict(extra="forbid")

    max_model_calls: int = Field(
        50, ge=1, description="Model calls one run may make. The graph's step limit is "
        "derived from it and the chain's shape; a run that needs more stops with a "
        "ModelCallBudgetError naming this setting.")
    plugin_time_budget: float | None = Field(
        120.0, gt=0, description="Seconds one call of a third-party plugin's hook may take "
        "(a wrap hook's handler not counted): an async hook is cancelled at the budget, a "
        "sync one fails once it returns; either way the failure is handled under the "
        "plugin's `on_error` (HookTimeError). null: no budget. Per plugin: "
        "`plugins.<name>.time_budget`.")
    plugin_output_limit: int | None = Field(
        16 * 2**20, ge=1, description="Text characters plus items one call of a third-party "
        "plugin's hook may return (its update, or a wrap hook's own result), nested at most "
        "100 deep; more fails the hook under its `on_error` (HookOutputError). null: no "
        "limit. Per plugin: `plugins.<name>.output_limit`.")
