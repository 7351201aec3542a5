"""Which front end reads a command: bashlex where it parses faithfully, else the tokenizer.

The tokenizer (`splitter.py`) runs first: it is linear, measures nesting and
enforces the work budget. bashlex (`bashlex_walker.py`) then gets the short,
shallow commands it can take, except commands of plain words only, which both
front ends read the same way; their script is built straight from the words
(`splitter.split_plain`, what the tokenizer would build).
"""

from __future__ import annotations

import re
from typing import Literal

from . import bashlex_walker, parse_worker
from .script import Script
from .splitter import Budget, split, split_plain

__all__ = ["Parser", "parse", "plain_words"]

Parser = Literal["auto", "tokenizer", "bashlex"]

# A command name, then arguments, of characters no shell treats specially: no quoting,
# expansion, globbing, redirection, operator, comment or assignment in command position.
_PLAIN_COMMAND = re.compile(r"[A-Za-z0-9_./+-]+(?: +[A-Za-z0-9_./:,+@%=-]+)*")
_RESERVED_WORDS = frozenset({"if", "then", "else", "elif", "fi", "for", "while", "until",
                             "do", "done", "case", "esac", "select", "function", "time",
                             "coproc", "in"})


def plain_words(text: str) -> bool:
    """Whether `text` is one simple command of plain words (most agents' commands).

    For such a command bashlex and the tokenizer build the same script (the
    corpus holds both front ends to one table), so bashlex, the slower of the
    two, is skipped.
    """
    stripped = text.strip(" ")
    return (_PLAIN_COMMAND.fullmatch(stripped) is not None
            and stripped.split(" ", 1)[0] not in _RESERVED_WORDS)


def _depth_hint(text: str) -> int:
    """A cheap upper bound of nesting for the bashlex gate (openers count)."""
    return (text.count("$(") + text.count("`") // 2 + text.count("<(") + text.count(">(")
            + text.count("${"))


def parse(text: str, parser: Parser, budget: Budget) -> tuple[Script, str]:
    """`text` as a `Script`, and the name of the front end that read it.

    Raises what `splitter.split` raises (`TooDeep`, `TooComplex`).
    """
    if parser != "bashlex" and plain_words(text):
        return split_plain(text, budget), "tokenizer"
    script = split(text, budget=budget)
    if parser == "tokenizer":
        return script, "tokenizer"
    if bashlex_walker.eligible(text, _depth_hint(text)):
        try:
            return parse_worker.parse(text), "bashlex"
        except bashlex_walker.Unsupported:
            pass
    return script, "tokenizer"
