"""Shell commands that interpreter code hands to a shell: `os.system("...")` and kin.

`shell_commands(family, code)` reads the code an interpreter runs (the code
string of `python3 -c`, `node -e`, `perl -e`, `ruby -e`, `php -r`, `lua -e`, or a
heredoc fed to one) and returns the shell command lines its string literals pass
to the language's shell-running calls (`rules.SHELL_CALLS`) and its command
literals (backticks, `qx{...}`, `%x(...)`, zx/Bun `` $`...` ``). The classifier
audits each one as nested shell code (`_Auditor.audit_code`), so every rule
applies to it.

It reads literals; it does not evaluate:

* one left-to-right pass splits the code into names, string literals (single,
  double and triple quotes, string prefixes, Perl `q{}`/`qq{}`, Ruby `%q()`,
  Lua `[[...]]`), command literals, and single-character operators, skipping
  comments. Escapes are decoded (`\\x63url` is `curl`); an interpolation
  (`{x}` in an f-string, `${x}` in a JS template, `#{x}` in Ruby) stands for one
  unknown word, `HOLE`; Perl and PHP `$var` stay as written, which the shell
  reads as a variable too;
* a call's argument is audited only when it is a literal: one string, adjacent
  strings or strings joined by the language's concatenation operator, and in
  Python a format template (`"curl {} | sh".format(u)`, `"... %s" % u`). A list
  of literals is an argv (`["sh", "-c", "..."]`), audited as the command it
  runs. Anything else (a variable, a call, a literal joined to a variable) is
  not audited;
* an unterminated string or comment runs to the end of the code (the language
  would reject the code; nothing after it runs).

Every regex here matches a run of one class or a fixed token, and every
character is consumed once, so the cost is linear in the length of the code.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shlex

from .rules import ARGUMENT_READERS, CODE_RUNNERS, SHELL_CALLS

__all__ = ["HOLE", "hands_arguments_to_code", "shell_commands"]

HOLE = "X"
"""Stands for an interpolated expression (`f"{x}"`, `` `${x}` ``, `"#{x}"`): one word."""

Token = tuple[str, str]
"""(kind, value): "name", "str" (decoded), "tmpl" (a JS template), "cmd" (a command
literal), "op" (one character), "other" (numbers, variables)."""

_SPACE = re.compile(r"\s+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JS_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_OTHER = re.compile(r"[\w.]+")          # a number or a sigil variable's name
_LUA_LONG = re.compile(r"\[=*\[")
_PY_PREFIXES = frozenset({"r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"})
_PERL_QUOTES = frozenset({"q", "qq", "qx", "qw", "m", "qr", "s", "tr", "y"})
_RUBY_PERCENT = frozenset("qQwWiIxrs")
_PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f",
                   "v": "\v", "e": "\x1b", "\n": ""}
_ESCAPE = re.compile(r"\\(x\{[0-9A-Fa-f]{1,8}\}|u\{[0-9A-Fa-f]{1,8}\}|x[0-9A-Fa-f]{1,2}"
                     r"|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|[0-7]{1,3}|.)", re.S)
_TRIPLE = {q: re.compile(rf"[^{q}\\]*(?:(?:\\.|{q}(?!{q}{q}))[^{q}\\]*)*{q}{q}{q}", re.S)
           for q in "'\""}
_INTERPOLATION = {
    "{": re.compile(r"\\.|\{\{|\}\}|[{}]", re.S),     # Python f-strings
    "${": re.compile(r"\\.|\$\{|[{}]", re.S),         # JS templates
    "#{": re.compile(r"\\.|#\{|[{}]", re.S),          # Ruby double quotes, backticks, %x
}


@functools.lru_cache(maxsize=256)
def _closing(delimiter: str) -> re.Pattern[str]:
    """The rest of a string up to its unescaped closing `delimiter` (unrolled: linear)."""
    d = re.escape(delimiter)
    return re.compile(rf"[^{d}\\]*(?:\\.[^{d}\\]*)*{d}", re.S)


@functools.lru_cache(maxsize=8)
def _brackets(opener: str) -> re.Pattern[str]:
    return re.compile(rf"\\.|[{re.escape(opener)}{re.escape(_PAIRS[opener])}]", re.S)


class _Unterminated(Exception):
    """A string or comment runs to the end of the code."""


def _delimited(code: str, pos: int, opener: str) -> tuple[str, int]:
    """The raw body after `opener` at `pos - 1` and the index after its closing delimiter.

    Bracket delimiters nest (`q{a{b}c}`); others close at the next unescaped copy.
    """
    closer = _PAIRS.get(opener)
    if closer is None:
        match = _closing(opener).match(code, pos)
        if match is None:
            raise _Unterminated
        return code[pos:match.end() - 1], match.end()
    depth = 1
    for match in _brackets(opener).finditer(code, pos):
        text = match.group()
        if text == opener:
            depth += 1
        elif text == closer:
            depth -= 1
            if depth == 0:
                return code[pos:match.start()], match.end()
    raise _Unterminated


def _unescape(body: str, *, keep_unknown: bool = False) -> str:
    """Decode the backslash escapes of a double-quoted string (C, Python, JS, Perl style)."""
    if "\\" not in body:
        return body

    def decode(match: re.Match[str]) -> str:
        escape = match.group(1)
        head = escape[0]
        try:
            if head in "xuU" and len(escape) > 1:
                return chr(int(escape[1:].strip("{}"), 16))
            if head in "01234567":
                return chr(int(escape, 8))
        except (ValueError, OverflowError):
            return match.group(0)
        simple = _SIMPLE_ESCAPES.get(head)
        if simple is not None:
            return simple
        return match.group(0) if keep_unknown else escape

    return _ESCAPE.sub(decode, body)


def _unescape_quotes(body: str, delimiter: str) -> str:
    """Single-quote strings (Perl, Ruby, PHP): only `\\\\` and an escaped delimiter."""
    if "\\" not in body:
        return body
    closer = _PAIRS.get(delimiter, delimiter)
    escapable = {"\\", delimiter, closer}
    out = []
    index = 0
    while True:
        found = body.find("\\", index)
        if found < 0 or found + 1 >= len(body):
            out.append(body[index:])
            return "".join(out)
        out.append(body[index:found])
        nxt = body[found + 1]
        out.append(nxt if nxt in escapable else "\\" + nxt)
        index = found + 2


def _fill(body: str, opener: str) -> str:
    """Replace each interpolation (`{x}`, `${x}`, `#{x}`) with `HOLE`, in one pass.

    Braces inside an interpolation nest; `{{` and `}}` outside one are Python's
    escaped braces. An unclosed interpolation runs to the end of the string.
    """
    if opener not in body and not (opener == "{" and "}" in body):
        return body
    out: list[str] = []
    start = 0        # start of the literal text not yet copied
    depth = 0
    for match in _INTERPOLATION[opener].finditer(body):
        text = match.group()
        if text[0] == "\\":
            continue                 # an escape: left for `_unescape`, or inside code
        if depth == 0:
            if text == opener:
                out.append(body[start:match.start()])
                out.append(HOLE)
                depth = 1
            elif opener == "{" and text in ("{{", "}}"):
                out.append(body[start:match.start()])
                out.append(text[0])
                start = match.end()
            continue                 # a lone brace outside is literal text
        for offset, char in enumerate(text):
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    start = match.start() + offset + 1
                    break
    if depth == 0:
        out.append(body[start:])
    return "".join(out)


def _skip(pattern: re.Pattern[str], code: str, pos: int) -> int:
    """The end of `pattern`'s run at `pos` (at least one character further)."""
    match = pattern.match(code, pos)
    return match.end() if match is not None and match.end() > pos else pos + 1


# -- the tokenizer ----------------------------------------------------------------------------

def _tokens(family: str, code: str) -> list[Token]:
    """Split `code` into tokens, one left-to-right pass; stops at an unterminated string."""
    tokens: list[Token] = []
    with contextlib.suppress(_Unterminated):
        _scan(family, code, tokens)
    return tokens


def _scan(family: str, code: str, tokens: list[Token]) -> None:
    name_re = _JS_NAME if family == "node" else _NAME
    hash_comment = family in ("python", "perl", "ruby", "php")
    slash_comment = family in ("node", "php")
    n = len(code)
    pos = 0
    while pos < n:
        char = code[pos]
        if char.isspace():
            pos = _skip(_SPACE, code, pos)
            continue
        if family == "lua" and code.startswith("--", pos):
            long = _LUA_LONG.match(code, pos + 2)
            if long is None:
                end = code.find("\n", pos)
                pos = n if end < 0 else end + 1
            else:
                close = "]" + "=" * (long.end() - long.start() - 2) + "]"
                end = code.find(close, long.end())
                if end < 0:
                    raise _Unterminated
                pos = end + len(close)
            continue
        if (char == "#" and hash_comment and not (family == "perl" and pos
                                                  and code[pos - 1] == "$")) or (
                slash_comment and code.startswith("//", pos)):
            end = code.find("\n", pos)
            pos = n if end < 0 else end + 1
            continue
        if slash_comment and code.startswith("/*", pos):
            end = code.find("*/", pos + 2)
            if end < 0:
                raise _Unterminated
            pos = end + 2
            continue
        if char in "'\"":
            pos = _string(family, code, pos, "", tokens)
            continue
        if char == "`":
            body, pos = _delimited(code, pos + 1, "`")
            if family == "node":
                tokens.append(("tmpl", _unescape(_fill(body, "${"))))
            elif family == "ruby":
                tokens.append(("cmd", _unescape(_fill(body, "#{"))))
            elif family in ("perl", "php"):
                tokens.append(("cmd", _unescape(body, keep_unknown=True)))
            else:
                tokens.append(("op", char))
            continue
        if family == "lua" and char == "[":
            long = _LUA_LONG.match(code, pos)
            if long is not None:
                close = "]" + "=" * (long.end() - long.start() - 2) + "]"
                end = code.find(close, long.end())
                if end < 0:
                    raise _Unterminated
                tokens.append(("str", code[long.end():end]))
                pos = end + len(close)
                continue
        if family == "ruby" and char == "%" and pos + 1 < n:
            kind = code[pos + 1]
            at = pos + 2 if kind in _RUBY_PERCENT else pos + 1
            if at < n and (at > pos + 1 or code[at] in "([{<|!/^") and not (
                    code[at].isalnum() or code[at].isspace() or code[at] in "=_"):
                opener = code[at]
                body, pos = _delimited(code, at + 1, opener)
                if kind in "qwi":
                    tokens.append(("str", _unescape_quotes(body, opener)))
                elif kind == "x":
                    tokens.append(("cmd", _unescape(_fill(body, "#{"))))
                else:
                    tokens.append(("str", _unescape(_fill(body, "#{"))))
                continue
        if family in ("perl", "php") and char in "$@%" and pos + 1 < n and (
                code[pos + 1].isalnum() or code[pos + 1] == "_"):
            pos = _skip(_OTHER, code, pos + 1)
            tokens.append(("other", "var"))
            continue
        name = name_re.match(code, pos)
        if name is not None:
            word = name.group()
            end = name.end()
            if family == "python" and end < n and code[end] in "'\"" \
                    and word.lower() in _PY_PREFIXES:
                pos = _string(family, code, end, word.lower(), tokens)
                continue
            if family == "perl" and word in _PERL_QUOTES:
                after = _perl_quote(code, end, word, tokens)
                if after is not None:
                    pos = after
                    continue
            tokens.append(("name", word))
            pos = end
            continue
        if char.isdigit():
            pos = _skip(_OTHER, code, pos)
            tokens.append(("other", "number"))
            continue
        tokens.append(("op", char))
        pos += 1


def _string(family: str, code: str, pos: int, prefix: str, tokens: list[Token]) -> int:
    """A quoted string at `pos` (its quote); returns the index after it."""
    quote = code[pos]
    if family == "python" and code.startswith(quote * 3, pos):
        match = _TRIPLE[quote].match(code, pos + 3)
        if match is None:
            raise _Unterminated
        body, end = code[pos + 3:match.end() - 3], match.end()
    else:
        body, end = _delimited(code, pos + 1, quote)
    if family == "python":
        if "f" in prefix or "t" in prefix:
            body = _fill(body, "{")
        value = body if "r" in prefix else _unescape(body, keep_unknown=True)
    elif quote == "'" and family in ("perl", "ruby", "php"):
        value = _unescape_quotes(body, quote)
    elif family == "ruby":
        value = _unescape(_fill(body, "#{"))
    else:
        value = _unescape(body, keep_unknown=family == "php")
    tokens.append(("str", value))
    return end


def _perl_quote(code: str, pos: int, word: str, tokens: list[Token]) -> int | None:
    """Perl's quote-like operators (`q{}`, `qq//`, `qx()`, `s///`, `tr///`) at `pos`."""
    at = pos
    n = len(code)
    while at < n and code[at] in " \t":
        at += 1
    if at >= n:
        return None
    opener = code[at]
    if opener.isalnum() or opener.isspace() or opener in "_=,;)}>" or (
            at > pos and opener not in _PAIRS):
        return None       # `q => 1`, `s = 2`, a name: not a quote
    body, end = _delimited(code, at + 1, opener)
    if word in ("s", "tr", "y"):     # a second body: `s/a/b/`, `s{a}{b}`
        if opener in _PAIRS:
            while end < n and code[end].isspace():
                end += 1
            if end >= n:
                raise _Unterminated
            _, end = _delimited(code, end + 1, code[end])
        else:
            _, end = _delimited(code, end, opener)
        tokens.append(("other", word))
    elif word == "q":
        tokens.append(("str", _unescape_quotes(body, opener)))
    elif word == "qq":
        tokens.append(("str", _unescape(body)))
    elif word == "qx":
        tokens.append(("cmd", body if opener == "'" else _unescape(body, keep_unknown=True)))
    elif word == "qw":
        tokens.append(("other", "qw"))
    else:
        tokens.append(("other", word))      # m//, qr//: a pattern
    return end


# -- the calls --------------------------------------------------------------------------------

_CONCAT = {"python": "+", "node": "+", "ruby": "+", "perl": ".", "php": ".", "lua": ".."}
_IMPLICIT_CONCAT = frozenset({"python", "ruby"})
_PARENLESS = frozenset({"perl", "ruby"})
_ARG_ENDS = frozenset({",", ")", ";", "]", "}"})
_CONTINUES = frozenset(".+-*/%=<>?~[(:")     # after a paren-less argument: it goes on

Arg = str | list[str]


class _Calls:
    """Reads the literal arguments of calls from a token list, left to right."""

    def __init__(self, family: str, tokens: list[Token]) -> None:
        self.family = family
        self.tokens = tokens
        self.concat = _CONCAT.get(family, "+")

    def kind(self, index: int) -> str:
        return self.tokens[index][0] if index < len(self.tokens) else ""

    def value(self, index: int) -> str:
        return self.tokens[index][1] if index < len(self.tokens) else ""

    def is_op(self, index: int, ops: str | frozenset[str]) -> bool:
        return self.kind(index) == "op" and self.value(index) in ops

    def args(self, index: int, paren: bool) -> tuple[list[Arg], int]:
        """The leading literal arguments from `index`, up to the first that is not literal."""
        args: list[Arg] = []
        while index < len(self.tokens):
            arg, index = self.arg(index, paren)
            if arg is None:
                break
            args.append(arg)
            if not self.is_op(index, ","):
                break
            index += 1
        return args, index

    def arg(self, index: int, paren: bool) -> tuple[Arg | None, int]:
        if self.is_op(index, "["):
            items: list[str] = []
            index += 1
            while index < len(self.tokens):
                if self.is_op(index, "]"):
                    return items, index + 1
                item, index = self.literal(index, True)
                if item is None:
                    return None, index
                items.append(item)
                if self.is_op(index, ","):
                    index += 1
                elif not self.is_op(index, "]"):
                    return None, index
            return None, index
        return self.literal(index, paren)

    def literal(self, index: int, paren: bool) -> tuple[str | None, int]:
        """A string literal, possibly concatenated from several, ending the argument."""
        if self.kind(index) not in ("str", "tmpl"):
            return None, index
        parts = [self.value(index)]
        index += 1
        concat = self.concat
        while index < len(self.tokens):
            kind = self.kind(index)
            if kind == "str" and self.family in _IMPLICIT_CONCAT:
                parts.append(self.value(index))
                index += 1
            elif (self.is_op(index, concat[0]) and self.kind(index + len(concat)) == "str"
                  and all(self.is_op(index + k, concat[k]) for k in range(len(concat)))):
                parts.append(self.value(index + len(concat)))
                index += len(concat) + 1
            else:
                break
        text = "".join(parts)
        if index >= len(self.tokens) or self.is_op(index, _ARG_ENDS):
            return text, index
        if self.family == "python" and (self.is_op(index, "%") or (
                self.is_op(index, ".") and self.value(index + 1) == "format")):
            return text, index           # a format template: its shape is literal
        if not paren and not self.is_op(index, _CONTINUES) and not (
                self.kind(index) == "name" and self.value(index) == "x"):   # Perl's `"a" x 3`
            return text, index           # `system "cmd" or die`, a new statement
        return None, index


def _argv(items: list[str]) -> str:
    return shlex.join(items) if items else ""


def _commands_of(style: str, args: list[Arg]) -> list[str]:
    """The command lines a call with these leading literal arguments runs."""
    if not args:
        return []
    first = args[0]
    if isinstance(first, list):
        return [_argv(first)]
    second = args[1] if len(args) > 1 else None
    if style == "execv":
        return [_argv(second)] if isinstance(second, list) else []
    if style == "execl":
        strings: list[str] = []
        for arg in args[1:]:
            if not isinstance(arg, str):
                break
            strings.append(arg)
        return [_argv(strings)]
    if style == "spawn" and isinstance(second, list):
        return [_argv([first, *second])]
    if style == "system" and isinstance(second, str):
        strings = []
        for arg in args:
            if not isinstance(arg, str):
                break
            strings.append(arg)
        return [_argv(strings)]
    return [first]


def _mentions(family: str, code: str, calls: dict[str, str]) -> bool:
    """A cheap pre-check: could `code` hold a shell call or a command literal at all?"""
    if family in ("perl", "ruby", "php") and "`" in code:
        return True
    if family == "perl" and "qx" in code:
        return True
    if family == "ruby" and "%x" in code:
        return True
    if family == "node" and "`" in code and "$" in code:
        return True
    return any(name in code for name in calls)


def shell_commands(family: str, code: str, limit: int = 1 << 30) -> list[tuple[str, str]]:
    """(how, command line) for each literal command `code` hands to a shell.

    `family` is an interpreter family (`rules.interpreter_family`); families
    without shell calls (shells themselves, `su`, the generic ones) give nothing.
    The scan stops once more than `limit` commands are found.
    """
    calls = SHELL_CALLS.get(family)
    if calls is None or not code or not _mentions(family, code, calls):
        return []
    tokens = _tokens(family, code)
    reader = _Calls(family, tokens)
    found: list[tuple[str, str]] = []
    count = len(tokens)
    index = 0
    while index < count and len(found) <= limit:
        kind, value = tokens[index]
        if kind == "cmd":
            found.append(("command literal", value))
        elif kind == "name" and value == "$" and family == "node" \
                and reader.kind(index + 1) == "tmpl":
            found.append(("$`...`", reader.value(index + 1)))
            index += 2
            continue
        elif kind == "name" and value in calls and not (
                index and reader.is_op(index - 1, ":") and family == "ruby"):
            paren = reader.is_op(index + 1, "(")
            if paren or family in _PARENLESS:
                args, end = reader.args(index + (2 if paren else 1), paren)
                for command in _commands_of(calls[value], args):
                    if command.strip():
                        found.append((f"{value}(...)", command))
                index = max(end, index + 1)
                continue
        index += 1
    return found


def hands_arguments_to_code(family: str, code: str) -> bool:
    """Whether interpreter code reads its command-line arguments and could run them.

    `python3 -c 'import sys; print(sys.argv[1])' "$(curl u)"` only prints its
    argument (a value); `python3 -c 'import os,sys; os.system(sys.argv[1])' ARG`
    runs it, so there the arguments are judged like the code itself.
    """
    readers = ARGUMENT_READERS.get(family)
    if not readers or not any(reader in code for reader in readers):
        return False
    return any(runner in code for runner in CODE_RUNNERS) or any(
        call in code for call in SHELL_CALLS.get(family, {}))
