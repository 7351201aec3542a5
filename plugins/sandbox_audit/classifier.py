"""Classify a shell command before the sandbox runs it: block, warn or pass.

`classify(command)` is a pure function returning a `Verdict`: the action, the
rule that decided it (see `rules.RULES`), a reason and every finding. It never
raises and its cost is linear in the length of the command.

How a command is judged:

1. It is parsed into a `Script` (`script.py`): by bashlex where bashlex parses
   it faithfully (`bashlex_walker.py`), else by the linear tokenizer
   (`splitter.py`). The tokenizer always runs first: it measures nesting, and
   input nested deeper than it follows is blocked (`nesting_too_deep`).
2. The script is walked in execution order. Substitutions are walked before the
   command that contains them, and each reports what it runs: a fetcher
   (`curl`), a decoder (`base64 -d`), an interpreter (`python`, `eval`), a
   computed or globbed command name, a function doing any of these, or a
   variable holding fetched content. Such a substitution is *risky*.
3. A risky substitution is judged by **position**, not by its presence: as the
   command itself (after leading assignments, exec wrappers such as `env`,
   `sudo`, `nohup`, and expansions that may be empty; after `find -exec`) it
   runs what it prints and is blocked;
   as a value (an assignment, an argument, a `for` list, a heredoc body, a
   here-string to a non-interpreter) it only captures output and passes.
   Two contexts are position-blind because they execute whatever they receive
   wherever they stand: the arguments of `eval`/`source`, and everything after
   an interpreter's code-string flag (`-c`, `-e`, `-p`, `-r`); a here-string or
   heredoc feeding an interpreter reaches the same place through stdin. There a
   risky substitution, or literal substitution text (`'$(curl u)'`), blocks.
4. Code that is itself shell (`sh -c '...'`, `eval '...'`, a here-string or
   heredoc fed to a shell) is classified again as a script, a few levels deep.
   So is each literal command line that interpreter code hands to a shell
   (`python3 -c 'os.system("...")'`, `node -e "execSync('...')"`, Perl and Ruby
   backticks, `qx{}`, `%x()`, PHP `shell_exec`, an argv list like
   `["sh", "-c", "..."]`; see `interpreter_code.py`): the code string of an
   interpreter standing as the command, or its heredoc or here-string. Only
   literal arguments are read; nothing is evaluated.
5. Pipelines are judged as a whole: content from a fetcher or decoder reaching
   an interpreter's stdin blocks (`curl ... | sh`, `base64 -d | sh`), as does
   anything piped into a shell; a shell joined to a network tool is a reverse
   shell.
6. A simple dataflow connects two-step forms: a variable assigned from a risky
   substitution (or `read` from one, or a `for` variable over one) is tainted,
   and a tainted variable used as a command, in `eval`/`source`, or as
   interpreter code blocks (`x=$(curl u); eval "$x"`). Files are tainted the
   same way: a file a downloader writes (`curl -o F`, `wget -O F`, `wget URL`,
   fetched output redirected or `tee`d to F) and later run in the same command
   line, as the command, as a shell's or interpreter's script, or by
   `source`/`.`, blocks (`curl -o x.sh u && bash x.sh`). File names compare as
   written, with `F` and `./F` the same file; nothing untaints a file.
7. Per-command rules catch the classic destructive forms (recursive deletes of
   `/` or home, fork bombs, raw disk writes, reverse shells, power-off) and
   flag risky-but-common ones (sudo, package installs, chmod 777, ...).

This is defense in depth and audit, not a security boundary.
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from . import bashlex_walker
from .interpreter_code import shell_commands
from .rules import (
    BLOCK_DEVICE,
    CODE_FLAGS,
    DECLARATION_COMMANDS,
    DECODERS,
    DISK_TOOLS,
    DOWNLOADERS,
    EVAL_WORDS,
    FETCHERS,
    FIND_EXEC,
    LOADER_VARIABLES,
    NETWORK_TOOLS,
    PACKAGE_MANAGERS,
    POWER_COMMANDS,
    PRIVILEGE_COMMANDS,
    RAW_PATTERNS,
    REVERSE_SHELL_CODE_MARKERS,
    REVERSE_SHELL_SPAWN_MARKERS,
    RULE_RANK,
    RULES_BY_NAME,
    SENSITIVE_PATHS,
    SOURCE_STDIN,
    SYSTEM_TOP_DIRS,
    SYSTEM_WRITE_PREFIXES,
    SYSTEMCTL_POWER,
    WRAPPERS,
    WRITE_TOOLS_ALL_OPERANDS,
    WRITE_TOOLS_LAST_OPERAND,
    Action,
    Downloader,
    interpreter_family,
)
from .script import SUB_MARK, Command, Compound, Pipeline, Redirect, Script, Substitution, Word
from .splitter import Budget, TooComplex, TooDeep, split

__all__ = ["Budget", "Finding", "Verdict", "classify", "classify_file_operation"]

MAX_CODE_DEPTH = 3
"""Code strings (`sh -c '...'`, `eval ...`) classified inside code strings."""

_DETAIL_CHARS = 160

Parser = Literal["auto", "tokenizer", "bashlex"]


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


def classify(command: str, *, parser: Parser = "auto", budget: Budget | None = None,
             ) -> Verdict:
    """Classify one shell command. Never raises; linear in `len(command)`.

    `parser="tokenizer"` skips bashlex (tests compare the two front ends);
    `parser="bashlex"` tries bashlex on every command it can take, and the
    default, `"auto"`, leaves out commands of plain words only (`_plain_words`),
    which both front ends read the same way. `budget` bounds
    the structure built (default `Budget()`: beyond it the command is refused
    as `command_too_complex`); benchmarks pass a larger one to time the
    analysis itself.
    """
    if not isinstance(command, str):
        command = str(command)
    auditor = _Auditor(parser, budget)
    with _collector_paused():
        try:
            auditor.audit_top(command)
        except Exception as exc:  # a bug must not let a command through unaudited
            auditor.add("audit_failed", f"{type(exc).__name__}: {exc}", 0)
    return auditor.verdict()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the (acyclic) parse structure is built.

    Every node is freed by reference counting; left running, the collector
    rescans the growing structure on allocation and makes large commands
    superlinear. The pause lasts one classification (bounded by `Budget`).
    """
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# A command name, then arguments, of characters no shell treats specially: no quoting,
# expansion, globbing, redirection, operator, comment or assignment in command position.
_PLAIN_COMMAND = re.compile(r"[A-Za-z0-9_./+-]+(?: +[A-Za-z0-9_./:,+@%=-]+)*")
_RESERVED_WORDS = frozenset({"if", "then", "else", "elif", "fi", "for", "while", "until",
                             "do", "done", "case", "esac", "select", "function", "time",
                             "coproc", "in"})


def _plain_words(text: str) -> bool:
    """Whether `text` is one simple command of plain words (most agents' commands).

    For such a command bashlex and the tokenizer build the same script (the
    corpus holds both front ends to one table), so bashlex, the slower of the
    two, is skipped.
    """
    stripped = text.strip(" ")
    return (_PLAIN_COMMAND.fullmatch(stripped) is not None
            and stripped.split(" ", 1)[0] not in _RESERVED_WORDS)


_FILE_WRITE = frozenset({"write_file", "str_replace", "edit_file", "append_file"})


def classify_file_operation(tool: str, path: str, *, write: bool | None = None) -> Verdict:
    """Classify a file tool's path: system locations block for writes, credentials warn."""
    writes = tool in _FILE_WRITE if write is None else write
    auditor = _Auditor("tokenizer")
    text = path if isinstance(path, str) else str(path)
    if writes and _system_write_target(text):
        auditor.add("system_path_write", f"{tool} {text}", 0)
    if _sensitive(text):
        auditor.add("sensitive_file_access", f"{tool} {text}", 0)
    return auditor.verdict()


# -- risk of what a piece of shell outputs ---------------------------------------------------

class _Risk:
    """What a piece of shell may print: fetched, decoded, interpreted or tainted content."""

    __slots__ = ("decode", "fetch", "interp", "taint")

    def __init__(self, fetch: str | None = None, decode: str | None = None,
                 interp: str | None = None, taint: str | None = None) -> None:
        self.fetch = fetch
        self.decode = decode
        self.interp = interp
        self.taint = taint

    @property
    def risky(self) -> str | None:
        return self.fetch or self.decode or self.interp or self.taint


def _merge(a: _Risk | None, b: _Risk | None) -> _Risk | None:
    if b is None:
        return a
    if a is None:
        return _Risk(b.fetch, b.decode, b.interp, b.taint)
    a.fetch = a.fetch or b.fetch
    a.decode = a.decode or b.decode
    a.interp = a.interp or b.interp
    a.taint = a.taint or b.taint
    return a


class _StageInfo:
    """What a pipeline stage does with its stdin and output."""

    __slots__ = ("feeds_code", "network", "reads_code", "shell")

    def __init__(self) -> None:
        self.reads_code: str | None = None   # interpreter family reading code from stdin
        self.feeds_code: str | None = None   # output goes into `>(sh)`
        self.shell = False                   # runs a shell
        self.network = False                 # a socket tool


_NO_INFO = _StageInfo()


@dataclass
class _Context:
    arith: bool = False
    function: str | None = None


_LITERAL_SUB = re.compile(r"(?:\$\(|`|<\(|>\()[ \t\n\"'\\(]*([^ \t\n;&|()<>`\"'\\]+)")
_NAME_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]\n]*\])?\+?=")
_SLASHES = re.compile(r"/{2,}")
_ONLY_PARAMS = re.compile(r"(?:\$(?:\{[^{}]*\}|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]))+")
_ALL_ARGS = re.compile(r"\$@|\$\{@\}|\$\{[A-Za-z_][A-Za-z0-9_]*\[[@*]\]\}")
_WORLD_WRITABLE = re.compile(r"[0-7]?[0-7]?[0-7][2367]|[ugoa]*[ao][ugoa]*[+=][rwxXst]*w[rwxXst]*")
_KILL_SIGNAL = re.compile(r"-(?:[0-9]+|[A-Z][A-Z0-9+-]*)")


def _basename(text: str) -> str:
    return text.rpartition("/")[2] if "/" in text else text


def _command_name(word: Word) -> str:
    """The name a static command word runs: basename, first brace alternative."""
    text = word.text
    if not word.quoted and "{" in text and "," in text:
        text = _brace_first(text)
    return _basename(text)


def _brace_first(text: str) -> str:
    """`{curl,-s,u}` -> `curl`, `c{u,}rl` -> `curl`: what brace expansion puts first."""
    open_at = text.find("{")
    depth = 0
    comma = -1
    for index in range(open_at, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                if comma < 0:
                    return text
                return text[:open_at] + text[open_at + 1:comma] + text[index + 1:]
        elif char == "," and depth == 1 and comma < 0:
            comma = index
    return text


def _detail(text: str) -> str:
    text = text.replace(SUB_MARK, "$(...)")
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "..."


def _words_text(words: list[Word], limit: int = 12) -> str:
    shown = " ".join(w.text for w in words[:limit])
    return shown + (" ..." if len(words) > limit else "")


def _literal_risky(text: str) -> str | None:
    """A substitution spelled literally in `text` that would run a risky command."""
    if "(" not in text and "`" not in text:
        return None
    for match in _LITERAL_SUB.finditer(text):
        name = _basename(match.group(1))
        if (name in FETCHERS or name in DECODERS or name in EVAL_WORDS or name == "."
                or name in WRAPPERS or interpreter_family(name) is not None):
            return match.group(0).strip()
    return None


def _decodes(name: str, args: list[Word]) -> bool:
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


def _option_cluster(text: str) -> str:
    return text[1:] if text.startswith("-") and not text.startswith("--") and len(text) > 1 \
        else ""


def _critical_path(text: str) -> bool:
    """`/`, home, a top-level system directory (with `/`, `/*`, `/.` suffixes)."""
    path = text.replace("${HOME}", "~").replace("$HOME", "~")
    if "//" in path:
        path = _SLASHES.sub("/", path)
    end = len(path)
    while end > 0:
        tail = path[end - 2:end]
        if tail in ("/*", "/."):
            end -= 2
        elif path[end - 1] == "/" and end > 1:
            end -= 1
        elif end == 1 and path[0] == "/":
            end = 0
        else:
            break
    path = path[:end]
    if path in ("", "~", "/*") or path in SYSTEM_TOP_DIRS:
        return True
    if path.startswith("~/") and path[2:] in ("*", "."):
        return True
    for home in ("/home/", "/Users/"):
        if path.startswith(home) and "/" not in path[len(home):] and "*" not in path:
            return True
    return False


def _broad_path(text: str) -> bool:
    return text in ("*", ".", "..", "./*", "../*", "./", "../", ".*", "./.*")


def _system_write_target(text: str) -> bool:
    path = _SLASHES.sub("/", text) if "//" in text else text
    if path.startswith(SYSTEM_WRITE_PREFIXES) or path in ("/etc/ld.so.preload",):
        return True
    return path.rstrip("/") in ("/etc", "/bin", "/sbin", "/usr/bin", "/usr/sbin", "/boot")


def _sensitive(text: str) -> bool:
    for marker in SENSITIVE_PATHS:
        if marker in text:
            if marker == "/environ":
                return "/proc/" in text
            return True
    return False


def _reverse_shell_code(text: str) -> bool:
    """Socket-plus-spawn code in an interpreter's code string."""
    if "pty.spawn" in text or "fsockopen" in text:
        return True
    if any(marker in text for marker in REVERSE_SHELL_CODE_MARKERS):
        return any(marker in text for marker in REVERSE_SHELL_SPAWN_MARKERS)
    return False


# -- files written from downloaded content ------------------------------------------------------

_DOT_SLASH = re.compile(r"(?:\./+)+")
_STDOUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


def _file_key(text: str) -> str | None:
    """The name a file is tainted under: as written, `./x.sh` the same as `x.sh`."""
    if SUB_MARK in text:
        return None    # a computed name: nothing to compare it with
    if text.startswith("./"):
        match = _DOT_SLASH.match(text)
        if match is not None:
            text = text[match.end():]
    return text or None


def _url_file_names(url: str) -> list[str]:
    """The names `wget URL` / `curl -O URL` may save under: the last path segment, with
    and without its query string."""
    rest = url.partition("://")[2] if "://" in url else url
    rest = rest.partition("#")[0]
    path = rest.partition("?")[0]
    if "/" not in path:
        return []       # no path: the downloader picks a name (index.html)
    names = []
    name = path.rpartition("/")[2]
    if name:
        names.append(name)
    if "?" in rest and "/" not in rest.partition("?")[2]:
        with_query = rest.rpartition("/")[2]
        if with_query and with_query != name:
            names.append(with_query)
    return names


def _downloaded_files(spec: Downloader, args: list[Word]) -> list[str]:
    """The files a downloader invocation writes, by its options and URL operands."""
    outputs: list[str] = []
    dirs: list[str] = []
    urls: list[str] = []
    remote = False
    named = False      # an output option was given (`-O -` too: then nothing is named by URL)
    options = True
    count = len(args)
    i = 0
    while i < count:
        word = args[i]
        text = word.text
        i += 1
        if not options or not text.startswith("-") or text == "-":
            if not word.subs:
                urls.append(text)
            continue
        if text == "--":
            options = False
            continue
        value: Word | None = None
        attached = ""
        kind = ""
        if text.startswith("--"):
            key, equals, attached = text.partition("=")
            if key in spec.output_long:
                kind = "output"
            elif key in spec.dir_long:
                kind = "dir"
            elif key in spec.remote_long:
                remote = True
                continue
            else:
                continue
            if not equals:
                value = args[i] if i < count else None
                i += 1
        else:
            for position in range(1, len(text)):
                char = text[position]
                if char in spec.short_args:
                    attached = text[position + 1:]
                    if not attached:
                        value = args[i] if i < count else None
                        i += 1
                    if char == spec.output_short:
                        kind = "output"
                    elif char == spec.dir_short:
                        kind = "dir"
                    break
                if char == spec.remote_short:
                    remote = True
            if not kind:
                continue
        if value is not None:
            if value.subs:
                continue
            attached = value.text
        elif word.subs:
            continue
        if not attached:
            continue
        if kind == "output":
            named = True
            if attached != "-":
                outputs.append(attached)
        else:
            dirs.append(attached.rstrip("/") or "/")
    files = list(outputs)
    if remote or (spec.names_from_url and not named):
        for url in urls:
            files.extend(_url_file_names(url))
    if dirs:    # the last directory option wins; the bare names stay tainted too
        folder = dirs[-1].rstrip("/")
        files.extend([f"{folder}/{name}" for name in files])
    return files


def _content_source(*risks: _Risk | None) -> str | None:
    """What makes written content count as downloaded: a fetcher or a tainted variable."""
    for risk in risks:
        if risk is not None and (risk.fetch or risk.taint):
            return (f"{risk.fetch} output" if risk.fetch
                    else f"a tainted variable ({risk.taint})")
    return None


# -- command positions -------------------------------------------------------------------------

def _may_vanish(word: Word) -> bool:
    """An expansion that may expand to no word at all (`$unset`, `"$@"`).

    Before a command it disappears and the next word runs: `$nothing $(curl u)`
    runs what curl prints.
    """
    if word.subs or not word.params:
        return False
    if word.quoted:
        return _ALL_ARGS.fullmatch(word.text) is not None
    return _ONLY_PARAMS.fullmatch(word.text) is not None


def _resolve(words: list[Word], start: int = 0, vanished: list[int] | None = None,
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
            if vanished is not None and i + 1 < count and _may_vanish(word):
                vanished.append(i)
                i += 1
                continue
            return i, used
        name = _basename(word.text)
        wrapper = WRAPPERS.get(name)
        if wrapper is None:
            return i, used
        used.append(name)
        i += 1
        while i < count:
            w = words[i]
            if not w.static:
                break
            text = w.text
            if text == "--":
                i += 1
                break
            if wrapper.assignments and _NAME_ASSIGN.match(text):
                i += 1
                continue
            if name == "command" and text in ("-v", "-V"):
                return i - 1 if words[i - 1].text == "command" else i, used  # a lookup
            if (text.startswith("-") and len(text) > 1 and name != "command") or (
                    name == "command" and text == "-p"):
                i += 2 if text in wrapper.takes_arg else 1
                continue
            break
        i += wrapper.positional
    return None, used


def _interpreter_options(words: list[Word], index: int, family: str,
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


def _reads_code_from_stdin(words: list[Word], index: int | None, name: str | None,
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
            if _reads_stdin_only(sub.body)) else None
    family = interpreter_family(name)
    if family is None or family in ("su", "generic"):
        return None
    code, operand, seen, _ = _interpreter_options(words, index, family)
    if code is not None:
        return None
    if operand is None:
        return family
    if words[operand].text in SOURCE_STDIN or (family == "shell" and "s" in seen):
        return family
    return None


_STDIN_EXECUTORS = frozenset({"eval", "source", "."})


def _triggers(words: list[Word]) -> tuple[int | None, list[int]]:
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


def _script_reads_code(script: Script) -> str | None:
    """The family of the interpreter that first reads stdin in `script` (`>(sh)`)."""
    first = script.pipelines[0].stages[0] if script.pipelines else None
    if not isinstance(first, Command):
        return None
    index, _ = _resolve(first.words)
    if index is None or not first.words[index].static:
        return None
    return _reads_code_from_stdin(first.words, index, _basename(first.words[index].text))


def _reads_stdin_only(script: Script) -> bool:
    """`$(cat)`, `$(cat -)`: a substitution that just returns stdin."""
    if len(script.pipelines) != 1 or len(script.pipelines[0].stages) != 1:
        return False
    stage = script.pipelines[0].stages[0]
    if not isinstance(stage, Command) or not stage.words:
        return False
    return stage.words[0].text == "cat" and all(w.text == "-" for w in stage.words[1:])


# -- the walk ---------------------------------------------------------------------------------

class _Auditor:
    def __init__(self, parser: Parser, budget: Budget | None = None) -> None:
        self.parser: Parser = parser
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, int]] = set()
        self.tainted: dict[str, str] = {}
        self.tainted_files: dict[str, str] = {}   # file name -> how downloaded content got there
        self.functions: dict[str, _Risk] = {}
        self.code_depth = 0
        self.position: int | None = None     # set while auditing a nested code string
        self.used: str = "none"
        self.text = ""
        self.budget = budget or Budget()

    # -- findings --------------------------------------------------------------------------

    def add(self, rule: str, detail: str, position: int) -> None:
        if self.position is not None:
            position = self.position
        key = (rule, position)
        if key in self.seen:
            return
        self.seen.add(key)
        self.findings.append(Finding(rule, RULES_BY_NAME[rule].action, _detail(detail),
                                     position))

    def verdict(self) -> Verdict:
        findings = self.findings
        if not findings:
            rule = RULES_BY_NAME["no_match"]
            return Verdict(Action.PASS, rule.name, rule.why, parser=self.used)
        ordered = sorted(findings, key=lambda f: (-f.action.severity, RULE_RANK[f.rule],
                                                  f.position))
        top = ordered[0]
        rule = RULES_BY_NAME[top.rule]
        excerpt = _detail(self.text[top.position:top.position + 60].split("\n")[0])
        return Verdict(top.action, top.rule, f"{top.detail}: {rule.why}", top.detail,
                       top.position, tuple(ordered), self.used, excerpt)

    # -- parsing ---------------------------------------------------------------------------

    def parse(self, text: str) -> Script | None:
        try:
            script = split(text, budget=self.budget)
        except TooDeep as exc:
            self.add("nesting_too_deep", str(exc), 0)
            return None
        except TooComplex as exc:
            self.add("command_too_complex", str(exc), 0)
            return None
        if self.parser == "tokenizer" or (self.parser == "auto" and _plain_words(text)):
            self.used = "tokenizer" if self.used == "none" else self.used
            return script
        if bashlex_walker.eligible(text, _depth_hint(text)):
            try:
                parsed = bashlex_walker.parse(text)
            except bashlex_walker.Unsupported:
                pass
            else:
                if self.used == "none":
                    self.used = "bashlex"
                return parsed
        if self.used == "none":
            self.used = "tokenizer"
        return script

    def audit_top(self, text: str) -> None:
        self.text = text
        for rule, pattern in RAW_PATTERNS:
            match = pattern.search(text)
            if match is not None:
                self.add(rule, text[max(0, match.start() - 40):match.end() + 40],
                         match.start())
        script = self.parse(text)
        if script is not None:
            self.walk_script(script, _Context())

    def audit_code(self, code: str, position: int, what: str) -> None:
        """Classify shell code found inside the command (`sh -c`, `eval`, heredocs)."""
        if not code.strip():
            return
        if self.code_depth >= MAX_CODE_DEPTH:
            self.add("nesting_too_deep", f"{what} nested more than {MAX_CODE_DEPTH} deep",
                     position)
            return
        saved = self.position
        self.code_depth += 1
        self.position = position if saved is None else saved
        try:
            script = self.parse(code)
            if script is not None:
                self.walk_script(script, _Context())
        finally:
            self.code_depth -= 1
            self.position = saved

    # -- statements ------------------------------------------------------------------------

    def walk_script(self, script: Script, ctx: _Context) -> tuple[_Risk | None, _StageInfo]:
        total: _Risk | None = None
        first_info = _NO_INFO
        for index, pipeline in enumerate(script.pipelines):
            risk, info = self.walk_pipeline(pipeline, ctx)
            total = _merge(total, risk)
            if index == 0:
                first_info = info
        return total, first_info

    def walk_pipeline(self, pipeline: Pipeline, ctx: _Context,
                      ) -> tuple[_Risk | None, _StageInfo]:
        stages = pipeline.stages
        upstream: _Risk | None = None
        total: _Risk | None = None
        first_info = _NO_INFO
        shell_at = network_at = -1
        decode_warned = False
        for index, stage in enumerate(stages):
            if isinstance(stage, Command):
                risk, info = self.walk_command(stage, ctx, pipeline, upstream)
            else:
                risk, info = self.walk_compound(stage, ctx)
                if not ctx.arith and stage.redirects:
                    source = _content_source(risk, upstream)
                    if source is not None:
                        self.redirect_writes(stage.redirects, source)
            if index == 0:
                first_info = info
            if not ctx.arith:
                if index > 0 and info.reads_code:
                    self.piped_code(upstream, info.reads_code, stage)
                elif index > 0 and upstream is not None and upstream.decode \
                        and not decode_warned:
                    decode_warned = True
                    self.add("decode_piped", f"{upstream.decode} | {_stage_text(stage)}",
                             stage.start)
                if info.feeds_code:
                    self.piped_code(_merge(_merge(None, upstream), risk), info.feeds_code,
                                    stage)
                if info.shell:
                    shell_at = index
                if info.network:
                    network_at = index
            upstream = _merge(upstream, risk)
            total = _merge(total, risk)
        if shell_at >= 0 and network_at >= 0 and len(stages) > 1:
            self.add("reverse_shell", "a shell and a network tool joined by a pipe: "
                     + " | ".join(_stage_text(s) for s in stages[:4]), pipeline.start)
        return total, first_info

    def piped_code(self, upstream: _Risk | None, family: str, stage: Command | Compound,
                   ) -> None:
        where = _stage_text(stage)
        if upstream is not None and (upstream.fetch or upstream.taint):
            self.add("fetch_piped_to_interpreter",
                     f"{upstream.fetch or upstream.taint} | {where}", stage.start)
        elif upstream is not None and upstream.decode:
            self.add("decode_piped_to_interpreter", f"{upstream.decode} | {where}",
                     stage.start)
        elif family == "shell":
            self.add("pipe_to_shell", f"... | {where}", stage.start)
        else:
            self.add("pipe_to_interpreter", f"... | {where}", stage.start)

    def walk_compound(self, compound: Compound, ctx: _Context,
                      ) -> tuple[_Risk | None, _StageInfo]:
        inner = ctx
        if compound.arith and not ctx.arith:
            inner = _Context(True, ctx.function)
        if compound.name is not None:
            inner = _Context(inner.arith, compound.name)
        risk: _Risk | None = None
        list_risk: _Risk | None = None
        for word in compound.words:
            list_risk = _merge(list_risk, self.word_subs_value(word, inner))
            list_risk = _merge(list_risk, self.param_taint(word))
        if compound.kind in ("for", "select") and compound.words:
            variable = compound.words[0].text
            if list_risk is not None and list_risk.risky and len(compound.words) > 1:
                self.tainted[variable] = f"${variable} iterates over {list_risk.risky} output"
            else:
                self.tainted.pop(variable, None)
        for redirect in compound.redirects:
            risk = _merge(risk, self.redirect_value(redirect, inner))
            self.check_redirect_target(redirect)
        body_risk, body_info = self.walk_script(compound.body, inner)
        if compound.name is not None:
            if body_risk is not None and body_risk.risky:
                self.functions[compound.name] = body_risk
            else:
                self.functions.pop(compound.name, None)
            return None, _NO_INFO     # a definition runs nothing
        info = _StageInfo()
        info.reads_code = body_info.reads_code
        info.shell = body_info.shell
        info.network = body_info.network
        return _merge(risk, body_risk), info

    # -- one simple command ----------------------------------------------------------------

    def walk_command(self, cmd: Command, ctx: _Context, pipeline: Pipeline | None,
                     upstream: _Risk | None) -> tuple[_Risk | None, _StageInfo]:
        words = cmd.words
        subrisk: dict[int, _Risk | None] = {}
        risk: _Risk | None = None
        sub_words = [w for w in words if w.subs]

        # Substitutions run first, in order; their risk is what they may print.
        for word in cmd.assignments:
            if word.subs:
                risk = _merge(risk, self.walk_word_subs(word, ctx, subrisk))
        for word in sub_words:
            risk = _merge(risk, self.walk_word_subs(word, ctx, subrisk))
        for redirect in cmd.redirects:
            if redirect.target is not None and redirect.target.subs:
                risk = _merge(risk, self.walk_word_subs(redirect.target, ctx, subrisk))
            heredoc = redirect.heredoc
            if heredoc is not None:
                for sub in heredoc.subs:
                    subrisk[id(sub)] = self.walk_sub(sub, ctx)
                    risk = _merge(risk, subrisk[id(sub)])
        if self.tainted:
            for word in words:
                if word.params:
                    risk = _merge(risk, self.param_taint(word))

        for word in cmd.assignments:
            self.assign(word, subrisk)
            if word.assign in LOADER_VARIABLES:
                self.add("loader_path_override", word.text, word.start)

        vanished: list[int] = []
        exec_index, wrappers = _resolve(words, 0, vanished)
        name = None
        if exec_index is not None:
            if words[exec_index].static:
                name = _command_name(words[exec_index])
            elif not ctx.arith:
                # A computed command name: whatever it is, its output is unknown.
                risk = _merge(risk, _Risk(interp=f"computed command {words[exec_index].text}"))

        info = _NO_INFO
        reads_code = None
        if name is not None and exec_index is not None:
            own = self.own_risk(name, words, exec_index)
            risk = _merge(risk, own)
            family = interpreter_family(name)
            if family is not None or name in _STDIN_EXECUTORS:
                reads_code = _reads_code_from_stdin(words, exec_index, name)
            network = name in NETWORK_TOOLS and (name != "openssl" or any(
                a.text == "s_client" for a in words[exec_index + 1:]))
            if family == "shell" or network or reads_code:
                info = _StageInfo()
                info.shell = family == "shell"
                info.network = network
                info.reads_code = reads_code
        for word in sub_words:
            for sub in word.subs:
                if sub.kind == ">(" and not sub.arith and sub.body.pipelines:
                    family = _script_reads_code(sub.body)
                    if family is not None:
                        if info is _NO_INFO:
                            info = _StageInfo()
                        info.feeds_code = info.feeds_code or family

        if not ctx.arith:
            self.judge(cmd, words, exec_index, name, wrappers, subrisk, upstream, sub_words,
                       reads_code, vanished)
            self.file_writes(cmd, words, exec_index, name, _content_source(risk, upstream))
            if ctx.function is not None and name == ctx.function and pipeline is not None \
                    and (len(pipeline.stages) > 1 or pipeline.background):
                self.add("fork_bomb", f"{name}() calls itself through a pipe or in the "
                         "background", cmd.start)
        else:
            self.value_findings(cmd, subrisk, set())
        return risk, info

    def walk_word_subs(self, word: Word, ctx: _Context,
                       subrisk: dict[int, _Risk | None]) -> _Risk | None:
        risk: _Risk | None = None
        for sub in word.subs:
            sub_risk = self.walk_sub(sub, ctx)
            subrisk[id(sub)] = sub_risk
            risk = _merge(risk, sub_risk)
        return risk

    def walk_sub(self, sub: Substitution, ctx: _Context) -> _Risk | None:
        if sub.arith:
            self.walk_script(sub.body, _Context(True, ctx.function))
            return None
        inner = ctx if not ctx.arith else _Context(False, ctx.function)
        risk, _ = self.walk_script(sub.body, inner)
        return risk

    def word_subs_value(self, word: Word, ctx: _Context) -> _Risk | None:
        """Walk the substitutions of a value-only word and record the risky ones as passes."""
        risk: _Risk | None = None
        for sub in word.subs:
            sub_risk = self.walk_sub(sub, ctx)
            if sub_risk is not None and sub_risk.risky:
                self.add("value_position_substitution",
                         f"{word.text} captures {sub_risk.risky} output", sub.start)
            risk = _merge(risk, sub_risk)
        return risk

    def redirect_value(self, redirect: Redirect, ctx: _Context) -> _Risk | None:
        risk: _Risk | None = None
        if redirect.target is not None:
            risk = self.word_subs_value(redirect.target, ctx)
        if redirect.heredoc is not None:
            for sub in redirect.heredoc.subs:
                sub_risk = self.walk_sub(sub, ctx)
                if sub_risk is not None and sub_risk.risky:
                    self.add("value_position_substitution",
                             f"heredoc body captures {sub_risk.risky} output", sub.start)
                risk = _merge(risk, sub_risk)
        return risk

    def param_taint(self, word: Word) -> _Risk | None:
        if not word.params or not self.tainted:
            return None
        for param in word.params:
            source = self.tainted.get(param)
            if source is not None:
                return _Risk(taint=source)
        return None

    def tainted_in(self, word: Word) -> str | None:
        if not word.params or not self.tainted:
            return None
        for param in word.params:
            if param in self.tainted:
                return param
        return None

    def assign(self, word: Word, subrisk: dict[int, _Risk | None]) -> None:
        name = word.assign
        if name is None:
            return
        source = None
        for sub in word.subs:
            sub_risk = subrisk.get(id(sub))
            if sub_risk is not None and sub_risk.risky and not sub.arith:
                source = f"${name} holds {sub_risk.risky} output"
                break
        if source is None:
            tainted = self.tainted_in(word)
            if tainted is not None:
                source = self.tainted[tainted]
        if source is None:
            self.tainted.pop(name, None)
        else:
            self.tainted[name] = source

    def own_risk(self, name: str, words: list[Word], index: int) -> _Risk | None:
        if name in FETCHERS:
            return _Risk(fetch=name)
        if "*" in name or "?" in name or "[" in name:
            return _Risk(interp=f"a command named by the glob {name}")
        if name in DECODERS and _decodes(name, words[index + 1:]):
            return _Risk(decode=f"{name} (decoding)")
        if name in EVAL_WORDS or name == "." or interpreter_family(name) is not None:
            return _Risk(interp=name)
        function = self.functions.get(name)
        if function is not None:
            return _Risk(function.fetch, function.decode, function.interp, function.taint)
        return None

    # -- the rules on one command ----------------------------------------------------------

    def judge(self, cmd: Command, words: list[Word], exec_index: int | None, name: str | None,
              wrappers: list[str], subrisk: dict[int, _Risk | None],
              upstream: _Risk | None, sub_words: list[Word], reads_code: str | None,
              vanished: list[int]) -> None:
        flagged: set[int] = set()
        positions = [exec_index] if exec_index is not None else []
        for index in vanished:
            self.command_position(words, index, subrisk, flagged)
        if name == "find" or name == "fd":
            positions.extend(self.exec_positions(words, exec_index))
        for position in positions:
            self.command_position(words, position, subrisk, flagged)
            if position != exec_index:
                sub_index, _ = _resolve(words, position)
                if sub_index is not None and words[sub_index].static:
                    sub_name = _basename(words[sub_index].text)
                    end = sub_index + 1
                    while end < len(words) and words[end].text not in (";", "+"):
                        end += 1
                    self.named_rules(cmd, words[:end], sub_index, sub_name, [])
        eval_index, interpreters = _triggers(words)
        if eval_index is not None or (name == "." and exec_index is not None):
            self.eval_source(words, exec_index if eval_index is None else eval_index,
                             exec_index, subrisk, flagged)
        if interpreters:
            self.code_strings(words, interpreters, positions, subrisk, flagged)
        static = exec_index is not None and words[exec_index].static
        if cmd.redirects:
            family = reads_code
            if family is None and exec_index is not None and not static:
                family = "shell"   # an unknown command may be an interpreter
            self.here_input(cmd, family, subrisk, flagged, static)
        if name is not None and (reads_code or interpreter_family(name) is not None):
            self.script_operand(cmd, words, exec_index, name, subrisk, flagged)
        if self.tainted_files and exec_index is not None:
            self.file_executed(cmd, words, exec_index, name, reads_code)
        if sub_words or cmd.redirects or any(a.subs for a in cmd.assignments):
            self.value_findings(cmd, subrisk, flagged)
        if exec_index is not None and name is not None:
            if name in DECLARATION_COMMANDS:
                for word in words[exec_index + 1:]:
                    match = _NAME_ASSIGN.match(word.text)
                    if match is not None:
                        word.assign = match.group(1)
                        self.assign(word, subrisk)
                        if word.assign in LOADER_VARIABLES:
                            self.add("loader_path_override", word.text, word.start)
            elif name in ("read", "mapfile", "readarray"):
                self.read_taint(cmd, words[exec_index + 1:], name, subrisk, upstream)
            self.named_rules(cmd, words, exec_index, name, wrappers)
        elif wrappers:
            self.named_rules(cmd, words, None, None, wrappers)
        for redirect in cmd.redirects:
            self.check_redirect_target(redirect)
        if len(words) > 1:
            joined = "\n".join([w.text for w in words])
            if any(marker in joined for marker in SENSITIVE_PATHS):
                for word in words:
                    if _sensitive(word.text):
                        self.add("sensitive_file_access", word.text, word.start)
                        break

    @staticmethod
    def exec_positions(words: list[Word], exec_index: int | None) -> list[int]:
        found = []
        start = (exec_index or 0) + 1
        for index in range(start, len(words) - 1):
            text = words[index].text
            if text in FIND_EXEC or text in ("-x", "--exec", "-X", "--exec-batch"):
                found.append(index + 1)
        return found

    def command_position(self, words: list[Word], index: int,
                         subrisk: dict[int, _Risk | None], flagged: set[int]) -> None:
        word = words[index]
        for sub in word.subs:
            if sub.arith:
                continue
            flagged.add(id(sub))
            sub_risk = subrisk.get(id(sub))
            if sub_risk is not None and sub_risk.risky:
                self.add("substitution_in_command_position",
                         f"{_words_text(words[index:index + 3])} runs what "
                         f"{sub_risk.risky} prints", sub.start)
            else:
                self.add("dynamic_command_substitution",
                         f"{_words_text(words[index:index + 3])}", sub.start)
        tainted = self.tainted_in(word)
        if tainted is not None:
            self.add("tainted_variable_executed",
                     f"{word.text} as a command: {self.tainted[tainted]}", word.start)

    def risky_args(self, args: list[Word], subrisk: dict[int, _Risk | None],
                   flagged: set[int], rule: str, what: str) -> None:
        """Position-blind: any risky substitution, literal one, or tainted variable in `args`."""
        for word in args:
            for sub in word.subs:
                sub_risk = subrisk.get(id(sub))
                if sub_risk is not None and sub_risk.risky and not sub.arith:
                    flagged.add(id(sub))
                    if sub_risk.taint and not (sub_risk.fetch or sub_risk.decode
                                               or sub_risk.interp):
                        self.add("tainted_variable_executed",
                                 f"{what}: {sub_risk.taint}", sub.start)
                    else:
                        self.add(rule, f"{what}: {word.text} runs {sub_risk.risky}",
                                 sub.start)
            literal = _literal_risky(word.text)
            if literal is not None:
                self.add(rule, f"{what}: literal {literal}", word.start)
            tainted = self.tainted_in(word)
            if tainted is not None:
                self.add("tainted_variable_executed",
                         f"{what}: {word.text}: {self.tainted[tainted]}", word.start)

    def eval_source(self, words: list[Word], index: int | None, exec_index: int | None,
                    subrisk: dict[int, _Risk | None], flagged: set[int]) -> None:
        if index is None:
            return
        text = words[index].text
        args = words[index + 1:]
        self.risky_args(args, subrisk, flagged, "eval_source_substitution", text)
        if index == exec_index and text == "eval" and args:
            self.audit_code(" ".join([a.text for a in args]), words[index].start, "eval code")

    def code_strings(self, words: list[Word], interpreters: list[int], positions: list[int],
                     subrisk: dict[int, _Risk | None], flagged: set[int]) -> None:
        """Position-blind: the first interpreter word with a code-string flag, wherever it is."""
        scanned = -1
        for index in interpreters:
            if index <= scanned:
                continue    # an option argument of the interpreter scanned before
            name = _basename(words[index].text)
            family = interpreter_family(name)
            if family is None:
                continue
            code_index, _, _, scanned = _interpreter_options(words, index, family)
            if code_index is None:
                continue
            self.risky_args(words[code_index:], subrisk, flagged, "code_string_substitution",
                            f"{name} {words[code_index].text}")
            flag = words[code_index].text
            attached = ""
            if not flag.startswith("--"):
                for position, char in enumerate(flag[1:], start=1):
                    if char in CODE_FLAGS[family].short:
                        attached = flag[position + 1:]
                        break
            elif "=" in flag:
                attached = flag.partition("=")[2]
            if family in ("shell", "su"):
                code = words[code_index + 1].text if code_index + 1 < len(words) else ""
                if index in positions and code:
                    self.audit_code(code, words[index].start, f"{name} -c code")
            else:
                code = attached or (words[code_index + 1].text
                                    if code_index + 1 < len(words) else "")
                if _reverse_shell_code(code):
                    self.add("reverse_shell", f"{name} code opens a socket and a shell",
                             words[index].start)
                if index in positions and code:
                    self.interpreter_calls(family, code, words[index].start, f"{name} code")
            return

    def interpreter_calls(self, family: str, code: str, position: int, what: str) -> None:
        """Audit, as nested shell code, each literal command line that interpreter code
        hands to a shell (`os.system("...")`, `execSync('...')`, backticks, ...)."""
        for how, command in shell_commands(family, code):
            self.audit_code(command, position, f"{what}: {how}")

    def here_input(self, cmd: Command, family: str | None,
                   subrisk: dict[int, _Risk | None], flagged: set[int], static: bool) -> None:
        if family is None:
            return
        for redirect in cmd.redirects:
            heredoc = redirect.heredoc
            if redirect.op == "<<<" and redirect.target is not None:
                target = redirect.target
                self.risky_args([target], subrisk, flagged, "here_input_substitution",
                                "here-string to an interpreter")
                if family == "shell" and static:
                    self.audit_code(target.text, target.start, "here-string script")
                else:
                    self.interpreter_text(family, target.text, target.start, "here-string code",
                                          static)
            elif heredoc is not None:
                what = "heredoc to an interpreter"
                for sub in heredoc.subs:
                    sub_risk = subrisk.get(id(sub))
                    if sub_risk is not None and sub_risk.risky and not sub.arith:
                        flagged.add(id(sub))
                        self.add("here_input_substitution", f"{what} pastes "
                                 f"{sub_risk.risky} output into the code", sub.start)
                for param in heredoc.params:
                    if param in self.tainted:
                        self.add("tainted_variable_executed",
                                 f"{what}: {self.tainted[param]}", heredoc.start)
                        break
                if family == "shell" and static:
                    self.audit_code(heredoc.body, heredoc.start, "heredoc script")
                else:
                    literal = _literal_risky(heredoc.body)
                    if literal is not None:
                        self.add("here_input_substitution", f"{what}: literal {literal}",
                                 heredoc.start)
                    self.interpreter_text(family, heredoc.body, heredoc.start, "heredoc code",
                                          static)

    def interpreter_text(self, family: str, text: str, start: int, what: str,
                         static: bool) -> None:
        """Interpreter code fed on stdin: a reverse shell, and (static text) its shell calls."""
        if _reverse_shell_code(text):
            self.add("reverse_shell", f"{what} opens a socket and a shell", start)
        if static:
            self.interpreter_calls(family, text, start, what)

    def script_operand(self, cmd: Command, words: list[Word], exec_index: int | None,
                       name: str | None, subrisk: dict[int, _Risk | None],
                       flagged: set[int]) -> None:
        if exec_index is None or name is None:
            return
        family = interpreter_family(name)
        if family is None or family in ("su", "generic"):
            return
        code_index, operand, _, _ = _interpreter_options(words, exec_index, family)
        if code_index is None and operand is not None:
            for sub in words[operand].subs:
                sub_risk = subrisk.get(id(sub))
                if sub.kind == "<(" and sub_risk is not None and sub_risk.risky:
                    flagged.add(id(sub))
                    self.add("interpreter_runs_substitution",
                             f"{name} {words[operand].text} runs {sub_risk.risky} output",
                             sub.start)
        if _reads_code_from_stdin(words, exec_index, name) is None:
            return
        for redirect in cmd.redirects:
            if redirect.op == "<" and redirect.target is not None:
                for sub in redirect.target.subs:
                    sub_risk = subrisk.get(id(sub))
                    if sub.kind == "<(" and sub_risk is not None and sub_risk.risky:
                        flagged.add(id(sub))
                        self.add("interpreter_runs_substitution",
                                 f"{name} < <(...) runs {sub_risk.risky} output", sub.start)

    def value_findings(self, cmd: Command, subrisk: dict[int, _Risk | None],
                       flagged: set[int]) -> None:
        for word in (*cmd.assignments, *cmd.words):
            self.value_word(word, subrisk, flagged)
        for redirect in cmd.redirects:
            if redirect.target is not None:
                self.value_word(redirect.target, subrisk, flagged)
            if redirect.heredoc is not None:
                for sub in redirect.heredoc.subs:
                    self.value_sub(sub, "heredoc body", subrisk, flagged)

    def value_word(self, word: Word, subrisk: dict[int, _Risk | None],
                   flagged: set[int]) -> None:
        for sub in word.subs:
            self.value_sub(sub, word.text, subrisk, flagged)

    def value_sub(self, sub: Substitution, where: str, subrisk: dict[int, _Risk | None],
                  flagged: set[int]) -> None:
        if id(sub) in flagged:
            return
        sub_risk = subrisk.get(id(sub))
        if sub_risk is not None and sub_risk.risky:
            self.add("value_position_substitution",
                     f"{where} captures {sub_risk.risky} output", sub.start)

    def read_taint(self, cmd: Command, args: list[Word], name: str,
                   subrisk: dict[int, _Risk | None], upstream: _Risk | None) -> None:
        source = upstream.risky if upstream is not None else None
        for redirect in cmd.redirects:
            if redirect.target is None or source is not None:
                continue
            for sub in redirect.target.subs:
                sub_risk = subrisk.get(id(sub))
                if sub_risk is not None and sub_risk.risky:
                    source = sub_risk.risky
            tainted = self.tainted_in(redirect.target)
            if tainted is not None and redirect.op == "<<<":
                source = self.tainted[tainted]
        names = [a.text for a in args if not a.text.startswith("-") and a.static]
        if name != "read":
            names = names[-1:] or ["MAPFILE"]
        for variable in names or ["REPLY"]:
            if source is not None:
                self.tainted[variable] = f"${variable} was read from {source} output"
            else:
                self.tainted.pop(variable, None)

    # -- files written from downloaded content ----------------------------------------------

    def file_writes(self, cmd: Command, words: list[Word], exec_index: int | None,
                    name: str | None, source: str | None) -> None:
        """Taint the files this command fills with downloaded content."""
        if name is not None and exec_index is not None:
            spec = DOWNLOADERS.get(name)
            args = words[exec_index + 1:]
            if spec is not None:
                for path in _downloaded_files(spec, args):
                    self.taint_file(path, f"written by {name}")
            elif source is not None and name == "tee":
                for arg in args:
                    if not arg.text.startswith("-") and not arg.subs:
                        self.taint_file(arg.text, f"written by tee from {source}")
            elif source is not None and name == "dd":
                for arg in args:
                    if arg.text.startswith("of=") and not arg.subs:
                        self.taint_file(arg.text[3:], f"written by dd from {source}")
        if source is not None and cmd.redirects:
            self.redirect_writes(cmd.redirects, source)

    def redirect_writes(self, redirects: list[Redirect], source: str) -> None:
        for redirect in redirects:
            target = redirect.target
            if target is None or target.subs or redirect.op not in _STDOUT_REDIRECTS:
                continue
            if redirect.op == ">&" and (target.text.isdigit() or target.text == "-"):
                continue
            self.taint_file(target.text, f"written by `{redirect.op}` from {source}")

    def taint_file(self, path: str, how: str) -> None:
        key = _file_key(path)
        if key is not None and key not in self.tainted_files:
            self.tainted_files[key] = how

    def tainted_file(self, word: Word) -> str | None:
        key = _file_key(word.text)
        return self.tainted_files.get(key) if key is not None else None

    def file_executed(self, cmd: Command, words: list[Word], exec_index: int,
                      name: str | None, reads_code: str | None) -> None:
        """Block running a tainted file: as the command, a script operand, or sourced."""
        word = words[exec_index]
        how = self.tainted_file(word)
        if how is not None:
            self.add("downloaded_file_executed",
                     f"{word.text} as a command: {word.text} was {how}", word.start)
        if name is None:
            return
        operand: int | None = None
        if name in ("source", "."):
            operand = exec_index + 1
            if operand < len(words) and words[operand].text == "--":
                operand += 1
        else:
            family = interpreter_family(name)
            if family is not None and family != "su":
                code_index, operand, _, _ = _interpreter_options(words, exec_index, family)
                if code_index is not None:
                    operand = None
        if operand is not None and operand < len(words):
            script = words[operand]
            how = self.tainted_file(script)
            if how is not None:
                self.add("downloaded_file_executed",
                         f"{name} {script.text}: {script.text} was {how}", script.start)
        if reads_code:
            for redirect in cmd.redirects:
                target = redirect.target
                if redirect.op == "<" and target is not None:
                    how = self.tainted_file(target)
                    if how is not None:
                        self.add("downloaded_file_executed",
                                 f"{name} < {target.text}: {target.text} was {how}",
                                 redirect.start)

    def check_redirect_target(self, redirect: Redirect) -> None:
        target = redirect.target
        if target is None or redirect.op not in (">", ">>", ">|", "&>", "&>>", "<>", ">&"):
            return
        text = target.text
        if redirect.op == ">&" and (text.isdigit() or text == "-"):
            return
        if BLOCK_DEVICE.match(text):
            self.add("raw_disk_write", f"{redirect.op} {text}", redirect.start)
        elif _system_write_target(text):
            self.add("system_path_write", f"{redirect.op} {text}", redirect.start)
        elif _sensitive(text):
            self.add("sensitive_file_access", f"{redirect.op} {text}", redirect.start)

    # -- per-command rules ---------------------------------------------------------------

    def named_rules(self, cmd: Command, words: list[Word], exec_index: int | None,
                    name: str | None, wrappers: list[str]) -> None:
        privileged = [w for w in wrappers if w in PRIVILEGE_COMMANDS]
        if name in PRIVILEGE_COMMANDS:
            privileged.append(name)
        if privileged:
            self.add("privilege_escalation", _words_text(words), cmd.start)
        if name is None or exec_index is None:
            return
        args = words[exec_index + 1:]
        start = words[exec_index].start
        if name == "rm":
            self.rm(args, start)
        elif name in ("chmod", "chown", "chgrp"):
            self.permissions(name, args, start)
        elif name == "dd":
            for arg in args:
                if arg.text.startswith("of=") and BLOCK_DEVICE.match(arg.text[3:]):
                    self.add("raw_disk_write", f"dd {arg.text}", arg.start)
        elif name in DISK_TOOLS or name.startswith("mkfs"):
            for arg in args:
                if BLOCK_DEVICE.match(arg.text):
                    self.add("raw_disk_write", f"{name} {arg.text}", arg.start)
                    break
        elif name in POWER_COMMANDS:
            self.add("host_disruption", _words_text(words[exec_index:]), start)
        elif name in ("init", "telinit"):
            if args and args[0].text in ("0", "6"):
                self.add("host_disruption", f"{name} {args[0].text}", start)
        elif name == "systemctl":
            if any(a.text in SYSTEMCTL_POWER for a in args):
                self.add("host_disruption", _words_text(words[exec_index:]), start)
        elif name in ("kill", "pkill", "killall"):
            self.kill(name, args, start)
        elif name in ("nc", "ncat", "netcat"):
            for arg in args:
                text = arg.text
                if text in ("--exec", "--sh-exec", "--lua-exec") or (
                        (cluster := _option_cluster(text)) and ("e" in cluster
                                                                or "c" in cluster)):
                    self.add("reverse_shell", _words_text(words[exec_index:]), start)
                    break
        elif name == "socat":
            for arg in args:
                lowered = arg.text.lower()
                if "exec:" in lowered or "system:" in lowered:
                    self.add("reverse_shell", _words_text(words[exec_index:]), start)
                    break
        elif name in WRITE_TOOLS_LAST_OPERAND or name in WRITE_TOOLS_ALL_OPERANDS:
            operands = [a for a in args if not a.text.startswith("-")]
            if name in WRITE_TOOLS_LAST_OPERAND:
                operands = operands[-1:]
            for operand in operands:
                if BLOCK_DEVICE.match(operand.text):
                    self.add("raw_disk_write", f"{name} {operand.text}", operand.start)
                elif _system_write_target(operand.text):
                    self.add("system_path_write", f"{name} {operand.text}", operand.start)
        elif name == "sed":
            if any(a.text.startswith("-i") or a.text.startswith("--in-place") for a in args):
                for arg in args:
                    if _system_write_target(arg.text):
                        self.add("system_path_write", f"sed -i {arg.text}", arg.start)
                        break
        elif name == "find":
            self.find_delete(args, start)
        self.package_install(name, args, start, words)

    def rm(self, args: list[Word], start: int) -> None:
        recursive = False
        no_preserve = False
        targets: list[Word] = []
        options = True
        for arg in args:
            text = arg.text
            if options and text == "--":
                options = False
                continue
            if options and text.startswith("--"):
                recursive = recursive or text == "--recursive"
                no_preserve = no_preserve or text == "--no-preserve-root"
                continue
            if options and text.startswith("-") and len(text) > 1:
                recursive = recursive or "r" in text or "R" in text
                continue
            targets.append(arg)
        if not recursive:
            return
        if no_preserve:
            self.add("recursive_delete_critical", "rm --no-preserve-root", start)
        for target in targets:
            if _critical_path(target.text):
                self.add("recursive_delete_critical", f"rm -r {target.text}", target.start)
                return
        for target in targets:
            if _broad_path(target.text):
                self.add("recursive_delete_broad", f"rm -r {target.text}", target.start)
                return

    def permissions(self, name: str, args: list[Word], start: int) -> None:
        recursive = any(a.text == "--recursive" or (
            (cluster := _option_cluster(a.text)) and "R" in cluster) for a in args)
        operands = [a for a in args if not a.text.startswith("-")]
        if recursive:
            for operand in operands[1:]:
                if _critical_path(operand.text):
                    self.add("recursive_permission_change_critical",
                             f"{name} -R {operand.text}", operand.start)
                    break
        if name == "chmod" and operands and _WORLD_WRITABLE.fullmatch(operands[0].text):
            self.add("world_writable_permissions", f"chmod {operands[0].text}", start)

    def kill(self, name: str, args: list[Word], start: int) -> None:
        if name != "kill":
            return
        operands = False
        skip = False
        for index, arg in enumerate(args):
            text = arg.text
            if skip:
                skip = False
                continue
            if not operands:
                if text == "--":
                    operands = True
                    continue
                if text in ("-s", "-n"):
                    skip = True
                    continue
                if index == 0 and _KILL_SIGNAL.fullmatch(text):
                    continue
                operands = True
            if text == "-1":
                self.add("host_disruption", "kill -1 (every process)", start)
                return

    def find_delete(self, args: list[Word], start: int) -> None:
        roots = []
        for arg in args:
            if arg.text.startswith(("-", "(", "!")):
                break
            roots.append(arg)
        if any(a.text == "-delete" for a in args) and any(_critical_path(r.text) for r in roots):
            self.add("recursive_delete_critical",
                     f"find {' '.join(r.text for r in roots)} -delete", start)

    def package_install(self, name: str, args: list[Word], start: int,
                        words: list[Word]) -> None:
        manager = name
        rest = args
        if interpreter_family(name) == "python":
            for index, arg in enumerate(args[:-1]):
                if arg.text == "-m" and args[index + 1].text in ("pip", "pip3"):
                    manager, rest = "pip", args[index + 2:]
                    break
        if manager.startswith("pip") and manager[3:].replace(".", "").isdigit():
            manager = "pip"
        subcommands = PACKAGE_MANAGERS.get(manager)
        if subcommands is None:
            return
        texts = [a.text for a in rest if a.static]
        if "*" in subcommands:
            hit = bool(texts)
        elif manager == "pacman":
            hit = any(t.startswith(("-S", "-U", "--sync", "--upgrade")) for t in texts)
        elif manager in ("dpkg", "rpm"):
            hit = any(t in subcommands or (t.startswith("-") and not t.startswith("--")
                                           and ("i" in t or "U" in t)) for t in texts)
        else:
            first = next((t for t in texts if not t.startswith("-")), None)
            hit = first in subcommands
            if manager == "uv" and first == "pip":
                hit = "install" in texts
        if hit:
            self.add("package_install", _words_text(words), start)


def _stage_text(stage: Command | Compound) -> str:
    if isinstance(stage, Command):
        return _words_text(stage.words, 4)
    return f"({stage.kind} ...)"


def _depth_hint(text: str) -> int:
    """A cheap upper bound of nesting for the bashlex gate (openers count)."""
    return (text.count("$(") + text.count("`") // 2 + text.count("<(") + text.count(">(")
            + text.count("${"))
