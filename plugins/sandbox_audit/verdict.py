"""What the audit decides: findings, the verdict built from them, and their collector.

Every rule that fires adds a `Finding`; `Findings.verdict()` picks the one that
decides (highest action, then the earliest rule in `rules.RULES`, then the
earliest position) and keeps every finding for the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .rules import RULE_RANK, RULES_BY_NAME, Action
from .script import SUB_MARK

__all__ = ["Finding", "Findings", "Verdict", "detail"]

_DETAIL_CHARS = 160


def detail(text: str) -> str:
    """`text` as a finding shows it: substitutions spelled `$(...)`, cut to a line's length."""
    text = text.replace(SUB_MARK, "$(...)")
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "..."


@dataclass(frozen=True)
class Finding:
    """One rule that fired, where, and on what."""

    rule: str
    action: Action
    detail: str
    position: int

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "action": str(self.action), "detail": self.detail,
                "position": self.position}


@dataclass(frozen=True)
class Verdict:
    """The decision on one command: its action, the rule that decided it, and why."""

    action: Action
    rule: str
    reason: str
    detail: str = ""
    position: int | None = None
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    parser: str = "none"
    excerpt: str = ""
    """The command text at `position` (what the model sees quoted back)."""

    @property
    def blocked(self) -> bool:
        return self.action is Action.BLOCK

    @property
    def advice(self) -> str:
        return RULES_BY_NAME[self.rule].advice

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record for the audit log and the tool message."""
        return {
            "action": str(self.action), "rule": self.rule, "reason": self.reason,
            "detail": self.detail, "position": self.position, "excerpt": self.excerpt,
            "parser": self.parser,
            "findings": [f.as_dict() for f in self.findings],
        }


class Findings:
    """The findings of one classification, each rule reported once per position.

    While nested code (`sh -c '...'`) is audited, `anchor` holds the position of
    the command that carries it: positions inside the code string mean nothing
    in the outer command, so its findings point at the carrier.
    """

    __slots__ = ("anchor", "items", "parser", "seen", "text")

    def __init__(self) -> None:
        self.items: list[Finding] = []
        self.seen: set[tuple[str, int]] = set()
        self.anchor: int | None = None
        self.parser = "none"
        self.text = ""

    def add(self, rule: str, text: str, position: int) -> None:
        if self.anchor is not None:
            position = self.anchor
        key = (rule, position)
        if key in self.seen:
            return
        self.seen.add(key)
        self.items.append(Finding(rule, RULES_BY_NAME[rule].action, detail(text), position))

    def verdict(self) -> Verdict:
        if not self.items:
            rule = RULES_BY_NAME["no_match"]
            return Verdict(Action.PASS, rule.name, rule.why, parser=self.parser)
        ordered = sorted(self.items, key=lambda f: (-f.action.severity, RULE_RANK[f.rule],
                                                    f.position))
        top = ordered[0]
        rule = RULES_BY_NAME[top.rule]
        excerpt = detail(self.text[top.position:top.position + 60].split("\n")[0])
        return Verdict(top.action, top.rule, f"{top.detail}: {rule.why}", top.detail,
                       top.position, tuple(ordered), self.parser, excerpt)
