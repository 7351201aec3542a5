"""Reading the words of one simple command: names, options and command positions.

Pure functions over `script.Word` lists, shared by the walk (`walk.py`), the
taint tracking (`taint.py`) and the per-command rules (`commands.py`): which
word runs (after assignments, exec wrappers and expansions that may vanish),
where an interpreter's code string or script operand is, and whether a
command reads its program from stdin.
"""

from __future__ import annotations

import itertools
import re

from .rules import (
    CODE_FLAGS,
    DECODERS,
    EVAL_WORDS,
    FETCHERS,
    SOURCE_STDIN,
    WRAPPERS,
    interpreter_family,
)
from .script import SUB_MARK, Command, Compound, Script, Word

NAME_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]\n]*\])?\+?=")
_LITERAL_SUB = re.compile(r"(?:\$\(|`|<\(|>\()[ \t\n\"'\\(]*([^ \t\n;&|()<>`\"'\\]+)")
_ONLY_PARAMS = re.compile(r"(?:\$(?:\{[^{}]*\}|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]))+")
_ALL_ARGS = re.compile(r"\$@|\$\{@\}|\$\{[A-Za-z_][A-Za-z0-9_]*\[[@*]\]\}")


def basename(text: str) -> str:
    return text.rpartition("/")[2] if "/" in text else text


def command_name(word: Word) -> str:
    """The name a static command word runs: basename, first brace alternative."""
    text = word.text
    if not word.quoted and "{" in text and "," in text:
        text = brace_expand(text)[0]
    return basename(text)


def words_text(words: list[Word], limit: int = 12) -> str:
    shown = " ".join(w.text for w in words[:limit])
    return shown + (" ..." if len(words) > limit else "")


def literal_risky(text: str) -> str | None:
    """A substitution spelled literally in `text` that would run a risky command."""
    if "(" not in text and "`" not in text:
        return None
    for match in _LITERAL_SUB.finditer(text):
        name = basename(match.group(1))
        if (name in FETCHERS or name in DECODERS or name in EVAL_WORDS or name == "."
                or name in WRAPPERS or interpreter_family(name) is not None):
            return match.group(0).strip()
    return None


def decodes(name: str, args: list[Word]) -> bool:
    flags = DECODERS.get(name)
    if flags is None:
        return False
    if not flags:
        return True
    for arg in args:
        text = arg.text
        if text in flags:
            return True
        if text.startswith("-") and not text.startswith("--") and any(
                c in flags for c in text[1:]):
            return True
    return False


def option_cluster(text: str) -> str:
    return text[1:] if text.startswith("-") and not text.startswith("--") and len(text) > 1 \
        else ""



def may_vanish(word: Word) -> bool:
    """An expansion that may expand to no word at all (`$unset`, `"$@"`).

    Before a command it disappears and the next word runs: `$nothing $(curl u)`
    runs what curl prints.
    """
    if word.subs or not word.params:
        return False
    if word.quoted:
        return _ALL_ARGS.fullmatch(word.text) is not None
    return _ONLY_PARAMS.fullmatch(word.text) is not None


def resolve(words: list[Word], start: int = 0, vanished: list[int] | None = None,
             ) -> tuple[int | None, list[str]]:
    """Index of the word that runs, skipping exec wrappers and their options, and the wrappers.

    With `vanished`, expansions that may be empty are skipped too (and recorded
    there): each of them and the word after it are command positions.
    """
    used: list[str] = []
    i = start
    count = len(words)
    while i < count:
        word = words[i]
        if not word.static:
            if vanished is not None and i + 1 < count and may_vanish(word):
                vanished.append(i)
                i += 1
                continue
            return i, used
        name = basename(word.text)
        wrapper = WRAPPERS.get(name)
        if wrapper is None:
            return i, used
        used.append(name)
        i += 1
        while i < count:
            w = words[i]
            text = w.text
            if wrapper.assignments and not w.subs and NAME_ASSIGN.match(text):
                i += 1          # `env X=$HOME/y cmd`: a value may expand; the name may not
                continue
            if not w.static:
                break
            if text == "--":
                i += 1
                break
            if name == "command" and text in ("-v", "-V"):
                return i - 1 if words[i - 1].text == "command" else i, used  # a lookup
            if (text.startswith("-") and len(text) > 1 and name != "command") or (
                    name == "command" and text == "-p"):
                i += 2 if text in wrapper.takes_arg else 1
                continue
            break
        i += wrapper.positional
    return None, used


def interpreter_options(words: list[Word], index: int, family: str,
                         ) -> tuple[int | None, int | None, set[str], int]:
    """For the interpreter at `index`: (code flag word index, first operand index, short
    flags seen, index where the option scan stopped)."""
    flags = CODE_FLAGS[family]
    seen: set[str] = set()
    j = index + 1
    count = len(words)
    while j < count:
        text = words[j].text
        if text == "--" or text == "-":
            return None, (j + 1 if text == "--" else j), seen, j
        if flags.words and text[:1] == "-":
            lowered = text.lower()
            if lowered in flags.words:
                return j, None, seen, j
            if lowered in flags.stop_opts:
                return None, j, seen, j
            j += 2 if lowered in flags.takes_arg else 1
            continue
        if text.startswith("--"):
            key = text.partition("=")[0]
            if key in flags.long:
                return j, None, seen, j
            j += 2 if text in flags.takes_arg else 1
            continue
        if len(text) > 1 and text[0] in "-+":
            if text in flags.takes_arg:
                j += 2
                continue
            if text in flags.stop_opts:
                return None, j, seen, j   # `python -m module`: the module is the program
            for char in text[1:]:
                if char in flags.short:
                    return j, None, seen, j
                seen.add(char)
            j += 1
            continue
        return None, j, seen, j
    return None, None, seen, j


def code_value(words: list[Word], code_index: int, family: str) -> int:
    """The index of the code a code flag at `code_index` takes: the next word, or for a
    shell the first word that is not an option (`bash -c -e -- CODE`)."""
    value = code_index + 1
    if family != "shell":
        return value
    takes_arg = CODE_FLAGS[family].takes_arg
    while value < len(words):
        text = words[value].text
        if text == "--":
            return value + 1
        if len(text) < 2 or text[0] not in "-+":
            return value
        value += 2 if text in takes_arg else 1
    return value


def reads_code_from_stdin(words: list[Word], index: int | None, name: str | None,
                           ) -> str | None:
    """The interpreter family when the command at `index` reads its program from stdin."""
    if index is None or name is None:
        return None
    if name in ("source", "."):
        first = words[index + 1].text if index + 1 < len(words) else None
        return "shell" if first in SOURCE_STDIN else None
    if name == "eval":
        return "shell" if any(
            sub.body.pipelines and not sub.arith for w in words[index + 1:] for sub in w.subs
            if reads_stdin_only(sub.body)) else None
    family = interpreter_family(name)
    if family is None or family == "su":
        return None
    code, operand, seen, _ = interpreter_options(words, index, family)
    if code is not None:
        return None
    if operand is None:
        return family
    if words[operand].text in SOURCE_STDIN or (family == "shell" and "s" in seen):
        return family
    return None


STDIN_EXECUTORS = frozenset({"eval", "source", "."})


def triggers(words: list[Word]) -> tuple[int | None, list[int]]:
    """The first `eval`/`source` word and every interpreter word, wherever they stand."""
    eval_index = None
    interpreters = []
    for index, word in enumerate(words):
        if not word.static:
            continue
        text = word.text
        if eval_index is None and text in EVAL_WORDS:
            eval_index = index
        name = text.rpartition("/")[2] if "/" in text else text
        if interpreter_family(name) is not None:
            interpreters.append(index)
    return eval_index, interpreters


def script_reads_code(script: Script) -> str | None:
    """The family of the interpreter that first reads stdin in `script` (`>(sh)`)."""
    first = script.pipelines[0].stages[0] if script.pipelines else None
    if not isinstance(first, Command):
        return None
    index, _ = resolve(first.words)
    if index is None or not first.words[index].static:
        return None
    return reads_code_from_stdin(first.words, index, basename(first.words[index].text))


def reads_stdin_only(script: Script) -> bool:
    """`$(cat)`, `$(cat -)`: a substitution that just returns stdin."""
    if len(script.pipelines) != 1 or len(script.pipelines[0].stages) != 1:
        return False
    stage = script.pipelines[0].stages[0]
    if not isinstance(stage, Command) or not stage.words:
        return False
    return stage.words[0].text == "cat" and all(w.text == "-" for w in stage.words[1:])



def stage_text(stage: Command | Compound) -> str:
    if isinstance(stage, Command):
        return words_text(stage.words, 4)
    return f"({stage.kind} ...)"



# -- expansions the audit resolves ---------------------------------------------------------------

MAX_EXPANSION = 64
"""Words one expansion makes at most: a larger brace expansion is left as written; `$IFS`
and a variable's value split into at most this many words, the rest staying one word."""

MAX_BRACE_WORD = 256
"""Longer words are not brace-expanded (the search is quadratic in the braces of a word)."""

_IFS = re.compile(r"\$\{IFS\}|\$IFS(?![A-Za-z0-9_])")
_PARAM_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def normalize(words: list[Word], values: dict[str, str]) -> list[Word]:
    """`words` as the shell expands them, where that is known statically.

    * `${IFS}`/`$IFS` in an unquoted word separates words (`rm${IFS}-rf${IFS}/`),
      unless the command line gave IFS a value of its own;
    * a variable whose static value is known is replaced by it (`X=rm; $X -rf /`),
      and an unquoted result is split at blanks;
    * brace expansion in an unquoted, expansion-free word makes its words
      (`{rm,-rf,/}`, `/{bin,etc}`).

    Words left alone are returned as they are (the same objects).
    """
    out: list[Word] | None = None
    for index, word in enumerate(words):
        expanded = _expanded(word, values)
        if expanded is not None:
            if out is None:
                out = list(words[:index])
            out.extend(expanded)
        elif out is not None:
            out.append(word)
    return words if out is None else out


def _expanded(word: Word, values: dict[str, str]) -> list[Word] | None:
    if word.params:
        if word.quoted:
            return _substituted(word, values) if not word.subs else None
        if "IFS" in word.params and "IFS" not in values:
            return _split_ifs(word)
        if not word.subs:
            return _substituted(word, values)
        return None
    if not word.quoted and not word.subs and "{" in word.text and "," in word.text \
            and len(word.text) <= MAX_BRACE_WORD:
        texts = brace_expand(word.text)
        if len(texts) > 1:
            return [Word(text, word.start) for text in texts]
    return None


def _split_ifs(word: Word) -> list[Word]:
    pieces: list[Word] = []
    subs = list(word.subs)
    texts = [text for text in _IFS.split(word.text, MAX_EXPANSION) if text]
    for text in texts:
        marks = text.count(SUB_MARK)
        mine, subs = subs[:marks], subs[marks:]
        params = [p for p in word.params
                  if p != "IFS" and (f"${p}" in text or f"${{{p}" in text)]
        pieces.append(Word(text, word.start, subs=mine, params=params))
    return pieces


def _substituted(word: Word, values: dict[str, str]) -> list[Word] | None:
    if not all(param in values for param in word.params):
        return None

    def value(match: re.Match[str]) -> str:
        return values[match.group(1) or match.group(2)]

    text = _PARAM_REF.sub(value, word.text)
    if "$" in text:
        return None      # an expansion with operators (`${x:-y}`): left as written
    if word.quoted:
        return [Word(text, word.start, quoted=True)]
    return [Word(part, word.start) for part in text.split(maxsplit=MAX_EXPANSION)]


def brace_expand(text: str) -> list[str]:
    """The words brace expansion makes of `text` (`a{b,c}d` -> `abd acd`), or `[text]`
    when there is no comma list or more than `MAX_EXPANSION` words would come out."""
    results = _brace(text)
    return results if results is not None and len(results) <= MAX_EXPANSION else [text]


def _brace(text: str) -> list[str] | None:
    open_at = text.find("{")
    while open_at >= 0:
        depth = 0
        commas: list[int] = []
        for index in range(open_at, len(text)):
            char = text[index]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    if not commas:
                        break
                    bounds = [open_at, *commas, index]
                    prefix, suffix = text[:open_at], text[index + 1:]
                    tails = _brace(suffix) or [suffix]
                    out: list[str] = []
                    for start, end in itertools.pairwise(bounds):
                        part = text[start + 1:end]
                        for alternative in _brace(part) or [part]:
                            out.extend(prefix + alternative + tail for tail in tails)
                        if len(out) > MAX_EXPANSION:
                            return None
                    return out
            elif char == "," and depth == 1:
                commas.append(index)
        else:
            return None
        open_at = text.find("{", open_at + 1)
    return None
