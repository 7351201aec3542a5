"""How skill_activation tells skill_tool_policy which skill the user activated.

The activation travels on the request, as the hidden activation message's
``additional_kwargs["skill_activation"]``. A caller could put the same key on
a message of its own, so the activation carries a proof: an HMAC of the run,
the skill and the target message under a token only the chain's two plugins
know (`BuildContext.secrets.token(SECRET_NAME)`). The policy trusts an
activation only with a valid proof.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.messages import HumanMessage

from antler.plugin_api import SKILLS, SKILLS_LOADER, is_hidden

ACTIVATION_KEY = "skill_activation"
"""`additional_kwargs` key of the activation message: ``{"skill", "target", "proof", ...}``."""
SECRET_NAME = "skill_activation"
"""The chain secret both plugins ask for."""


def skills_registry(ctx: Any) -> Any:
    """The build's `skills` service, or a registry from the config's `skills:` section."""
    registry = ctx.services.items.get(SKILLS)
    if registry is None:
        load = ctx.services.get(SKILLS_LOADER)
        registry = load(getattr(ctx.operator_config, "skills", None))
        ctx.services.items[SKILLS] = registry
    return registry


def activation_proof(token: str, run_id: str | None, skill: str, target: str | None) -> str:
    """The proof binding an activation of `skill` on message `target` to the run and chain."""
    payload = f"{run_id}\x1f{skill}\x1f{target}".encode()
    return hmac.new(token.encode(), payload, hashlib.sha256).hexdigest()


def proven_activation(messages: Sequence[Any], token: str,
                      run_id: str | Callable[[], str | None] | None) -> str | None:
    """The skill a message of `messages` proves activated in this run (None: none).

    A valid proof is made only by skill_activation, for this run, on the note
    it puts right before the latest genuine user message, or among the hidden
    messages that lead the request when that message is gone; so only those
    places are read (`_where_notes_go`), never the whole history. `run_id` may
    be a function giving it, called only when a message claims an activation
    (most requests hold none).
    """
    for message in _where_notes_go(messages):
        record = (getattr(message, "additional_kwargs", None) or {}).get(ACTIVATION_KEY)
        if not isinstance(record, dict) or not isinstance(record.get("skill"), str):
            continue
        if callable(run_id):
            run_id = run_id()
        expected = activation_proof(token, run_id, record["skill"], record.get("target"))
        if hmac.compare_digest(str(record.get("proof", "")), expected):
            return record["skill"]
    return None


def _where_notes_go(messages: Sequence[Any]) -> Iterator[Any]:
    """From the end back through the latest genuine user message and the hidden messages
    just before it; then the leading hidden messages, last first."""
    end = len(messages)
    passed_user = False
    while end:
        message = messages[end - 1]
        if passed_user and not is_hidden(message):
            break
        yield message
        end -= 1
        passed_user = passed_user or (isinstance(message, HumanMessage)
                                      and not is_hidden(message))
    lead = 0
    while lead < end and is_hidden(messages[lead]):
        lead += 1
    for index in range(lead - 1, -1, -1):
        yield messages[index]
