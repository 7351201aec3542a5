"""Skill activation: ``/skill-name task...`` loads the skill's instructions for this run.

The user starts a message with a slash command naming an installed skill
(``/data-report summarize uploads``). The model then gets the skill's
`SKILL.md` body as hidden context next to that message, for every model call
of the run, and the rest of the message as the task.

Hooks: `wrap_model_call` (and `awrap_model_call`), request only; nothing is
written to the conversation.

* Only the latest genuine user message is read, from its original text
  (`antler.contracts.messages.user_text`, not input_sanitization's wrapped
  form). It activates a skill when it starts with ``/name`` (lowercase words
  joined by ``-``) followed by a space or the end; the reserved command
  names (bootstrap, goal, help, memory, models, new, status) are left alone.
* An unknown or disabled skill, or skills that cannot be loaded, get a
  direct reply saying so; the model is not called.
* An activation inserts one hidden `HumanMessage` just before the user's
  message, holding the escaped skill body, its name, category, path and
  sha256, and the remaining task (or a prompt to ask the user for it). The
  skill file is read and the activation audited (logger
  ``antler.audit.skills``, event ``middleware:skill_activation``) once per
  slash message and run; later model calls of the run reuse the same
  message, also once summarization has folded the slash message into its
  summary. The activation is recorded only after
  the model answered, so a retried model call still carries it and a
  failed one is not audited as done.

Where it sits: after dynamic_context (lead), among the guards, immediately
before skill_tool_policy, which reads the activation from the request. The
activation message carries a proof under the chain's secret
(`antler.plugins._lib.skillproof`), so a forged one is not trusted.

Configuration: none of its own; the skills come from the platform's
``skills:`` section (see `antler.runtime.skills`).

Example: with ``skills/custom/data-report/SKILL.md`` installed, the message
``/data-report summarize uploads`` runs the model with that skill's
instructions and the task "summarize uploads".
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage

from antler.plugin_api import (
    BuildContext,
    RunStore,
    SkillError,
    SourceLimitError,
    acall_then_commit,
    call_then_commit,
    hidden_marker,
    is_hidden,
    latest_user_message,
    parse_skill,
    run_context,
    run_key_of,
    user_text,
)
from antler.plugins._lib.requestcopy import overridden
from antler.plugins._lib.skillproof import (
    ACTIVATION_KEY,
    SECRET_NAME,
    activation_proof,
    skills_registry,
)

# The header of every plugin module (SDK imports, `__all__`, logger, names): alike
# in shape across plugins, by layout, with no logic to share.
__all__ = ["ACTIVATION_KEY", "AUDIT_LOGGER", "SkillActivationMiddleware", "build", "parse_slash"]

SOURCE = "skill_activation"
AUDIT_LOGGER = "antler.audit.skills"
AUDIT_EVENT = "middleware:skill_activation"
"""The `event` of the activation's audit record."""
RESERVED = frozenset({"bootstrap", "goal", "help", "memory", "models", "new", "status"})
_SLASH = re.compile(r"^/([a-z0-9]+(?:-[a-z0-9]+)*)(?:\s+|$)")

logger = logging.getLogger(AUDIT_LOGGER)


def parse_slash(text: str) -> tuple[str, str] | None:
    """(skill name, task) of a slash activation, or None when `text` is none."""
    match = _SLASH.match(text.lstrip())
    if match is None or match.group(1) in RESERVED:
        return None
    return match.group(1), text.lstrip()[match.end():].strip()


@dataclass(frozen=True)
class _Activation:
    target: str | None
    note: HumanMessage


class SkillActivationMiddleware(AgentMiddleware[Any, Any]):
    """Loads a slash-activated skill's instructions as hidden context for the run."""

    # The registry and the proof secret, as skill_tool_policy holds them: this plugin
    # signs the activations that one checks (`_lib.skillproof`).
    def __init__(self, registry: Any, token: str = "") -> None:
        super().__init__()
        self.registry = registry
        self.token = token
        self._done: RunStore[_Activation] = RunStore()

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        decision = self._decide(request)
        if decision is None:
            return handler(request)
        if isinstance(decision, AIMessage):
            return decision
        activated, fresh = decision
        return call_then_commit(handler, activated, fresh)

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
                               ) -> Any:
        decision = self._decide(request)
        if decision is None:
            return await handler(request)
        if isinstance(decision, AIMessage):
            return decision
        activated, fresh = decision
        return await acall_then_commit(handler, activated, fresh)

    def _decide(self, request: ModelRequest,
                ) -> AIMessage | tuple[ModelRequest, Callable[[], None]] | None:
        """None (no slash message), a direct reply, or (request with the skill, commit)."""
        target = latest_user_message(request.messages)
        # Most runs activate nothing: with no activation on record, no run key is needed.
        key = run_key_of(request.runtime) if len(self._done) else None
        done = self._done.get(key) if key is not None else None
        if done is not None and (target is None or done.target == target.id):
            # Activated earlier in this run; summarization may have folded the
            # slash message into its summary since, and the skill still applies.
            return _with_note(request, target, done.note), lambda: None
        parsed = parse_slash(user_text(target)) if target is not None else None
        if target is None or parsed is None:
            return None
        name, task = parsed
        try:
            skill = self.registry.get(name)
        except Exception as exc:
            logger.warning("skills could not be loaded: %s", exc)
            return _reply(f"Skill `/{name}` cannot be used right now: the installed skills "
                          "could not be loaded.")
        if skill is None:
            names = ", ".join(f"/{s.name}" for s in self.registry.enabled()) or "none"
            return _reply(f"Skill `/{name}` is not installed. Installed skills: {names}.")
        if not skill.enabled:
            return _reply(f"Skill `/{name}` is disabled by the operator.")
        try:
            text = self.registry.read_text(skill.file)
            _, body = parse_skill(text)
        except (SourceLimitError, SkillError) as exc:
            logger.warning("skill %s cannot be read: %s", skill.name, exc)
            return _reply(f"Skill `/{name}` cannot be read; ask the operator to check it.")
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        proof = activation_proof(self.token, run_context(request.runtime).run_id, skill.name,
                                 target.id)
        note = _activation_note(skill, body, task, digest, target.id, proof)
        activation = _Activation(target.id, note)

        def commit() -> None:
            self._done.set(run_key_of(request.runtime) if key is None else key, activation)
            context = run_context(request.runtime)
            record = {"event": AUDIT_EVENT, "skill": skill.name, "category": skill.category,
                      "path": skill.container_path, "sha256": digest,
                      "thread": context.thread_id, "run": context.run_id}
            logger.info("skill activated: %s (%s)", skill.name, skill.container_path,
                        extra={ACTIVATION_KEY: record})

        return _with_note(request, target, note), commit


def _reply(text: str) -> AIMessage:
    return AIMessage(content=text, additional_kwargs={ACTIVATION_KEY: {"refused": True}})


def _activation_note(skill: Any, body: str, task: str, digest: str,
                     target: str | None, proof: str) -> HumanMessage:
    body = html.escape(body, quote=False)
    request = html.escape(task, quote=False) if task else (
        "The user activated the skill without a task: ask what they want done with it.")
    attributes = " ".join(f'{k}="{html.escape(str(v))}"' for k, v in (
        ("name", skill.name), ("category", skill.category), ("path", skill.container_path),
        ("sha256", digest)))
    content = (f"<slash_skill_activation>\nThe user activated the skill `/{skill.name}` for "
               f"this request. Follow its instructions.\n<skill {attributes}>\n<skill_content>\n"
               f"{body}\n</skill_content>\n</skill>\n<user_request>{request}</user_request>\n"
               "</slash_skill_activation>")
    kwargs = hidden_marker(SOURCE) | {ACTIVATION_KEY: {"skill": skill.name, "target": target,
                                                       "sha256": digest, "proof": proof}}
    return HumanMessage(content=content, id=f"{target}__slash_activation", name=SOURCE,
                        additional_kwargs=kwargs)


def _with_note(request: ModelRequest, target: Any, note: HumanMessage) -> ModelRequest:
    """`request` with `note` just before `target` (gone: after the leading summary, if any)."""
    messages = list(request.messages)
    if target is not None:
        index = next(i for i, m in enumerate(messages) if m is target)
    else:
        index = next((i for i, m in enumerate(messages) if not is_hidden(m)), len(messages))
    return overridden(request, messages=[*messages[:index], note, *messages[index:]])


def build(ctx: BuildContext) -> SkillActivationMiddleware:
    """The middleware on the build's `skills` registry service and the chain's skill secret."""
    return SkillActivationMiddleware(skills_registry(ctx), ctx.secrets.token(SECRET_NAME))
