"""The rules of the conformance battery, and how a broken one is reported.

`CHECKS` names every check and the section of `docs/plugins.md` that explains
its rule; `ConformanceFailure` is what a check raises. The other exceptions
are the battery's own: a misconfigured class, and the faults it injects.
"""

from __future__ import annotations

import dataclasses

from antler.errors import AntlerError

__all__ = ["CHECKS", "DOCS", "ConformanceCrash", "ConformanceError", "ConformanceFailure",
           "ConformanceFault", "ConformanceTransientError", "Rule"]

DOCS = "docs/plugins.md"


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one check enforces, and where `docs/plugins.md` explains it."""

    title: str
    anchor: str

    @property
    def link(self) -> str:
        return f"{DOCS}#{self.anchor}"


CHECKS: dict[str, Rule] = {
    "manifest": Rule("the manifest entry is valid and its `hooks:` are exactly the hooks "
                     "the middleware class implements", "rule-manifest-hooks"),
    "config_schema": Rule("the config model exports a JSON Schema and its defaults validate",
                          "rule-config-schema"),
    "hooks_run": Rule("every hook runs without raising on the standard scenario",
                      "rule-hooks-run"),
    "request_mutation": Rule("a wrap hook hands on a new request (`request.override(...)`) "
                             "and never changes the one it was given", "rule-request-mutation"),
    "state_writes": Rule("node hooks write only the state keys the plugin owns, LangChain's "
                         "shared channels and the contract channels its schema takes",
                         "rule-state-writes"),
    "sync_async": Rule("every hook has a sync and an async form, and both give the same "
                       "state updates, requests and tool results", "rule-sync-async"),
    "chains": Rule("the plugin runs in each chain it joins, fused and unfused, with "
                   "identical outcomes", "rule-fused-unfused"),
    "non_blocking": Rule("no blocking call inside an async hook", "rule-non-blocking"),
    "retry_injection": Rule("a retried model call still carries what the plugin injected",
                            "rule-one-shot-injections"),
    "state_keys": Rule("state keys are private or namespaced and do not collide with "
                       "Antler's own", "rule-state-keys"),
    "on_error": Rule("an exception inside a hook is handled as the plugin's `on_error` "
                     "policy says", "rule-on-error"),
    "resume": Rule("a run survives a resume from its checkpoint in a new process",
                   "rule-resume"),
    "history_work": Rule("a hook's work follows the new messages, not the thread's length: "
                         "its CPU time per turn grows at most 4x from 50 to 2,000 earlier "
                         "messages", "rule-history-work"),
}
"""Every check of the battery, by the name `skip_checks` uses, in the order they run."""


class ConformanceFailure(AssertionError):
    """A check failed: the rule, its section of docs/plugins.md, and what was seen."""

    def __init__(self, check: str, detail: str) -> None:
        rule = CHECKS[check]
        super().__init__(f"[{check}] rule: {rule.title}.\n  see {rule.link}\n{detail}")
        self.check = check
        self.detail = detail


class ConformanceError(AntlerError):
    """The conformance class itself is misconfigured (unknown plugin, check or setting)."""


class ConformanceTransientError(AntlerError):
    """The transient model failure the battery injects; its own retrier retries it once.

    An `AntlerError`, so Antler's own model-error handling lets it through to the
    battery's retrier, which encloses every other model wrapper.
    """


class ConformanceCrash(BaseException):
    """Stops a run in the middle, as a crash would, before it resumes in another process.

    Not an `Exception`: no error handler or retrying wrapper may turn it into an answer.
    """


class ConformanceFault(RuntimeError):
    """The exception the battery raises inside a plugin's hook to test its `on_error`."""
