"""A chat model that replays a fixed script of assistant turns.

Tests, demos and CI need an agent that behaves the same way on every run and
needs no API key. :class:`ScriptedChatModel` is a real LangChain chat model
(``create_agent`` binds tools to it and invokes it like any other), but each
call returns the next turn of a script instead of asking a provider.

A script is a list of turns. Each turn is one of:

* a string: a plain text reply;
* a mapping ``{"content": str, "tool_calls": [{"name", "args", "id"?}],
  "finish_reason"?, "usage"?: {"input_tokens", "output_tokens"}}``;
* a mapping ``{"error": KIND}`` or ``{"error": {"kind", "message"?, "status_code"?,
  "code"?, "retry_after"?}}``: this call fails the way a provider fails, with
  langchain-core's exception for KIND (`ERROR_KINDS`) carrying the provider
  SDKs' attributes (``status_code``, ``code``, ``body``, ``response.headers``
  with ``retry-after`` in seconds), so error handling can be exercised offline;
* an :class:`~langchain_core.messages.AIMessage`, returned as given;
* a callable ``(messages) -> turn`` for replies that depend on the request.

Scripts can live in YAML, either as a bare list of turns or as a mapping with a
``turns`` list (and optionally ``model_name``, and ``title`` / ``memory`` /
``tool_selector`` lists of turns). The title and memory plugins (and the LLM tool
selector) ask the agent's model for side answers; a scripted model gives them their
own scripts (:meth:`ScriptedChatModel.side_model`),
so the agent's ``turns`` are never spent on them, and a side script that runs
out answers with an empty reply, which those plugins treat as "nothing": the
title falls back to the user's words, memory learns no facts.

Streaming (``stream``/``astream``, ``stream_mode="messages"``) sends a reply's
text in word-sized chunks, and its tool calls in the last chunk, like a
provider does.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PrivateAttr,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from antler.errors import AntlerError
from antler.plugin_api.yamlsource import YamlSyntaxError, load_yaml_file

__all__ = [
    "ERROR_KINDS",
    "ErrorSpec",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptTurn",
    "ScriptedChatModel",
    "ScriptedRequest",
    "ToolCallSpec",
    "TurnSpec",
    "UsageSpec",
    "parse_script",
]

SIDE_PURPOSES = ("title", "memory", "tool_selector")
"""Side calls a scripted model answers from their own script (see `side_model`)."""

SCRIPT_KEYS = ("model_name", *SIDE_PURPOSES, "recording")
"""Keys a YAML script mapping may have besides `turns` (`recording`: the header of a
recording, `antler.replay.recording`, which a script ignores)."""

CHARS_PER_TOKEN = 4
"""Rough characters-per-token ratio used when a turn does not state its usage."""

_PREVIEW_CHARS = 200


class ScriptError(AntlerError, ValueError):
    """A script (or one of its turns) is malformed."""


class ScriptExhaustedError(AntlerError, RuntimeError):
    """The model was asked for more turns than its script has."""


class ToolCallSpec(BaseModel):
    """One tool call the scripted assistant makes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    id: StrictStr | None = None


class UsageSpec(BaseModel):
    """Token counts to report for a turn instead of the length-based estimate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: NonNegativeInt
    output_tokens: NonNegativeInt


ErrorKind = Literal["rate_limit", "quota", "auth", "permission", "timeout", "connection",
                    "server", "overloaded", "invalid_request", "context_overflow", "generic"]

ERROR_KINDS: dict[str, tuple[str, int | None, str | None, str]] = {
    "rate_limit": ("ModelRateLimitError", 429, "rate_limit_exceeded",
                   "Rate limit reached for requests per minute. Please try again shortly."),
    "quota": ("ModelRateLimitError", 429, "insufficient_quota",
              "You exceeded your current quota, please check your plan and billing details."),
    "auth": ("ModelAuthenticationError", 401, "invalid_api_key", "Incorrect API key provided."),
    "permission": ("ModelPermissionDeniedError", 403, "permission_denied",
                   "The API key has no access to this model."),
    "timeout": ("ModelTimeoutError", None, None, "Request timed out."),
    "connection": ("ModelConnectionError", None, None, "Connection error."),
    "server": ("ModelAPIError", 500, "server_error",
               "The server had an error while processing your request."),
    "overloaded": ("ModelAPIError", 529, "overloaded_error", "Overloaded"),
    "invalid_request": ("ModelInvalidRequestError", 400, "invalid_request_error",
                        "Invalid request."),
    "context_overflow": ("ContextOverflowError", 400, "context_length_exceeded",
                         "This model's maximum context length was exceeded."),
    "generic": ("RuntimeError", None, None, "The model call failed."),
}
"""Error kinds a script can raise: (langchain-core exception class, HTTP status, provider
error code, default message). ``generic`` raises a plain `RuntimeError`."""


class ErrorSpec(BaseModel):
    """A provider failure a turn raises instead of answering."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ErrorKind
    message: StrictStr | None = None
    status_code: int | None = None
    code: StrictStr | None = None
    retry_after: NonNegativeFloat | None = Field(
        None, description="Seconds, sent as the response's `retry-after` header.")

    def exception(self) -> Exception:
        """The exception, shaped like a provider SDK's (`status_code`, `code`, `body`, headers)."""
        import langchain_core.exceptions as lc_errors

        class_name, status, code, message = ERROR_KINDS[self.kind]
        error_class = getattr(lc_errors, class_name, RuntimeError)
        text = self.message or message
        error: Any = error_class(text)
        status = self.status_code if self.status_code is not None else status
        code = self.code or code
        if status is not None or code is not None:
            headers = {} if self.retry_after is None else {"retry-after": f"{self.retry_after:g}"}
            error.status_code = status
            error.code = code
            error.body = {"error": {"message": text, "type": code, "code": code}}
            error.response = _ErrorResponse(status, headers)
        return error


@dataclass(frozen=True)
class _ErrorResponse:
    """The part of an HTTP response provider SDK exceptions expose."""

    status_code: int | None
    headers: dict[str, str]


class TurnSpec(BaseModel):
    """A validated, declarative assistant turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: StrictStr = ""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    finish_reason: StrictStr | None = None
    usage: UsageSpec | None = None
    error: ErrorSpec | None = None

    @field_validator("error", mode="before")
    @classmethod
    def _error_shorthand(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _error_alone(self) -> TurnSpec:
        if self.error is not None and (self.content or self.tool_calls or self.usage
                                       or self.finish_reason):
            raise ValueError("a turn with 'error' raises instead of answering: remove its "
                             "'content', 'tool_calls', 'usage' and 'finish_reason'")
        return self


ScriptTurn = TurnSpec | AIMessage | Callable[[list[BaseMessage]], Any]
"""A turn after :func:`parse_script`: declarative, a ready message, or dynamic."""


def _format_validation_error(error: ValidationError) -> str:
    """Render pydantic errors as ``where: what (got ...)`` lines a script author can act on."""
    problems = []
    for item in error.errors():
        where = ""
        for part in item["loc"]:
            where += f"[{part}]" if isinstance(part, int) else f".{part}" if where else str(part)
        got = repr(item.get("input"))
        if len(got) > 60:
            got = got[:60] + "..."
        problems.append(f"{where or 'turn'}: {item['msg']} (got {got})")
    return "; ".join(problems)


def _coerce_turn(turn: Any, index: int) -> ScriptTurn:
    """Validate one raw turn; ``index`` is its 0-based position, used in error messages."""
    label = f"Script turn {index + 1} (index {index})"
    if isinstance(turn, (TurnSpec, AIMessage)):
        return turn
    if isinstance(turn, str):
        return TurnSpec(content=turn)
    if isinstance(turn, dict):
        try:
            return TurnSpec.model_validate(turn)
        except ValidationError as error:
            raise ScriptError(f"{label} is malformed: {_format_validation_error(error)}") from None
    if callable(turn):
        return turn
    raise ScriptError(
        f"{label} is a {type(turn).__name__}; expected a string, a mapping with "
        "'content' and/or 'tool_calls', an AIMessage, or a callable (messages) -> turn."
    )


def parse_script(script: Any) -> list[ScriptTurn]:
    """Validate a script and return its turns, ready for :class:`ScriptedChatModel`.

    Accepts a list of turns, or a mapping with a ``turns`` list (the YAML file
    form). ``None`` is an empty script.

    Raises:
        ScriptError: naming the turn (1-based, with its index) and what is wrong.
    """
    if script is None:
        return []
    if isinstance(script, dict):
        unknown = sorted(set(script) - {"turns", *SCRIPT_KEYS})
        if unknown or "turns" not in script:
            raise ScriptError(
                "A script mapping must have a 'turns' list (and optionally 'model_name', "
                "'title', 'memory' and 'tool_selector' lists, and a recording's 'recording' "
                f"header); got keys {sorted(script)!r}."
            )
        script = script["turns"]
    if isinstance(script, (str, bytes)) or not isinstance(script, Sequence):
        raise ScriptError(
            f"A script must be a list of turns, got {type(script).__name__}. "
            "Wrap a single reply in a list: ['Hello!']."
        )
    return [_coerce_turn(turn, index) for index, turn in enumerate(script)]


@dataclass(frozen=True)
class ScriptedRequest:
    """One call made to the model: what it was sent and which tools were bound."""

    messages: list[BaseMessage]
    tool_names: tuple[str, ...]


class _ReplayState:
    """Progress through a script, shared by a model and every copy ``bind_tools`` makes.

    ``create_agent`` binds tools again before each model call, so the position
    must live outside any one model object.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.position = 0
        self.requests: list[ScriptedRequest] = []
        self.generated_ids = 0
        self.used_ids: set[str] = set()

    def claim_tool_call_id(self, explicit: str | None) -> str:
        """Return ``explicit`` or the next free deterministic id ``call_<n>``."""
        with self.lock:
            if explicit is not None:
                self.used_ids.add(explicit)
                return explicit
            while True:
                self.generated_ids += 1
                candidate = f"call_{self.generated_ids}"
                if candidate not in self.used_ids:
                    self.used_ids.add(candidate)
                    return candidate


_ARGS_ENCODER = json.JSONEncoder(default=str)
"""`json.dumps(args, default=str)`, without making an encoder for every tool call."""
_WITHOUT_TOOL_CALLS = (HumanMessage, SystemMessage, ToolMessage)
"""Message classes that have no `tool_calls` (asking them costs an AttributeError)."""


def _message_chars(message: BaseMessage) -> int:
    """Characters a message contributes to the token estimate (text plus tool calls).

    Every request measures each of its messages, so the usual case is short: a
    string's length is its text's, and a user, system or tool message calls no tool.
    """
    content = message.content
    chars = len(content) if type(content) is str else len(str(message.text))
    if isinstance(message, _WITHOUT_TOOL_CALLS):
        return chars
    for call in getattr(message, "tool_calls", None) or []:
        chars += len(call["name"]) + len(_ARGS_ENCODER.encode(call["args"]))
    return chars


def _estimate_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def _preview_message(message: BaseMessage) -> str:
    """A one-line description of a message for error messages."""
    text = str(message.text)
    calls = getattr(message, "tool_calls", None) or []
    if not text and calls:
        text = "tool calls: " + ", ".join(call["name"] for call in calls)
    text = " ".join(text.split())
    if len(text) > _PREVIEW_CHARS:
        text = text[:_PREVIEW_CHARS] + "..."
    name = getattr(message, "name", None)
    kind = f"{message.type} {name!r}" if name else message.type
    return f"({kind}) {text!r}"


def _chunks(message: BaseMessage) -> Iterator[ChatGenerationChunk]:
    """`message` as a provider streams it: the text in word-sized pieces (whitespace kept
    with the word before it), then one last chunk with the tool calls, usage and metadata.
    Merged back together, the chunks give `message` again."""
    content = message.content
    pieces: list[Any] = re.findall(r"\S+\s*|\s+", content) if isinstance(content, str) \
        else [content]  # content blocks go as they are
    for piece in pieces:
        yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message.id))
    calls = [{"name": call["name"], "args": json.dumps(call["args"]), "id": call.get("id"),
              "index": index, "type": "tool_call_chunk"}
             for index, call in enumerate(getattr(message, "tool_calls", None) or [])]
    yield ChatGenerationChunk(message=AIMessageChunk(
        content="", id=message.id, tool_call_chunks=calls,
        additional_kwargs=dict(message.additional_kwargs),
        usage_metadata=getattr(message, "usage_metadata", None),
        response_metadata=dict(message.response_metadata), chunk_position="last"))


def bound_tool_name(tool: Any) -> str:
    """The name under which a tool is bound, for any form ``bind_tools`` accepts."""
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, dict) and isinstance(tool.get("name"), str):
        return tool["name"]
    return convert_to_openai_tool(tool)["function"]["name"]


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers each call with the next turn of a script.

    Thread-safe: concurrent calls each take a distinct turn. Every request is
    recorded (:attr:`calls`, :attr:`requests`) so tests can check what the
    agent sent. When the script runs out, :class:`ScriptExhaustedError` says so
    and shows the last message the agent sent.
    """

    script: list[Any] = Field(default_factory=list)
    model_name: str = "scripted"
    side_scripts: dict[str, list[Any]] = Field(default_factory=dict)
    """Turns for side calls, by purpose ('title', 'memory'); see :meth:`side_model`."""
    when_exhausted: Literal["raise", "empty"] = "raise"
    """What a call past the end of the script gets: an error, or an empty reply."""
    bound_tools: tuple[str, ...] = ()
    """Names of the tools bound with :meth:`bind_tools` (empty on the unbound model)."""

    _state: _ReplayState = PrivateAttr(default_factory=_ReplayState)

    def __init__(self, script: Any = None, /, **data: Any) -> None:
        if script is not None:
            data["script"] = script
        super().__init__(**data)

    @field_validator("script", mode="before")
    @classmethod
    def _validate_script(cls, value: Any) -> list[ScriptTurn]:
        return parse_script(value)

    @field_validator("side_scripts", mode="before")
    @classmethod
    def _validate_side_scripts(cls, value: Any) -> dict[str, list[ScriptTurn]]:
        value = dict(value or {})
        unknown = sorted(set(value) - set(SIDE_PURPOSES))
        if unknown:
            raise ScriptError(f"side scripts are for {', '.join(SIDE_PURPOSES)}; got "
                              f"{', '.join(unknown)}")
        return {purpose: parse_script(turns) for purpose, turns in value.items()}

    def side_model(self, purpose: str) -> ScriptedChatModel:
        """A scripted model for the side calls of `purpose` ('title', 'memory'): its own
        script, replying empty once that runs out, so the agent's turns stay its own."""
        return ScriptedChatModel(list(self.side_scripts.get(purpose, [])),
                                 model_name=f"{self.model_name}-{purpose}",
                                 when_exhausted="empty", callbacks=self.callbacks)

    @classmethod
    def from_turns(cls, turns: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        """Build a model from a list of turns (validated with :func:`parse_script`)."""
        return cls(parse_script(list(turns)), **kwargs)

    @classmethod
    def from_yaml(cls, path: str | Path, **kwargs: Any) -> ScriptedChatModel:
        """Build a model from a YAML script file (a list of turns, or ``{turns: [...]}``)."""
        source = Path(path)
        if not source.exists():
            raise ScriptError(f"Script file {str(source)!r} does not exist.")
        try:
            raw = load_yaml_file(source).data
        except YamlSyntaxError as error:
            raise ScriptError(f"Script file {str(source)!r} cannot be loaded: {error}") from None
        try:
            turns = parse_script(raw)
        except ScriptError as error:
            raise ScriptError(f"In script file {str(source)!r}: {error}") from None
        if isinstance(raw, dict) and "model_name" in raw:
            kwargs.setdefault("model_name", str(raw["model_name"]))
        if isinstance(raw, dict):
            try:
                sides = {purpose: parse_script(raw[purpose]) for purpose in SIDE_PURPOSES
                         if purpose in raw}
            except ScriptError as error:
                raise ScriptError(f"In script file {str(source)!r}: {error}") from None
            kwargs.setdefault("side_scripts", sides)
        return cls(turns, **kwargs)

    # -- introspection for tests ------------------------------------------------------

    @property
    def requests(self) -> list[ScriptedRequest]:
        """Every request so far, in order, including one that exhausted the script."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def calls(self) -> list[list[BaseMessage]]:
        """The messages of every request so far, in order."""
        return [request.messages for request in self.requests]

    @property
    def position(self) -> int:
        """How many turns have been consumed."""
        return self._state.position

    def continue_at(self, position: int) -> None:
        """Continue the script at turn `position` (0-based): the turns before it count as
        consumed, as when a thread resumes in a new process (`antler resume`)."""
        with self._state.lock:
            self._state.position = max(0, min(int(position), len(self.script)))

    @property
    def remaining(self) -> int:
        """How many turns are left."""
        return max(0, len(self.script) - self._state.position)

    # -- LangChain chat model interface ----------------------------------------------

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # The script may hold callables, so it is deliberately not part of this.
        return {"model_name": self.model_name, "script_turns": len(self.script)}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        """LangChain's tracing parameters for this model, as its default works them out
        (the provider from the class name, the model name, the call's temperature and
        token limit), without asking the model for the `model`, `temperature` and
        `max_tokens` it does not have: each a caught AttributeError, about 20 us of
        every call. A subclass that adds one of them gets LangChain's own."""
        if _has_ls_attributes(type(self)):
            return super()._get_ls_params(stop=stop, **kwargs)
        params = LangSmithParams(ls_provider=_ls_provider(type(self)), ls_model_type="chat")
        if stop:
            params["ls_stop"] = stop
        model = kwargs.get("model")
        if isinstance(model, str):
            params["ls_model_name"] = model
        elif isinstance(self.model_name, str):
            params["ls_model_name"] = self.model_name
        temperature = kwargs.get("temperature")
        if isinstance(temperature, (int, float)):
            params["ls_temperature"] = temperature
        max_tokens = kwargs.get("max_tokens")
        if isinstance(max_tokens, int):
            params["ls_max_tokens"] = max_tokens
        return params

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> ScriptedChatModel:
        """Return a copy that records the bound tool names and shares this script's progress.

        The scripted replies are fixed, so ``tool_choice`` and other options are
        accepted and ignored.
        """
        return self.model_copy(update={"bound_tools": tuple(bound_tool_name(t) for t in tools)})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index, turn = self._next_turn(messages)
        if callable(turn) and not isinstance(turn, (TurnSpec, AIMessage)):
            produced = turn(list(messages))
            if inspect.isawaitable(produced):
                close = getattr(produced, "close", None)
                if close is not None:
                    close()  # avoid a "coroutine was never awaited" warning
                raise ScriptError(
                    "An async callable turn needs the async API (ainvoke/astream); "
                    "it was called through invoke."
                )
            turn = self._coerce_dynamic(produced, index)
        return self._result(turn, messages)

    # LangChain's async API needs its own `_agenerate` (the default runs `_generate`
    # in a thread, which cannot await an async callable turn); it differs from
    # `_generate` only in awaiting the turn where the sync one refuses it.
    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index, turn = self._next_turn(messages)
        if callable(turn) and not isinstance(turn, (TurnSpec, AIMessage)):
            produced = turn(list(messages))
            if inspect.isawaitable(produced):
                produced = await produced
            turn = self._coerce_dynamic(produced, index)
        return self._result(turn, messages)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._generate(messages, stop, None, **kwargs).generations[0].message
        for chunk in _chunks(message):
            if run_manager is not None and chunk.text:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        result = await self._agenerate(messages, stop, None, **kwargs)
        for chunk in _chunks(result.generations[0].message):
            if run_manager is not None and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    # -- replay ----------------------------------------------------------------------

    def _next_turn(self, messages: list[BaseMessage]) -> tuple[int, ScriptTurn]:
        """Record the request and claim the next turn (with its index), or raise if none is left."""
        state = self._state
        with state.lock:
            state.requests.append(ScriptedRequest(list(messages), self.bound_tools))
            index = state.position
            if index >= len(self.script):
                if self.when_exhausted == "empty":
                    return index, TurnSpec()
                raise ScriptExhaustedError(self._exhausted_message(messages))
            state.position += 1
            return index, self.script[index]

    def _coerce_dynamic(self, produced: Any, index: int) -> TurnSpec | AIMessage:
        """Validate what the callable turn at ``index`` returned; it must be a concrete turn."""
        if callable(produced) and not isinstance(produced, (TurnSpec, AIMessage)):
            raise ScriptError(
                f"Script turn {index + 1} (index {index}) is a callable that returned another "
                "callable; it must return a string, a mapping or an AIMessage."
            )
        turn = _coerce_turn(produced, index)
        assert isinstance(turn, (TurnSpec, AIMessage))
        return turn

    def _exhausted_message(self, messages: list[BaseMessage]) -> str:
        count = len(self.script)
        last = _preview_message(messages[-1]) if messages else "(no messages)"
        return (
            f"ScriptedChatModel {self.model_name!r} ran out of script: it has {count} "
            f"turn{'s' if count != 1 else ''} and turn {count + 1} was requested. "
            f"Last message sent: {last}. Add a turn to the script, or check why the agent "
            "called the model again."
        )

    def _result(self, turn: TurnSpec | AIMessage, messages: list[BaseMessage]) -> ChatResult:
        if isinstance(turn, TurnSpec) and turn.error is not None:
            raise turn.error.exception()
        message = self._to_message(turn, messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _to_message(self, turn: TurnSpec | AIMessage, messages: list[BaseMessage]) -> AIMessage:
        """Build the reply: fill in tool call ids, usage and response metadata."""
        if isinstance(turn, AIMessage):
            message = turn.model_copy(deep=True)
            message.tool_calls = [
                {**call, "id": self._state.claim_tool_call_id(call.get("id"))}
                for call in message.tool_calls
            ]
            usage = message.usage_metadata
            finish_reason = message.response_metadata.get("finish_reason")
        else:
            message = AIMessage(
                content=turn.content,
                tool_calls=[
                    {
                        "name": call.name,
                        "args": dict(call.args),
                        "id": self._state.claim_tool_call_id(call.id),
                        "type": "tool_call",
                    }
                    for call in turn.tool_calls
                ],
            )
            usage = (
                {
                    "input_tokens": turn.usage.input_tokens,
                    "output_tokens": turn.usage.output_tokens,
                    "total_tokens": turn.usage.input_tokens + turn.usage.output_tokens,
                }
                if turn.usage
                else None
            )
            finish_reason = turn.finish_reason

        if usage is None:
            input_tokens = _estimate_tokens(sum(_message_chars(m) for m in messages))
            output_tokens = _estimate_tokens(_message_chars(message))
            usage = {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            }
        message.usage_metadata = usage
        message.response_metadata = {
            **message.response_metadata,
            "finish_reason": finish_reason or ("tool_calls" if message.tool_calls else "stop"),
            "model_name": message.response_metadata.get("model_name", self.model_name),
        }
        return message


_LS_ATTRIBUTES = ("model", "temperature", "max_tokens")
"""What LangChain's default tracing parameters read from a model besides `model_name`."""


@functools.cache
def _has_ls_attributes(cls: type) -> bool:
    """Whether model class `cls` has (as a field or a class attribute) one of the
    attributes LangChain's default tracing parameters read."""
    return cls.model_config.get("extra") == "allow" or any(  # type: ignore[attr-defined]
        name in cls.model_fields or hasattr(cls, name)  # type: ignore[attr-defined]
        for name in _LS_ATTRIBUTES)


@functools.cache
def _ls_provider(cls: type) -> str:
    """LangChain's default tracing provider name for model class `cls`: its name without a
    leading or trailing 'Chat', lowercased."""
    name = cls.__name__
    if name.startswith("Chat"):
        name = name[4:]
    elif name.endswith("Chat"):
        name = name[:-4]
    return name.lower()


def _record_signatures(cls: type) -> None:
    """Record the signatures of `cls`'s generation methods on them.

    LangChain looks at `_generate`'s signature on every call (does it take a
    `run_manager`?), which `inspect.signature` works out anew each time (about 25 us)
    unless the function carries it; it is the same signature either way.
    """
    for name in ("_generate", "_agenerate", "_stream", "_astream"):
        function = cls.__dict__[name]
        function.__signature__ = inspect.signature(function)


_record_signatures(ScriptedChatModel)
