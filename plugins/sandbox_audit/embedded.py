"""Code carried in a command's options and operands: `awk 'BEGIN{system("...")}'` and kin.

`embedded_code(name, args)` reads the arguments of a command listed in
`rules.CODE_OPTIONS` and returns each piece of code it runs: the command lines
of `flock -c`, `tar --to-command`, `ssh -o ProxyCommand=`, `git -c core.pager=`,
`env -S`, `watch`, `parallel`, and the shell commands inside awk, sed and vim
programs. The walk audits each as nested shell code, like the code string of
`sh -c`.

`code_values(name, args)` names the arguments that hold code, literal or not:
the walk treats a risky substitution there as code (`awk "$(curl u)"`).
`awk_network(program)` tells an awk program that opens a network file (gawk's
`/inet/tcp/...`: a socket) and whether it also runs commands (a reverse shell).

Only literal text is read; nothing is evaluated. Each scan is one pass over
its text (the awk and vim patterns match runs of one class between fixed
tokens), so the cost stays linear.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from .rules import CODE_OPTIONS, CodeOptions
from .script import Word

__all__ = ["Code", "CodeValue", "awk_network", "awk_programs", "code_values", "embedded_code"]


@dataclass(frozen=True)
class Code:
    """One piece of code a command runs.

    `text` is a command line (empty when the command runs its *input* as
    commands: sed's bare `e`, awk's `system($0)`). `stdin`: the command line
    reads the command's data on stdin (`tar --to-command`, awk's `print | "sh"`).
    """

    what: str
    text: str
    position: int
    stdin: bool = False

    @property
    def runs_input(self) -> bool:
        return not self.text


def embedded_code(name: str, args: list[Word], limit: int = 1 << 30) -> list[Code]:
    """Every piece of code the command `name` with arguments `args` runs (a program's
    scan stops once more than `limit` are found)."""
    found: list[Code] = []
    for value in code_values(name, args):
        if not value.readable:
            continue
        if value.kind == "program":
            found.extend(_program(value.spec.language, value.text, value.what,
                                  value.position, limit))
        elif value.kind == "split" or value.kind == "joined":
            found.append(Code(value.what, value.text, value.position))
        elif value.kind == "config":
            found.extend(_setting(value.spec, value.text, value.what, value.position))
        else:
            found.extend(_option_value(value.spec, value.kind, value.text, value.what,
                                       value.position))
    return found


@dataclass(frozen=True)
class CodeValue:
    """One place where a command's arguments hold code: its kind (see `CodeOptions`, plus
    ``"joined"`` and ``"config"`` operands), its text, the words it is made of, and
    whether the text is read as code (`readable`: no substitution in an option word or a
    program operand; a parameter in a value read whole, like `-c "$HOME/x; y"`, is)."""

    spec: CodeOptions
    kind: str
    text: str
    what: str
    position: int
    words: tuple[Word, ...]
    readable: bool = True


def code_values(name: str, args: list[Word]) -> Iterator[CodeValue]:
    """Every argument (or run of arguments) of `name` whose value is code, static or not:
    the value of a code option, a program operand, the command line of `watch`. A keyed
    setting (`git -c KEY=VALUE`) counts only when its key names a command."""
    spec = CODE_OPTIONS.get(name)
    if spec is None:
        return
    operands: list[Word] = []
    program_given = False
    index = 0
    count = len(args)
    while index < count:
        word = args[index]
        text = word.text
        index += 1
        if text == "--" and not operands:
            operands.extend(args[index:])
            break
        following = args[index] if index < count else None
        option, value, used_next = _option(spec, text, following)
        if option is not None:
            index += used_next
            if value is None:
                continue
            kind = spec.options[option]
            carrier = (word,) if not used_next or following is None else (following,)
            what = f"{name} {option}"
            if kind == "program":
                program_given = True
            elif kind == "split":
                rest = " ".join(shlex.quote(w.text) for w in args[index:])
                yield CodeValue(spec, kind, f"{value} {rest}".strip(), what, word.start,
                                (*carrier, *args[index:]), word.static)
                return
            elif kind == "keyed" and not _setting(spec, value, what, word.start):
                continue
            yield CodeValue(spec, kind, value, what, word.start, carrier, word.static)
            continue
        if text.startswith("-") and len(text) > 1 and not operands:
            if text in spec.takes_arg:
                index += 1
            continue
        operands.append(word)
    yield from _operand_values(spec, name, operands, program_given)


def awk_programs(name: str, args: list[Word]) -> list[str]:
    """The literal programs of an awk command (its program operand or `-e` options)."""
    spec = CODE_OPTIONS.get(name)
    if spec is None or spec.language != "awk":
        return []
    return [value.text for value in code_values(name, args)
            if value.kind == "program" and value.readable]


def _option(spec: CodeOptions, text: str, following: Word | None,
            ) -> tuple[str | None, str | None, int]:
    """(option, its value, 1 when the value was the next word) for a code option."""
    if text.startswith("--"):
        key, equals, attached = text.partition("=")
        if key in spec.options:
            if equals:
                return key, attached, 0
            return key, following.text if following is not None else None, 1
        return None, None, 0
    if text.startswith("+") and "+" in spec.options and len(text) > 1:
        return "+", text[1:], 0
    if text.startswith("-") and len(text) > 1:
        for position in range(1, len(text)):      # a cluster: `-qc CMD`, `-IXZ`
            key = "-" + text[position]
            if key in spec.options:
                if position + 1 < len(text):
                    return key, text[position + 1:], 0
                return key, following.text if following is not None else None, 1
            if key in spec.takes_arg:
                break
    return None, None, 0


def _option_value(spec: CodeOptions, kind: str, value: str, what: str,
                  position: int) -> list[Code]:
    if kind == "shell":
        return [Code(what, value, position)]
    if kind == "stdin":
        return [Code(what, value, position, stdin=True)]
    if kind == "exec=":
        return [Code(what, value[5:], position)] if value.startswith("exec=") else []
    if kind == "keyed":
        return _setting(spec, value, what, position)
    return []


def _setting(spec: CodeOptions, setting: str, what: str, position: int) -> list[Code]:
    """`KEY=VALUE` (or `KEY VALUE`, as ssh takes it) looked up in `spec.keys`."""
    key, separator, value = setting.partition("=")
    if not separator:
        key, _, value = setting.strip().partition(" ")
    kind = _key_kind(spec, key.strip().lower())
    if kind == "shell" or (kind == "bang" and value.lstrip().startswith("!")):
        code = value.lstrip()
        return [Code(f"{what} {key.strip()}", code[1:] if kind == "bang" else code, position)]
    return []


def _key_kind(spec: CodeOptions, key: str) -> str | None:
    kind = spec.keys.get(key)
    if kind is not None:
        return kind
    for pattern, pattern_kind in spec.keys.items():
        if "*" in pattern and fnmatch.fnmatchcase(key, pattern):
            return pattern_kind
    return None


def _operand_values(spec: CodeOptions, name: str, operands: list[Word],
                    program_given: bool) -> Iterator[CodeValue]:
    if not operands:
        return
    first = operands[0]
    if spec.program_operand and not program_given:
        yield CodeValue(spec, "program", first.text, f"{name} program", first.start, (first,),
                        first.static)
    elif spec.config:
        # `git [-c k=v] config [--global] KEY VALUE`: the stored value runs later
        if first.text != spec.config:
            return
        values = [w for w in operands[1:] if not w.text.startswith("-")]
        if len(values) >= 2:
            setting = f"{values[0].text}={values[1].text}"
            if _setting(spec, setting, f"{name} config", values[0].start):
                yield CodeValue(spec, "config", setting, f"{name} config", values[0].start,
                                (values[0], values[1]), values[1].static)
    elif spec.joined:
        words = []
        for word in operands:
            if word.text in (":::", "::::", ":::+", "::::+"):
                break
            words.append(word)
        if words:
            yield CodeValue(spec, "joined", " ".join(w.text for w in words),
                            f"{name} command", first.start, tuple(words))
            return
        # `parallel ::: CMD1 CMD2`: with no command, each argument is a command line
        for word in operands[1:]:
            if word.text not in (":::", "::::"):
                yield CodeValue(spec, "joined", word.text, f"{name} argument", word.start,
                                (word,), word.static)


def _program(language: str, program: str, what: str, position: int,
             limit: int) -> list[Code]:
    if language == "awk":
        return [Code(what, text, position, stdin)
                for text, stdin in awk_commands(program, limit)]
    if language == "sed":
        return [Code(what, text, position) for text in sed_commands(program, limit)]
    if language == "vim":
        return [Code(what, text, position) for text in vim_commands(program, limit)]
    return []


# -- awk ---------------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)    # to its closing quote, or to the end
_ESCAPE = re.compile(r"\\(.)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
_SYSTEM_CALL = re.compile(r"\bsystem(?:list)?[ \t]*\([ \t]*$")
_RUNS_A_FIELD = re.compile(r"\bsystem[ \t]*\([ \t]*\$")
_LOOK = 24
"""Characters looked at around a string literal (bounded, so the scan stays linear)."""


def _strings(program: str) -> Iterator[tuple[str, str, str]]:
    """(text before, decoded body, text after) of each double-quoted literal, in one pass."""
    for match in _STRING.finditer(program):
        raw = match.group()
        body = raw[1:-1] if len(raw) > 1 and raw.endswith('"') else raw[1:]
        body = _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)
        yield (program[max(0, match.start() - _LOOK):match.start()], body,
               program[match.end():match.end() + _LOOK])


def awk_commands(program: str, limit: int = 1 << 30) -> list[tuple[str, bool]]:
    """(command line, fed awk's output on stdin) for each shell command an awk program runs:
    `system("...")`, `"..." | getline`, `print ... | "..."`. `system($0)` (or any
    field) runs awk's input: it comes back as an empty command line."""
    if "system" not in program and "|" not in program:
        return []
    found: list[tuple[str, bool]] = [("", False)] if _RUNS_A_FIELD.search(program) else []
    for before, body, after in _strings(program):
        if len(found) > limit:
            break
        tail = after.lstrip(" \t")
        if _SYSTEM_CALL.search(before) or (tail.startswith("|") and
                                           tail.lstrip("|& \t").startswith("getline")):
            found.append((body, False))
        elif before.rstrip(" \t").endswith("|") or before.rstrip(" \t").endswith("|&"):
            found.append((body, True))
    return found


_NETWORK_FILE = re.compile(r'"/inet[46]?/(?:tcp|udp)/')
_JOINED_STRINGS = re.compile(r'"[ \t]*"')
_SOCKET_VARIABLE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"/inet[46]?/')
_COPROCESS = re.compile(r'("(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*)?[ \t]*\|&[ \t]*'
                        r'("(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*)?')
_PIPE = re.compile(r"(?<![|])\|(?![|&])")


def awk_network(program: str) -> tuple[bool, bool]:
    """(opens a socket, runs a command besides) for an awk program.

    gawk reads a string naming `/inet/tcp/...`, `/inet4/...` or `/inet6/...` (strings
    joined, `"/inet/" "tcp/..."`, count as one) as a network connection when a
    program opens it, with `|&` (a two-way coprocess), `getline <` or `print >`.
    The program runs a command when it calls `system()`, pipes to or from a
    command (`|`), or opens a coprocess (`|&`) on anything but a network file or a
    variable it assigned one (`cmd |& getline`, with `cmd` read from the socket)."""
    joined = _JOINED_STRINGS.sub("", program) if '"' in program else program
    if "/inet" not in joined or _NETWORK_FILE.search(joined) is None:
        return False, False
    if "system" in joined and _SYSTEM_ANYWHERE.search(joined) is not None:
        return True, True
    if _PIPE.search(joined) is not None:
        return True, True
    sockets = {match.group(1) for match in _SOCKET_VARIABLE.finditer(joined)}
    for match in _COPROCESS.finditer(joined):
        before, after = match.group(1), match.group(2)
        target = before if after is None or after == "getline" else after
        if target is None or not (target in sockets or _NETWORK_FILE.match(target)):
            return True, True
    return True, False


_SYSTEM_ANYWHERE = re.compile(r"\bsystem[ \t]*\(")


# -- sed ---------------------------------------------------------------------------------------

_SED_TEXT_COMMANDS = frozenset("aicrRwWe")   # the rest of the line is their argument
_SED_LABEL_COMMANDS = frozenset("btT:")


def sed_commands(script: str, limit: int = 1 << 30) -> list[str]:
    """The command lines a sed script runs: `e COMMAND`; an empty string for a bare `e`
    or an `s///e` substitution, which run the pattern space (the input) as a command."""
    if "e" not in script:
        return []
    found: list[str] = []
    i, n = 0, len(script)
    while i < n and len(found) <= limit:
        char = script[i]
        if char in " \t\n;{}!":
            i += 1
            continue
        if char == "#":
            end = script.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if char in "0123456789$,~+":
            i += 1
            continue
        if char in "/\\":       # an address: /regex/ or \cregexc
            delimiter = "/" if char == "/" else script[i + 1:i + 2]
            i = _sed_skip_part(script, i + (1 if char == "/" else 2), delimiter)
            continue
        if char in ("s", "y"):
            delimiter = script[i + 1:i + 2]
            if not delimiter or delimiter in "\n\\":
                return found
            i = _sed_skip_part(script, i + 2, delimiter)
            i = _sed_skip_part(script, i, delimiter)
            start = i
            while i < n and script[i] not in ";\n}":
                i += 1
            if char == "s" and "e" in script[start:i]:
                found.append("")
            continue
        if char in _SED_TEXT_COMMANDS:
            end = script.find("\n", i)
            end = n if end < 0 else end
            if char == "e":
                found.append(script[i + 1:end].strip())
            i = end + 1
            continue
        if char in _SED_LABEL_COMMANDS:
            while i < n and script[i] not in ";\n":
                i += 1
            continue
        i += 1
    return found


def _sed_skip_part(script: str, i: int, delimiter: str) -> int:
    """The index after the next unescaped `delimiter` from `i` (or the end)."""
    n = len(script)
    while i < n:
        char = script[i]
        if char == "\\":
            i += 2
            continue
        i += 1
        if char == delimiter:
            break
    return i


# -- vim ---------------------------------------------------------------------------------------

_VIM_PREFIXES = ("silent!", "silent", "sil!", "sil", "execute", "exe", "normal", "norm")
_VIM_FILTERS = ("read", "write", "r", "w")


def vim_commands(command: str, limit: int = 1 << 30) -> list[str]:
    """The shell command lines an Ex command runs: `!cmd`, `r !cmd`, `w !cmd`,
    `silent !cmd`, `call system('cmd')`. After a `!` the rest of the line is shell."""
    found: list[str] = []
    offset = 0
    for part in command.split("|"):
        bang = _vim_bang(part)
        if bang is not None:
            found.append(command[offset + bang:].rstrip("\"'"))
            break
        offset += len(part) + 1
    if "system" in command:
        quoted = command.replace("'", '"')      # Vim's single quotes: read as double
        for before, body, _ in _strings(quoted):
            if len(found) > limit:
                break
            if _SYSTEM_CALL.search(before):
                found.append(body)
    return found


def _vim_bang(part: str) -> int | None:
    """Where the shell command of `part` starts, when it is a `!` command."""
    index = 0
    length = len(part)

    def skip(chars: str) -> None:
        nonlocal index
        while index < length and part[index] in chars:
            index += 1

    skip(" \t:\"'")
    for prefix in _VIM_PREFIXES:
        if part.startswith(prefix, index):
            index += len(prefix)
            skip(" \t:\"'")
            break
    skip(".,$%0123456789 \t")
    for name in _VIM_FILTERS:
        if part.startswith(name, index) and part[index + len(name):].lstrip(" \t")[:1] == "!":
            index += len(name)
            skip(" \t")
            break
    return index + 1 if part[index:index + 1] == "!" else None
