"""Taint: what a piece of shell may print, and the variables and files that carry it.

A `Risk` says what a substitution, a command or a pipeline stage may output:
fetched, decoded or interpreted content, or a tainted variable's value. `Taint`
is the dataflow state of one classification, in execution order:

* variables assigned from a risky substitution (or `read` from one, or a `for`
  variable over one) are tainted until a clean assignment;
* files a downloader writes (`curl -o F`, `wget URL`, fetched output redirected
  or `tee`d to F) are tainted for the rest of the command line; nothing
  untaints a file. File names compare as written, with `F` and `./F` the same;
* a file descriptor path (`/dev/fd/3`, `/dev/stdin`, `/proc/self/fd/0`) is the
  output of a risky process substitution while an input redirect from one is
  open: for its command (`bash /dev/fd/3 3< <(curl u)`), or for the rest of the
  command line after `exec 3< <(curl u)`; so is a variable or positional
  parameter that names one (`f=<(curl u)`, `sh -c 'bash "$0"' <(curl u)`);
* functions whose body is risky make a call to them risky.

Running tainted content (a tainted variable as a command or in `eval`, a
tainted file as the command, a script operand or sourced) blocks.
"""

from __future__ import annotations

import re

from .rules import DOWNLOADERS, Downloader, interpreter_family
from .script import SUB_MARK, Command, Redirect, Word
from .verdict import Findings
from .words import interpreter_options

__all__ = ["Risk", "Taint", "content_source", "merge", "substitution_output"]

STDOUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
DESCRIPTOR_PATH = re.compile(r"/dev/(?:fd/[0-9]+|stdin)|/proc/(?:self|thread-self|[0-9]+"
                             r"|\$\$|\$BASHPID)/fd/[0-9]+")
"""Paths that name a file descriptor of the shell or of the command that opens them."""
COPY_TOOLS = frozenset({"cp", "install"})
_DOT_SLASH = re.compile(r"(?:\./+)+")


class Risk:
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


def merge(a: Risk | None, b: Risk | None) -> Risk | None:
    if b is None:
        return a
    if a is None:
        return Risk(b.fetch, b.decode, b.interp, b.taint)
    a.fetch = a.fetch or b.fetch
    a.decode = a.decode or b.decode
    a.interp = a.interp or b.interp
    a.taint = a.taint or b.taint
    return a




def file_key(text: str) -> str | None:
    """The name a file is tainted under: as written, `./x.sh` the same as `x.sh`."""
    if SUB_MARK in text:
        return None    # a computed name: nothing to compare it with
    if text.startswith("./"):
        match = _DOT_SLASH.match(text)
        if match is not None:
            text = text[match.end():]
    return text or None


def url_file_names(url: str) -> list[str]:
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


def downloaded_files(spec: Downloader, args: list[Word]) -> list[str]:
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
            files.extend(url_file_names(url))
    if dirs:    # the last directory option wins; the bare names stay tainted too
        folder = dirs[-1].rstrip("/")
        files.extend([f"{folder}/{name}" for name in files])
    return files


def substitution_output(word: Word, subrisk: dict[int, Risk | None]) -> str | None:
    """What a risky process substitution in `word` prints (`<(curl u)` is a path to
    fetched content), if `word` holds one."""
    for sub in word.subs:
        sub_risk = subrisk.get(id(sub))
        if sub.kind == "<(" and sub_risk is not None and sub_risk.risky:
            return f"<({sub_risk.risky} ...) output"
    return None


def content_source(*risks: Risk | None) -> str | None:
    """What makes written content count as downloaded: a fetcher or a tainted variable."""
    for risk in risks:
        if risk is not None and (risk.fetch or risk.taint):
            return (f"{risk.fetch} output" if risk.fetch
                    else f"a tainted variable ({risk.taint})")
    return None



class Taint:
    """Tainted variables, files and functions of one classification, and the variables
    whose value is known statically (`X=rm`: `words.normalize` puts `rm` for `$X`)."""

    __slots__ = ("descriptors", "files", "findings", "functions", "paths", "values",
                 "variables")

    def __init__(self, findings: Findings) -> None:
        self.findings = findings
        self.variables: dict[str, str] = {}   # variable -> how fetched content got there
        self.files: dict[str, str] = {}       # file name -> how downloaded content got there
        self.functions: dict[str, Risk] = {}
        self.values: dict[str, str] = {}      # variable -> its static value
        self.descriptors: str | None = None   # what an open descriptor path holds
        self.paths: dict[str, str] = {}       # variable -> the process substitution it names

    def forget(self, name: str) -> None:
        """`name` got a value the audit does not know (and that carries no taint)."""
        self.variables.pop(name, None)
        self.values.pop(name, None)

    # -- variables -------------------------------------------------------------------------

    def param_taint(self, word: Word) -> Risk | None:
        if not word.params or not self.variables:
            return None
        for param in word.params:
            source = self.variables.get(param)
            if source is not None:
                return Risk(taint=source)
        return None

    def tainted_in(self, word: Word) -> str | None:
        if not word.params or not self.variables:
            return None
        for param in word.params:
            if param in self.variables:
                return param
        return None

    def assign(self, word: Word, subrisk: dict[int, Risk | None], *, sets: bool = True,
               ) -> None:
        """An assignment word: taints or clears its variable. With `sets` (an assignment
        that stays in the shell, not one prefixed to a command) a static value is kept."""
        name = word.assign
        if name is None:
            return
        if sets and word.static:
            self.values[name] = word.value
        else:
            self.values.pop(name, None)
        source = None
        for sub in word.subs:
            sub_risk = subrisk.get(id(sub))
            if sub_risk is not None and sub_risk.risky and not sub.arith:
                source = f"${name} holds {sub_risk.risky} output"
                break
        if source is None:
            tainted = self.tainted_in(word)
            if tainted is not None:
                source = self.variables[tainted]
        if source is None:
            self.variables.pop(name, None)
        else:
            self.variables[name] = source
        output = substitution_output(word, subrisk)
        if output is None:
            self.paths.pop(name, None)
        else:
            self.paths[name] = f"${name} names {output}"


    def read(self, cmd: Command, args: list[Word], name: str,
                   subrisk: dict[int, Risk | None], upstream: Risk | None) -> None:
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
                source = self.variables[tainted]
        names = [a.text for a in args if not a.text.startswith("-") and a.static]
        if name != "read":
            names = names[-1:] or ["MAPFILE"]
        for variable in names or ["REPLY"]:
            self.forget(variable)
            if source is not None:
                self.variables[variable] = f"${variable} was read from {source} output"

    # -- files written from downloaded content ----------------------------------------------

    def file_writes(self, cmd: Command, words: list[Word], exec_index: int | None,
                    name: str | None, source: str | None,
                    subrisk: dict[int, Risk | None]) -> None:
        """Taint the files this command fills with downloaded content."""
        if name is not None and exec_index is not None:
            spec = DOWNLOADERS.get(name)
            args = words[exec_index + 1:]
            if spec is not None:
                for path in downloaded_files(spec, args):
                    self.taint_file(path, f"written by {name}")
            elif source is not None and name == "tee":
                for arg in args:
                    if not arg.text.startswith("-") and not arg.subs:
                        self.taint_file(arg.text, f"written by tee from {source}")
            elif name in COPY_TOOLS and len(args) > 1 and not args[-1].subs:
                for arg in args[:-1]:
                    copied = substitution_output(arg, subrisk)
                    if copied is not None:
                        self.taint_file(args[-1].text, f"copied by {name} from {copied}")
                        break
            elif source is not None and name == "dd":
                for arg in args:
                    if arg.text.startswith("of=") and not arg.subs:
                        self.taint_file(arg.text[3:], f"written by dd from {source}")
        if source is not None and cmd.redirects:
            self.redirect_writes(cmd.redirects, source)

    def redirect_writes(self, redirects: list[Redirect], source: str) -> None:
        for redirect in redirects:
            target = redirect.target
            if target is None or target.subs or redirect.op not in STDOUT_REDIRECTS:
                continue
            if redirect.op == ">&" and (target.text.isdigit() or target.text == "-"):
                continue
            self.taint_file(target.text, f"written by `{redirect.op}` from {source}")

    def taint_file(self, path: str, how: str) -> None:
        key = file_key(path)
        if key is not None and key not in self.files:
            self.files[key] = how

    def tainted_file(self, word: Word) -> str | None:
        if self.descriptors is not None and DESCRIPTOR_PATH.fullmatch(word.text):
            return self.descriptors
        if self.paths and word.params:
            for param in word.params:
                if param in self.paths:
                    return self.paths[param]
        key = file_key(word.text)
        return self.files.get(key) if key is not None else None

    def rule_for(self, word: Word) -> str:
        """The rule that running the tainted file `word` breaks."""
        if (self.descriptors is not None and DESCRIPTOR_PATH.fullmatch(word.text)) or \
                (self.paths and any(param in self.paths for param in word.params)):
            return "interpreter_runs_substitution"
        return "downloaded_file_executed"

    def bind_descriptors(self, cmd: Command, subrisk: dict[int, Risk | None]) -> str | None:
        """What the descriptor paths of `cmd` hold: the output of a risky process
        substitution on one of its input redirects (`3< <(curl u)`, `< <(curl u)`)."""
        for redirect in cmd.redirects:
            if redirect.op in ("<", "<>") and redirect.target is not None:
                output = substitution_output(redirect.target, subrisk)
                if output is not None:
                    return f"a descriptor open on {output}"
        return None

    def file_executed(self, cmd: Command, words: list[Word], exec_index: int,
                      name: str | None, reads_code: str | None) -> None:
        """Block running a tainted file: as the command, a script operand, or sourced."""
        word = words[exec_index]
        how = self.tainted_file(word)
        if how is not None:
            self.findings.add(self.rule_for(word),
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
                code_index, operand, _, _ = interpreter_options(words, exec_index, family)
                if code_index is not None:
                    operand = None
        if operand is not None and operand < len(words):
            script = words[operand]
            how = self.tainted_file(script)
            if how is not None:
                self.findings.add(self.rule_for(script),
                                  f"{name} {script.text}: {script.text} was {how}", script.start)
        if reads_code:
            for redirect in cmd.redirects:
                target = redirect.target
                if redirect.op == "<" and target is not None:
                    how = self.tainted_file(target)
                    if how is not None:
                        self.findings.add(self.rule_for(target),
                                          f"{name} < {target.text}: {target.text} was {how}",
                                 redirect.start)
