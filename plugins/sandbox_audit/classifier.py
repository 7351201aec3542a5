"""Classify a shell command before the sandbox runs it: block, warn or pass.

`classify(command)` is a pure function returning a `Verdict`: the action, the
rule that decided it (see `rules.RULES`), a reason and every finding. It never
raises and its cost is linear in the length of the command.

How a command is judged:

1. It is parsed into a `Script` (`script.py`): by bashlex where bashlex parses
   it faithfully (`bashlex_walker.py`), else by the linear tokenizer
   (`splitter.py`). The tokenizer always runs first: it measures nesting, and
   input nested deeper than it follows is blocked (`nesting_too_deep`).
   bashlex runs in a worker process bounded in CPU time and memory
   (`parse_worker.py`); a parse that runs over is read by the tokenizer.
   Words are expanded where that is known statically (`words.normalize`):
   `${IFS}` separates words, brace expansion makes its words, a variable
   assigned a static value is replaced by it.
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
   Code-valued places are position-blind because they execute whatever they
   receive wherever they stand: the arguments of `eval`/`source`, everything
   after an interpreter's code-string flag (`-c`, `-e`, `-p`, `-r`,
   `-Command`), a command's code option or operand (`awk PROGRAM`, `git -c
   core.pager=`, `watch CMD`; `rules.CODE_OPTIONS`) and a variable holding a
   command (`PAGER=`); a here-string or heredoc feeding an interpreter reaches
   the same place through stdin. There a risky substitution blocks, as does
   literal substitution text (`'$(curl u)'`) given to a shell or interpreter.
   A process substitution is a path to its output: as an interpreter's script,
   a file of code (`bash --rcfile`, `awk -f`, `BASH_ENV=`), or through a
   descriptor path open on it (`source /dev/fd/3 3< <(curl u)`, `exec 3<
   <(curl u); bash /dev/fd/3`), a risky one blocks.
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
7. Code a command carries in its options and operands (`awk` `system()`,
   sed's `e`, `git -c core.pager=`, `tar --to-command`, `ssh -o
   ProxyCommand=`, `env -S`, `watch`, `flock -c`, `vim -c '!...'`, `parallel`;
   `rules.CODE_OPTIONS`, read by `embedded.py`) is classified as nested shell
   code too.
8. Per-command rules catch the classic destructive forms (recursive deletes of
   `/`, home or a system directory, with paths normalised and `cd` followed;
   fork bombs; raw disk writes; reverse shells; power-off; persistence in
   start-up files and crontabs; reads of `/etc/shadow`; loader hijacks; awk
   programs on a network file that run commands; loops that start background
   commands without bound, `loops.py`) and
   flag risky-but-common ones (sudo, package installs, chmod 777, ...). A
   command named by a variable or a glob is judged as each command it may be.

The walk is `walk.py`, the dataflow `taint.py`, the per-command rules
`commands.py`, process loops `loops.py`, the rules and vocabulary (data)
`rules.py`, the verdict `verdict.py`, the choice of front end `frontend.py`.

This is defense in depth and audit, not a security boundary.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from antler.plugin_api import FILE_WRITE_TOOLS

from .commands import CommandRules, credential, sensitive
from .frontend import Parser
from .splitter import Budget
from .verdict import Finding, Findings, Verdict
from .walk import Walker

__all__ = ["Budget", "Finding", "Parser", "Verdict", "classify", "classify_file_operation"]


def classify(command: str, *, parser: Parser = "auto", budget: Budget | None = None,
             ) -> Verdict:
    """Classify one shell command. Never raises; linear in `len(command)`.

    `parser="tokenizer"` skips bashlex (tests compare the two front ends);
    `parser="bashlex"` tries bashlex on every command it can take, and the
    default, `"auto"`, leaves out commands of plain words only
    (`frontend.plain_words`), which both front ends read the same way. `budget`
    bounds the structure built (default `Budget()`: beyond it the command is
    refused as `command_too_complex`); benchmarks pass a larger one to time the
    analysis itself.
    """
    if not isinstance(command, str):
        command = str(command)
    walker = Walker(parser, budget)
    with _collector_paused():
        try:
            walker.audit_top(command)
        except Exception as exc:  # a bug must not let a command through unaudited
            walker.findings.add("audit_failed", f"{type(exc).__name__}: {exc}", 0)
    return walker.findings.verdict()


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


_FILE_WRITE = frozenset({*FILE_WRITE_TOOLS, "edit_file", "append_file"})


def classify_file_operation(tool: str, path: str, *, write: bool | None = None) -> Verdict:
    """Classify a file tool's path: writes to start-up files and system locations block,
    as does reading a credential file; other credentials paths warn."""
    writes = tool in _FILE_WRITE if write is None else write
    findings = Findings()
    text = path if isinstance(path, str) else str(path)
    if writes:
        CommandRules(findings).write_target(text, tool, 0)
    elif credential(text):
        findings.add("credential_read", f"{tool} {text}", 0)
    elif sensitive(text):
        findings.add("sensitive_file_access", f"{tool} {text}", 0)
    return findings.verdict()
