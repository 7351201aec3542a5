"""The tool-result metadata contract: `additional_kwargs["antler_tool_meta"]`.

Every tool result a plugin produces or inspects carries one dictionary saying
what happened, so a later layer (progress tracking, budgets, durable context)
decides from structure instead of parsing text:

``status``
    ``success``, ``partial_success`` (the tool ran but found nothing, or cut
    its output) or ``error`` (the tool failed, or never ran).
``error_type``
    Why it is not a plain success (None on success). ``denied`` and
    ``blocked`` are *refusals*: a gate (authorization, guardrail, the shell
    audit, read-before-write) decided the call must not run, so the tool
    never ran. The others classify failures (see `ERROR_TYPES`).
``recoverable_by_model``
    Whether the model can fix it itself (another query, another tool, a read
    first) rather than needing a person or configuration.
``recommended_next_action``
    One of `NEXT_ACTIONS`.
``source``
    Who stamped it: the tool itself, ``exception`` (a raised error turned into
    a result), or the plugin that refused the call.

Extra keys are allowed (``rule``, ``path``, ``reason``, ...), so a plugin can
say more without breaking readers, which ignore what they do not know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from antler import jsonsource

TOOL_META_KEY = "antler_tool_meta"
"""The `ToolMessage.additional_kwargs` key holding the metadata."""

STATUSES = ("success", "partial_success", "error")
REFUSALS = ("denied", "blocked")
"""Error types meaning a gate refused the call: the tool never ran."""
ERROR_TYPES = (
    *REFUSALS,
    "auth",            # credentials rejected: a person must fix them
    "config",          # the tool is not configured (no API key, missing setting)
    "rate_limited",    # the service asked to slow down
    "transient",       # timeout, connection reset: may work later
    "permission",      # the tool ran but may not touch that resource
    "not_found",       # what was asked for does not exist
    "no_results",      # the query matched nothing
    "internal",        # the service failed (5xx)
    "invalid_input",   # the arguments were wrong
    "interrupted",     # the call started but its result was never recorded
    "provider_error",  # a gate's own provider failed
    "unknown",
)
NEXT_ACTIONS = (
    "continue",         # use the result
    "retry",            # the same call may work now
    "rewrite_query",    # change the arguments
    "try_alternative",  # another approach or tool
    "use_another_tool", # this tool is not available for this call
    "read_first",       # read the target before changing it
    "summarize",        # stop calling, answer from what is known
    "ask_user",         # only a person can unblock it
    "stop",             # nothing the model can do
)

Status = Literal["success", "partial_success", "error"]


class ToolMeta(BaseModel):
    """One tool result's metadata; unknown extra keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    status: Status
    error_type: str | None = None
    recoverable_by_model: bool = True
    recommended_next_action: str = "continue"
    source: str = Field("tool", min_length=1)

    def model_post_init(self, _context: Any) -> None:
        if self.error_type is not None and self.error_type not in ERROR_TYPES:
            raise ValueError(f"error_type {self.error_type!r} is not one of "
                             f"{', '.join(ERROR_TYPES)}")
        if self.recommended_next_action not in NEXT_ACTIONS:
            raise ValueError(f"recommended_next_action {self.recommended_next_action!r} is not "
                             f"one of {', '.join(NEXT_ACTIONS)}")
        if self.status == "success" and self.error_type is not None:
            raise ValueError(f"a success has no error_type (got {self.error_type!r})")
        if self.status == "error" and self.error_type is None:
            raise ValueError("an error needs an error_type (use 'unknown' when unsure)")

    @property
    def is_refusal(self) -> bool:
        return self.error_type in REFUSALS

    @property
    def is_problem(self) -> bool:
        """Not a plain success: an error, a refusal or a partial success."""
        return self.status != "success"

    def as_dict(self) -> dict[str, Any]:
        if self.__pydantic_extra__:
            return self.model_dump(exclude_none=False)
        # The five fields only (every stamp without extras): a plain dict in field order,
        # as `model_dump` gives it, without the serializer's cost.
        return {"status": self.status, "error_type": self.error_type,
                "recoverable_by_model": self.recoverable_by_model,
                "recommended_next_action": self.recommended_next_action,
                "source": self.source}


def validate_tool_meta(value: Any) -> ToolMeta:
    """`value` as a `ToolMeta`; a ValueError saying what is wrong otherwise."""
    if isinstance(value, ToolMeta):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{TOOL_META_KEY} must be a mapping, got {type(value).__name__}")
    try:
        return ToolMeta.model_validate(dict(value))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or TOOL_META_KEY}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"invalid {TOOL_META_KEY}: {problems}") from None


def tool_meta(message: Any) -> ToolMeta | None:
    """The validated metadata of a `ToolMessage`, or None when absent or malformed."""
    kwargs = getattr(message, "additional_kwargs", None)
    raw = kwargs.get(TOOL_META_KEY) if isinstance(kwargs, Mapping) else None
    if raw is None:
        return None
    try:
        return validate_tool_meta(raw)
    except ValueError:
        return None


def with_tool_meta(message: Any, meta: ToolMeta | Mapping[str, Any], *,
                   replace: bool = False) -> Any:
    """A copy of `message` stamped with `meta`; an existing stamp is kept unless `replace`."""
    kwargs = dict(getattr(message, "additional_kwargs", None) or {})
    if TOOL_META_KEY in kwargs and not replace:
        return message
    kwargs[TOOL_META_KEY] = validate_tool_meta(meta).as_dict()
    return message.model_copy(update={"additional_kwargs": kwargs})


def refusal(error_type: Literal["denied", "blocked"], source: str, *,
            recoverable: bool = True, next_action: str = "use_another_tool",
            **extra: Any) -> dict[str, Any]:
    """The metadata of a call a gate refused (the tool never ran)."""
    return ToolMeta(status="error", error_type=error_type, recoverable_by_model=recoverable,
                    recommended_next_action=next_action, source=source, **extra).as_dict()


# -- classifying failures from their text ---------------------------------------------------

_CLASSES: tuple[tuple[str, bool, str, re.Pattern[str]], ...] = tuple(
    # Lower-case patterns matched against the lower-cased text: several times faster
    # than IGNORECASE, which defeats the engine's literal scans.
    (error_type, recoverable, action, re.compile(pattern))
    for error_type, recoverable, action, pattern in (
        # Checked in this order; the first match wins. Each row names the wordings it
        # covers (OS errors, HTTP clients, provider SDKs, subprocess, MCP): the table
        # in tests/plugins/test_error_classification.py holds a real message for each.
        ("auth", False, "stop",
         r"\b(401|403)\b|unauthori[sz]ed|forbidden|invalid[ _-]?api[ _-]?key"
         r"|incorrect api[ _-]?key|authentication (failed|error|required)|not authenticated"
         r"|invalid (credentials|access token|auth token)"
         r"|(token|credentials?) (has |have )?expired"),
        ("config", False, "stop",
         r"not configured|no api[ _-]?key|missing (\w+ )?api[ _-]?key|missing credentials"
         r"|api[ _-]?key (is )?(not set|missing|required)|api[ _-]?key\b.{0,80}\bmust be set"
         r"|environment variable\b.{0,40}\b(is )?not set"),
        ("rate_limited", False, "summarize",
         r"\b429\b|rate[ _-]?limit|too many requests|rate exceeded|throttl"
         r"|quota (exceeded|exhausted)|exceeded your (current )?quota|insufficient[ _]quota"
         r"|resource[ _]exhausted"),
        ("transient", False, "try_alternative",
         # "timeout" anywhere (ReadTimeout, TimeoutError, timeout=10); "timed out",
         # "time out" only as words (so not "runtime output").
         r"timeout|\btimed?[ _-]?out\b|deadline[ _]exceeded"
         r"|connection (reset|refused|error|aborted|closed|lost|timed)|connecterror"
         r"|failed to establish a new connection|max retries exceeded|remote ?end closed"
         r"|server disconnected|broken pipe|network is unreachable|no route to host"
         r"|temporary failure in name resolution|name or service not known"
         r"|temporarily unavailable|service unavailable|bad gateway|overloaded"
         r"|try again later|incomplete ?read|\be(connreset|connrefused|timedout|pipe|ai_again)\b"
         r"|\b(408|502|503|504|529)\b"),
        ("internal", False, "stop",
         r"\b500\b|internal (server )?error|internal_error|\bserver error\b"),
        ("invalid_input", True, "rewrite_query",
         r"\binvalid (regular expression|glob pattern|search path|max_results)\b"),
        ("permission", True, "try_alternative",
         r"permission denied|access denied|not permitted|insufficient permissions"
         r"|read-only file system|\be(acces|perm)\b"),
        ("not_found", True, "rewrite_query",
         r"\b404\b|not (be )?found|no such file|does not exist|cannot find|could not find"
         r"|\benoent\b"),
        ("no_results", True, "rewrite_query",
         r"no (search )?results|nothing found|\b0 results\b|no matches"),
        ("invalid_input", True, "rewrite_query",
         r"\b(400|422)\b|bad request|unprocessable|validation errors? for|field required"
         r"|invalid (argument|parameter|value|input|json|path|url)|is a directory"
         r"|not a directory|unexpected keyword argument|missing \d+ required"),
    )
)
_CLASSIFIED_CHARS = 4096
"""How much of a long error text is classified: its head and its last 1,024 characters."""
_NON_ERRORS = frozenset({"", "none", "null", "false", "ok", "0", "no", "success"})


def classify_error_text(text: str) -> tuple[str, bool, str]:
    """(error_type, recoverable_by_model, recommended_next_action) for an error's text.

    A JSON object with an ``error`` field is classified from that field alone,
    so `{"user_id": 401}` is not an auth failure. Numeric codes match only as
    whole words ("took 500ms" is not a 500). Timeouts are recognised in every
    spelling ("timed out", "Timeout", "time-out", "deadline exceeded"), so a tool
    that keeps timing out is one tool_progress can block.
    """
    subject = _error_field(text)
    if subject is None:
        subject = text
    if len(subject) > _CLASSIFIED_CHARS:  # the wording is at the start, or on the last lines
        subject = f"{subject[:_CLASSIFIED_CHARS - 1024]}\n{subject[-1024:]}"
    subject = subject.lower()
    for error_type, recoverable, action, pattern in _CLASSES:
        if pattern.search(subject):
            return error_type, recoverable, action
    return "unknown", True, "try_alternative"


_JSON_OBJECT_START = re.compile(r"\s*\{")
_ERROR_PREFIX = re.compile(r"\s*error\b\s*[:!-]", re.IGNORECASE)


def _error_field(text: str) -> str | None:
    if not _JSON_OBJECT_START.match(text):  # no copy of a long non-JSON result
        return None
    try:
        data = jsonsource.loads(text.strip())
    except ValueError:
        return None
    if not isinstance(data, dict) or "error" not in data:
        return None
    value = data["error"]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def is_error_payload(text: str) -> bool:
    """Whether a result's text reports an error (``Error:`` prefix or a JSON ``error``)."""
    if _ERROR_PREFIX.match(text):
        return True
    field = _error_field(text)
    return field is not None and field.strip().lower() not in _NON_ERRORS


_PARTIAL_MARKERS: tuple[tuple[re.Pattern[str], str | None, str], ...] = (
    (re.compile(r"\bno (search )?results\b|\bnothing found\b|\b0 results\b", re.IGNORECASE),
     "no_results", "rewrite_query"),
    (re.compile(r"\[(output|file) truncated\b|\btruncated\]", re.IGNORECASE), None, "continue"),
)


_STANDARD_LIMIT = 256
_standard: dict[tuple[str, str | None, bool, str, str], ToolMeta] = {}


def _standard_meta(status: Status, error_type: str | None, recoverable: bool, action: str,
                   source: str) -> ToolMeta:
    """The (frozen, so shareable) metadata of these five values, built once per process.

    `result_meta` gives one of a few dozen stamps; building each once saves the model's
    validation on every tool result. Bounded: past `_STANDARD_LIMIT` distinct sources'
    stamps, new ones are built each time.
    """
    key = (status, error_type, recoverable, action, source)
    meta = _standard.get(key)
    if meta is None:
        meta = ToolMeta(status=status, error_type=error_type, recoverable_by_model=recoverable,
                        recommended_next_action=action, source=source)
        if len(_standard) < _STANDARD_LIMIT:
            _standard[key] = meta
    return meta


def result_meta(text: str, *, errored: bool = False, source: str = "tool") -> ToolMeta:
    """The metadata of a tool result that carries none, judged from its text.

    `errored` is the result's own ``status="error"``. An error (that, an
    ``Error:`` prefix or a JSON ``error`` field) is classified with
    `classify_error_text`; a result saying it found nothing or was cut is a
    ``partial_success``; anything else is a ``success``.
    """
    if errored or is_error_payload(text):
        error_type, recoverable, action = classify_error_text(text)
        return _standard_meta("error", error_type, recoverable, action, source)
    head = text[:4096]
    # A text of at most 512 characters is its own tail, already searched as the head.
    tail = text[-512:] if len(text) > 512 else None
    for pattern, partial_type, next_action in _PARTIAL_MARKERS:
        if pattern.search(head) or (tail is not None and pattern.search(tail)):
            return _standard_meta("partial_success", partial_type, True, next_action, source)
    return _standard_meta("success", None, True, "continue", source)
