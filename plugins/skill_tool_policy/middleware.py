"""Skill tool policy: an activated skill's `allowed-tools` bound what the model may use.

A skill that declares ``allowed-tools`` (say ``[read_file, ls]``) states the
tools its instructions need. Once the user activated it with ``/name``, the
run uses only those, plus the framework-safe ones: ``ask_clarification``, and
the read-only file tools (``read_file``, ``ls``, ``glob``, ``grep``: the
``file:read`` group) called on a path under ``/mnt/skills``, so a skill can
always read its own files. ``allowed-tools`` may name a tool group
(``file:read``, ``file:write``, ``bash``; `antler.contracts.toolgroups`).
Without a slash activation, the skills the agent loaded itself by reading their
``SKILL.md`` (durable_context's ``skill_context`` record) set the policy
instead: the union of their ``allowed-tools`` (docs/chain.md#skill_tool_policy). A skill without
the field adds nothing once another declares it; when none declares it, nothing
is restricted. A slash activation is authoritative: reading another skill in
that run cannot widen it. ``task`` is not exempt, so a restricted skill cannot
delegate around its policy. Authorization (`antler_select_tools`) decides which
tools exist for the caller; this policy only narrows that further for the run,
never widens it.

Hooks:

* `wrap_model_call` (and async): reads the activation from the request, where
  skill_activation put it, and trusts it only with a valid proof under the
  chain's secret (`antler.plugins._lib.skillproof`): a caller cannot forge
  one. Without one, it reads the ``skill_context`` paths from state (a
  private channel a caller cannot set). Skills are looked up in the live
  registry on every call (the read ones by their ``SKILL.md`` path; a path
  no enabled skill has any more is skipped). No activation and nothing read:
  nothing changes. No ``allowed-tools``: no restriction. Otherwise the
  request's tool schemas are filtered and the decision is kept for the run's
  tool calls. An unknown or disabled activated skill, read skills none of
  which is still enabled, or a registry that cannot load, fail closed to the
  framework-safe tools.
* `wrap_tool_call` (and async): a call outside the run's decision is refused
  with an error result (``antler_tool_meta``: ``denied``, recoverable) naming
  the tools the skill allows; the tool never runs. ``tool_search`` is
  framework-safe, but runs inside `limit_discovery`: it neither returns nor
  promotes a deferred tool the skill does not allow.

Where it sits: immediately after skill_activation (it reads the activation
that wrapper adds to the request) and immediately before durable_context
(docs/chain.md#skill_tool_policy).

Configuration: none; skills declare their own ``allowed-tools``.

Example: with ``allowed-tools: [read_file, ls]``, ``/data-report summarize``
shows the model ``read_file``, ``ls``, ``glob``, ``grep`` (for the skills
only) and ``ask_clarification``, and a ``bash`` call is refused, as is a
``grep`` of ``/mnt/user-data``; so does a plain request after which the agent
read ``/mnt/skills/public/data-report/SKILL.md``, from the next model call on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import ToolMessage

from antler.plugin_api import (
    FILE_READ_TOOLS,
    SKILL_CONTEXT_KEY,
    SKILLS_VIRTUAL_ROOT,
    TOOL_META_KEY,
    TOOL_SEARCH,
    BuildContext,
    DurableState,
    RunStore,
    expand_tool_groups,
    limit_discovery,
    refusal,
    run_context,
    run_key_of,
)
from antler.plugins._lib.requestcopy import overridden
from antler.plugins._lib.skillproof import SECRET_NAME, proven_activation, skills_registry

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["FRAMEWORK_TOOLS", "SkillToolPolicyMiddleware", "build"]

logger = logging.getLogger(__name__)

SOURCE = "skill_tool_policy"
FRAMEWORK_TOOLS = frozenset({"ask_clarification", TOOL_SEARCH})
"""Tools every policy allows; the `SKILL_READERS` on a skill's files are allowed too."""
SKILL_READERS = frozenset(FILE_READ_TOOLS)
"""Tools allowed on a path under ``/mnt/skills`` (read-only there) whatever the policy."""


class _Source(NamedTuple):
    """Who set a run's policy: a slash activation or the skills the agent read."""

    label: str
    """As the refusal names it: ``/name`` or ``the skills read (a, b)``."""
    skills: tuple[str, ...]


_Decision = tuple[_Source, frozenset[str]]


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        return str((function or {}).get("name") if isinstance(function, Mapping)
                   else tool.get("name"))
    return str(getattr(tool, "name", ""))


class SkillToolPolicyMiddleware(AgentMiddleware[Any, Any]):
    """Narrows the run's tools to the active skills' `allowed-tools`."""

    state_schema = DurableState  # reads `skill_context`

    def __init__(self, registry: Any, token: str) -> None:
        super().__init__()
        self.registry = registry
        self.token = token
        self._decisions: RunStore[_Decision] = RunStore()
        """Per run: who set the policy, and the tools it allows."""

    # -- the model's tools --------------------------------------------------------------

    # The sync and async hooks share one implementation: the filtered request, with no I/O
    # to await (LangChain calls one or the other by how the agent is run).

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        return handler(self._filtered(request))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
                               ) -> Any:
        return await handler(self._filtered(request))

    def _filtered(self, request: ModelRequest) -> ModelRequest:
        skill = proven_activation(request.messages, self.token,
                                  lambda: run_context(request.runtime).run_id)
        if skill is not None:
            source, allowed = _Source(f"/{skill}", (skill,)), self._allowed(skill)
        else:
            paths = _read_skill_paths(request.state)
            source, allowed = (self._allowed_by_reads(paths) if paths
                               else (_Source("", ()), None))
        if allowed is None:
            if len(self._decisions):  # none kept for any run: nothing to drop
                self._decisions.pop(run_key_of(request.runtime))
            return request
        self._decisions.set(run_key_of(request.runtime), (source, allowed))
        tools = [t for t in request.tools if _tool_name(t) in allowed
                 or _tool_name(t) in SKILL_READERS]
        return overridden(request, tools=tools)

    def _allowed(self, name: str) -> frozenset[str] | None:
        """The tools `name` allows (None: no restriction); framework tools only on failure."""
        try:
            skill = self.registry.get(name)
        except Exception as exc:
            logger.warning("skill_tool_policy: the skills cannot be loaded (%s); only framework "
                           "tools are allowed", exc)
            return FRAMEWORK_TOOLS
        if skill is None or not skill.enabled:
            return FRAMEWORK_TOOLS
        if skill.allowed_tools is None:
            return None
        return FRAMEWORK_TOOLS | frozenset(expand_tool_groups(skill.allowed_tools))

    def _allowed_by_reads(self, paths: list[str]) -> tuple[_Source, frozenset[str] | None]:
        """(source, allowed tools) for the skills read at `paths`: the union of their policies.

        A path no enabled skill has any more is skipped; none left, or a registry
        that cannot load, allows the framework tools only.
        """
        try:
            by_path = {skill.container_path: skill for skill in self.registry.skills()}
        except Exception as exc:
            logger.warning("skill_tool_policy: the skills cannot be loaded (%s); only framework "
                           "tools are allowed", exc)
            return _Source("the skills read", ()), FRAMEWORK_TOOLS
        active = [by_path[path] for path in paths
                  if path in by_path and by_path[path].enabled]
        if not active:
            return _Source("the skills read", ()), FRAMEWORK_TOOLS
        names = tuple(skill.name for skill in active)
        source = _Source(f"the skills read ({', '.join(names)})", names)
        declared = [skill.allowed_tools for skill in active if skill.allowed_tools is not None]
        if not declared:
            return source, None
        return source, FRAMEWORK_TOOLS.union(*declared)

    # -- the model's calls --------------------------------------------------------------

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        decision = self._decision(request)
        if decision is None:
            return handler(request)
        refused = self._refusal(request, decision)
        if refused is not None:
            return refused
        with limit_discovery(decision[1]):
            return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]],
                              ) -> Any:
        decision = self._decision(request)
        if decision is None:
            return await handler(request)
        refused = self._refusal(request, decision)
        if refused is not None:
            return refused
        with limit_discovery(decision[1]):
            return await handler(request)

    def _decision(self, request: Any) -> _Decision | None:
        """This run's policy (skill, allowed tools), or None when no skill restricts it.

        Under a policy, tool_search finds and promotes only the skill's tools
        (`limit_discovery`).
        """
        if not len(self._decisions):  # no run has a policy: no run key to look up
            return None
        return self._decisions.get(run_key_of(request.runtime))

    def _refusal(self, request: Any, decision: _Decision) -> ToolMessage | None:
        source, allowed = decision
        call = request.tool_call
        tool = str(call.get("name") or "")
        if tool in allowed or (tool in SKILL_READERS and _reads_a_skill(call.get("args"))):
            return None
        names = ", ".join(sorted(allowed))
        logger.info("skill_tool_policy refused %s: not allowed by %s", tool, source.label)
        verb = "allows" if len(source.skills) == 1 else "allow"
        return ToolMessage(
            content=f"Error: {tool} is not allowed by the active skill policy ({source.label} "
                    f"{verb} {names}). Use one of those tools.",
            tool_call_id=str(call.get("id") or ""), name=tool, status="error",
            additional_kwargs={TOOL_META_KEY: refusal(
                "denied", SOURCE, skill=", ".join(source.skills), allowed=sorted(allowed))})


def _read_skill_paths(state: Any) -> list[str]:
    """The `SKILL.md` paths durable_context recorded as read in this thread."""
    entries = state.get(SKILL_CONTEXT_KEY) if isinstance(state, Mapping) else None
    if not isinstance(entries, list):
        return []
    return [entry["path"] for entry in entries
            if isinstance(entry, Mapping) and isinstance(entry.get("path"), str)]


def _reads_a_skill(args: Any) -> bool:
    path = args.get("path") if isinstance(args, Mapping) else None
    return isinstance(path, str) and (path == SKILLS_VIRTUAL_ROOT or path.startswith(
        SKILLS_VIRTUAL_ROOT + "/")) and ".." not in path.split("/")


def build(ctx: BuildContext) -> SkillToolPolicyMiddleware:
    """The middleware on the `skills` registry service and the chain's skill secret."""
    return SkillToolPolicyMiddleware(skills_registry(ctx), ctx.secrets.token(SECRET_NAME))
