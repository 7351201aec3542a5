"""Loops that create processes without bound: the fork bomb written as a loop.

A loop is a fork bomb when each pass starts a command in the background (`&`,
directly, in a group or subshell, or inside shell code the body runs: `sh -c
'... &'`, `eval '... &'`), nothing in the body waits for it or leaves the loop
(`wait`, `break`, `exit`, `return`), and the passes have no bound the sandbox
could bear:

* a `while` loop whose condition always succeeds, or an `until` loop whose
  condition always fails: `true`, `:`, `false`, `echo`, `sleep N`, a `test`/`[`
  /`[[` of literals (`[ 1 ]`, `[ a = b ]`), a literal `((1))`; names go through
  `command`/`builtin` and variables whose value is known (`x=true; while $x`);
* a C-style `for ((...))` loop with no condition, or whose condition's largest
  number is past `LOOP_PROCESS_LIMIT`;
* a `for NAME in WORDS` loop over more than `LOOP_PROCESS_LIMIT` words, counting
  brace ranges (`{1..100000}`) and `$(seq ...)` by their size.

Only what the text states is judged: a condition that depends on the system
(`[ -e / ]`, `read` from a pipe) or a list read at run time is not assumed
endless.
"""

from __future__ import annotations

import re

from .rules import interpreter_family
from .script import Command, Compound, Pipeline, Script, Word
from .splitter import Unauditable, split
from .words import basename, code_value, interpreter_options

__all__ = ["LOOP_PROCESS_LIMIT", "process_loop"]

LOOP_PROCESS_LIMIT = 1024
"""Background processes one loop may start before it counts as a fork bomb (the bwrap
provider's default process limit)."""

_NESTED_DEPTH = 3
_LOOP_EXITS = frozenset({"break", "exit", "return", "wait"})
_ALWAYS_SUCCEED = frozenset({"true", ":", "echo", "printf", "sleep"})
_RANGE = re.compile(r"\{(-?[0-9]{1,12})\.\.(-?[0-9]{1,12})(?:\.\.(-?[0-9]{1,12}))?\}")
_NUMBER = re.compile(r"[0-9]{1,18}")


def process_loop(compound: Compound, values: dict[str, str]) -> str | None:
    """Why `compound` (a `while`, `until` or `for` loop) creates processes without bound,
    or None. `values` are the variables whose value is known."""
    pipelines = compound.body.pipelines
    if compound.kind in ("while", "until"):
        if len(pipelines) < 2 or not _starts_background(Script(pipelines[1:]), _NESTED_DEPTH):
            return None
        outcome = _condition(pipelines[0], values)
        if outcome is (compound.kind == "while"):
            return f"an endless {compound.kind} loop starts commands in the background"
        return None
    if compound.kind != "for":
        return None
    if not compound.words and pipelines and _arith_header(pipelines[0]):
        bound = _c_style_bound(pipelines[0])
        body = Script(pipelines[1:])
    else:
        bound = _word_count(compound.words[1:]) if compound.words else None
        body = compound.body
    if bound is not None and bound <= LOOP_PROCESS_LIMIT:
        return None
    if not _starts_background(body, _NESTED_DEPTH):
        return None
    passes = "endless" if bound is None else f"{bound:,}-pass"
    return f"a {passes} for loop starts commands in the background"


# -- conditions ------------------------------------------------------------------------------


def _condition(pipeline: Pipeline, values: dict[str, str]) -> bool | None:
    """True when the condition always succeeds, False when it always fails, else None."""
    if len(pipeline.stages) != 1:
        return None
    stage = pipeline.stages[0]
    if isinstance(stage, Compound):
        number = _arith_literal(stage)
        return None if number is None else number != 0
    words = [_known(word, values) for word in stage.words]
    while words and words[0] in ("command", "builtin"):
        words = words[1:]
    if not words or any(word is None for word in words):
        return None
    name = basename(words[0] or "")
    if name == "false":
        return False
    if name in _ALWAYS_SUCCEED:
        return True
    if name in ("[", "test", "[["):
        args = [w or "" for w in words[1:]]
        if name != "test":
            if not args or args[-1] != ("]" if name == "[" else "]]"):
                return None
            args = args[:-1]
        return _test(args)
    return None


def _known(word: Word, values: dict[str, str]) -> str | None:
    """The text of `word` when it is known: static, or a single variable of known value."""
    if word.static:
        return word.text
    if not word.subs and len(word.params) == 1:
        name = word.params[0]
        if name in values and word.text in (f"${name}", f"${{{name}}}"):
            return values[name]
    return None


def _test(args: list[str]) -> bool | None:
    """`test ARGS` of literals: its outcome, or None when it is not a pure literal test."""
    if args[:1] == ["!"]:
        inner = _test(args[1:])
        return None if inner is None else not inner
    if not args:
        return False
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2:
        return {"-n": args[1] != "", "-z": args[1] == ""}.get(args[0])
    if len(args) == 3:
        left, operator, right = args
        if operator in ("=", "=="):
            return left == right
        if operator == "!=":
            return left != right
        try:
            a, b = int(left), int(right)
        except ValueError:
            return None
        compare = {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-le": a <= b, "-gt": a > b,
                   "-ge": a >= b}
        return compare.get(operator)
    return None


def _arith_header(pipeline: Pipeline) -> bool:
    return len(pipeline.stages) == 1 and isinstance(pipeline.stages[0], Compound) \
        and pipeline.stages[0].arith


def _arith_inner(stage: Compound) -> Script:
    """The expression of `((...))`, whose two parentheses both front ends nest."""
    body = stage.body
    while len(body.pipelines) == 1 and len(body.pipelines[0].stages) == 1 \
            and isinstance(body.pipelines[0].stages[0], Compound):
        body = body.pipelines[0].stages[0].body
    return body


def _arith_literal(stage: Compound) -> int | None:
    """The number `((N))` tests (bashlex reads `((1))` as two subshells: the same shape)."""
    if not stage.arith and stage.kind != "subshell":
        return None
    inner = _arith_inner(stage).pipelines
    if len(inner) != 1 or len(inner[0].stages) != 1:
        return None
    command = inner[0].stages[0]
    if not isinstance(command, Command) or len(command.words) != 1 or command.redirects:
        return None
    text = command.words[0].text
    return int(text) if _NUMBER.fullmatch(text) else None


def _c_style_bound(header: Pipeline) -> int | None:
    """`for ((INIT; COND; STEP))`: None without a condition (endless), else the largest
    number the condition names (`i < 100000`), or 0 when it names none."""
    stage = header.stages[0]
    assert isinstance(stage, Compound)
    parts = _arith_inner(stage).pipelines
    if len(parts) < 2:
        return None     # `for ((;;))`
    condition = parts[1]
    texts = [w.text for s in condition.stages if isinstance(s, Command) for w in s.words]
    texts += [r.target.text for s in condition.stages if isinstance(s, Command)
              for r in s.redirects if r.target is not None]
    numbers = [int(n) for text in texts for n in _NUMBER.findall(text)]
    return max(numbers, default=0)


def _word_count(words: list[Word]) -> int:
    """How many words a `for` list expands to, as far as its text says."""
    total = 0
    for word in words:
        count = 1
        for match in _RANGE.finditer(word.text):
            start, end = int(match.group(1)), int(match.group(2))
            step = abs(int(match.group(3) or 1)) or 1
            count *= abs(end - start) // step + 1
        for sub in word.subs:
            count *= _seq_count(sub.body) or 1
        total += count
    return total


def _seq_count(script: Script) -> int | None:
    """The number of lines `seq [FIRST [STEP]] LAST` prints, when that is the whole script."""
    if len(script.pipelines) != 1 or len(script.pipelines[0].stages) != 1:
        return None
    command = script.pipelines[0].stages[0]
    if not isinstance(command, Command) or not command.words \
            or basename(command.words[0].text) != "seq":
        return None
    try:
        numbers = [int(w.text) for w in command.words[1:]]
    except ValueError:
        return None
    if len(numbers) == 1:
        return max(numbers[0], 0)
    if len(numbers) == 2:
        return max(numbers[1] - numbers[0] + 1, 0)
    if len(numbers) == 3 and numbers[1]:
        return max((numbers[2] - numbers[0]) // numbers[1] + 1, 0)
    return None


# -- the body --------------------------------------------------------------------------------


def _starts_background(script: Script, depth: int) -> bool:
    """Whether `script` backgrounds a command (in groups, subshells or shell code nested up
    to `depth` deep) and has no `break`/`exit`/`return`/`wait`."""
    background = False
    for pipeline in script.pipelines:
        for stage in pipeline.stages:
            if isinstance(stage, Command):
                if stage.words and stage.words[0].text in _LOOP_EXITS:
                    return False
                if depth > 0 and not pipeline.background:
                    nested = _shell_code(stage)
                    if nested is not None and _starts_background(nested, depth - 1):
                        background = True
            elif stage.name is None and depth > 0 and _starts_background(stage.body, depth - 1):
                background = True
        background = background or pipeline.background
    return background


def _shell_code(command: Command) -> Script | None:
    """The script a command runs as shell code: `sh -c CODE`, `eval ARGS` (literal only)."""
    words = command.words
    if not words or not words[0].static:
        return None
    name = basename(words[0].text)
    if name == "eval":
        code = " ".join(word.text for word in words[1:])
    elif interpreter_family(name) == "shell":
        code_index, _, _, _ = interpreter_options(words, 0, "shell")
        if code_index is None:
            return None
        value = code_value(words, code_index, "shell")
        if value >= len(words):
            return None
        code = words[value].text
    else:
        return None
    if "&" not in code:
        return None
    try:
        return split(code)
    except Unauditable:
        return None
