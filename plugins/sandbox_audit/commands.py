"""Per-command rules: what one simple command does, judged by its name and arguments.

`CommandRules.named_rules` gets a command whose name is known (after exec
wrappers) and adds the findings its name and arguments call for: recursive
deletes of critical paths, raw disk writes, power-off, reverse-shell tools,
writes to system paths, privilege escalation, package installs. The words the
rules look for are data in `rules.py`; the path predicates below say what a
path names.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re

from .rules import (
    BLOCK_DEVICE,
    CREDENTIAL_FILES,
    DISK_TOOLS,
    LOADER_HIJACK_VARIABLES,
    LOADER_VARIABLES,
    NAMING_COMMANDS,
    PACKAGE_MANAGERS,
    PATTERN_FIRST,
    POWER_COMMANDS,
    PRIVILEGE_COMMANDS,
    READ_ONLY_LIBRARY_PREFIXES,
    REVERSE_SHELL_CODE_MARKERS,
    REVERSE_SHELL_SPAWN_MARKERS,
    SENSITIVE_PATHS,
    SOCKET_PATHS,
    STARTUP_DIRS,
    STARTUP_FILE_NAMES,
    STARTUP_PREFIXES,
    SYSTEM_TOP_DIRS,
    SYSTEM_WRITE_PREFIXES,
    SYSTEMCTL_POWER,
    WRITE_TOOLS_ALL_OPERANDS,
    WRITE_TOOLS_LAST_OPERAND,
    interpreter_family,
)
from .script import SUB_MARK, Command, Redirect, Word
from .verdict import Findings
from .words import NAME_ASSIGN, basename, option_cluster, words_text

__all__ = ["CommandRules", "critical_path", "reverse_shell_code", "sensitive",
           "system_write_target"]

_SLASHES = re.compile(r"/{2,}")
_WORLD_WRITABLE = re.compile(r"[0-7]?[0-7]?[0-7][2367]|[ugoa]*[ao][ugoa]*[+=][rwxXst]*w[rwxXst]*")
_KILL_SIGNAL = re.compile(r"-(?:[0-9]+|[A-Z][A-Z0-9+-]*)")
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


HOME_MARK = "/\ue001home"
"""Stands for the home directory while a path is normalised (`~/..` is `/`)."""


def resolved_path(text: str, cwd: str | None = None) -> str | None:
    """`text` as an absolute, normalised path: `~`/`$HOME` as `HOME_MARK`, `//`, `.` and
    `..` folded, a relative path joined to `cwd`; None for a relative path when `cwd`
    is unknown."""
    path = text.replace("${HOME}", "~").replace("$HOME", "~")
    if path == "~" or path.startswith("~/"):
        path = HOME_MARK + path[1:]
    elif not path.startswith("/"):
        if cwd is None:
            return None
        path = f"{cwd}/{path}"
    if "//" in path:
        path = _SLASHES.sub("/", path)
    return posixpath.normpath(path)


def critical_path(text: str, cwd: str | None = None) -> bool:
    """`/`, home, a top-level system directory, or everything in one (`/*`, `~/.`,
    `/usr/../`, `/u*`), after `resolved_path`."""
    path = resolved_path(text, cwd)
    if path is None:
        return False
    while path.endswith(("/*", "/.*")) and len(path) > 2:
        path = path[:path.rindex("/")] or "/"
    if path in ("/", "/*", HOME_MARK) or path in SYSTEM_TOP_DIRS:
        return True
    if path.startswith(HOME_MARK + "/"):
        return False
    if any(c in path for c in "*?[") and path.count("/") == 1:
        return any(fnmatch.fnmatchcase(top, path) for top in SYSTEM_TOP_DIRS)
    for home in ("/home/", "/Users/"):
        if path.startswith(home) and "/" not in path[len(home):] and "*" not in path:
            return True
    return False


def persistent_target(text: str) -> bool:
    """A file whose content later shells, log-ins or schedules run (`rules.STARTUP_*`)."""
    path = _SLASHES.sub("/", text) if "//" in text else text
    if basename(path.rstrip("/")) in STARTUP_FILE_NAMES:
        return True
    if path.startswith(STARTUP_PREFIXES):
        return True
    return any(folder in path or path.startswith(folder[1:]) for folder in STARTUP_DIRS)


def credential(text: str) -> bool:
    """A path to `rules.CREDENTIAL_FILES` or a process environment (`/proc/*/environ`)."""
    return any(path in text for path in CREDENTIAL_FILES) or (
        "/proc/" in text and "/environ" in text)


def writable_library_path(variable: str, value: str) -> bool:
    """Whether a loader variable's value names a path the sandbox user may write."""
    search_path = variable.endswith("_PATH")
    entries = value.split(":") if search_path else re.split(r"[: ]+", value)
    for entry in entries:
        if entry.startswith(("~", "$HOME", "${HOME}")):
            return True                    # the home directory is writable
        if "$" in entry or SUB_MARK in entry:
            continue                       # an expansion: not known here
        if not entry:
            if search_path and value:
                return True                # an empty entry is the current directory
            continue
        if entry.startswith(READ_ONLY_LIBRARY_PREFIXES) and ".." not in entry:
            continue
        if not search_path and "/" not in entry:
            continue                       # a bare library name is searched in system dirs
        return True
    return False


def socket_path(text: str) -> bool:
    return any(path in text for path in SOCKET_PATHS)


def broad_path(text: str) -> bool:
    return text in ("*", ".", "..", "./*", "../*", "./", "../", ".*", "./.*")


def system_write_target(text: str) -> bool:
    path = _SLASHES.sub("/", text) if "//" in text else text
    if path.startswith(SYSTEM_WRITE_PREFIXES) or path in ("/etc/ld.so.preload",):
        return True
    return path.rstrip("/") in ("/etc", "/bin", "/sbin", "/usr/bin", "/usr/sbin", "/boot")


def sensitive(text: str) -> bool:
    for marker in SENSITIVE_PATHS:
        if marker in text:
            if marker == "/environ":
                return "/proc/" in text
            return True
    return False


_FORK_CALL = re.compile(r"\bfork\b")
_ENDLESS_LOOP = re.compile(
    r"\bwhile[ \t]*(?:\([ \t]*)?(?:True|true|1|fork)\b|\bfor[ \t]*\([ \t]*;[ \t]*;"
    r"|\bloop[ \t]*(?:do\b|\{)|\bwhile[ \t]*:|\bitertools\.count\b|\biter\(int")


def fork_loop(code: str) -> bool:
    """Interpreter code that forks inside an endless loop (`while True: os.fork()`)."""
    return "fork" in code and _FORK_CALL.search(code) is not None \
        and _ENDLESS_LOOP.search(code) is not None


def reverse_shell_code(text: str) -> bool:
    """Socket-plus-spawn code in an interpreter's code string."""
    if "pty.spawn" in text or "fsockopen" in text:
        return True
    if any(marker in text for marker in REVERSE_SHELL_CODE_MARKERS):
        return any(marker in text for marker in REVERSE_SHELL_SPAWN_MARKERS)
    return False



class CommandRules:
    """The rules on one simple command, adding to the classification's findings.

    `cwd` is the working directory `cd` made known (None while unknown): a
    relative path is judged where it points (`cd / && rm -rf *`).
    """

    __slots__ = ("cwd", "findings")

    def __init__(self, findings: Findings) -> None:
        self.findings = findings
        self.cwd: str | None = None

    def check_redirect_target(self, redirect: Redirect, target: Word | None = None) -> None:
        """A redirect: sockets, credentials read, files written. `target` is the target
        word as resolved (`words.normalize`), when it differs from the parsed one."""
        target = target if target is not None else redirect.target
        if target is None:
            return
        text, op = target.text, redirect.op
        if socket_path(text):
            self.findings.add("reverse_shell", f"{op} {text}", redirect.start)
        elif op in ("<", "<>") and credential(text):
            self.findings.add("credential_read", f"{op} {text}", redirect.start)
        if op not in _WRITES or (op == ">&" and (text.isdigit() or text == "-")):
            return
        self.write_target(text, op, redirect.start)

    def write_target(self, text: str, what: str, position: int) -> None:
        """A file this command writes: start-up files, disks, system paths, credentials."""
        if persistent_target(text):
            self.findings.add("persistence", f"{what} {text}", position)
        elif BLOCK_DEVICE.match(text):
            self.findings.add("raw_disk_write", f"{what} {text}", position)
        elif system_write_target(text):
            self.findings.add("system_path_write", f"{what} {text}", position)
        elif sensitive(text):
            self.findings.add("sensitive_file_access", f"{what} {text}", position)

    def assignment(self, word: Word) -> None:
        """`NAME=value` in the environment of what runs: loader variables."""
        match = NAME_ASSIGN.match(word.text)
        if match is None:
            return
        variable = match.group(1)
        if variable in LOADER_HIJACK_VARIABLES and writable_library_path(
                variable, word.text[match.end():]):
            self.findings.add("loader_hijack", word.text, word.start)
        elif variable in LOADER_VARIABLES:
            self.findings.add("loader_path_override", word.text, word.start)

    def mentioned_paths(self, words: list[Word], exec_index: int | None,
                        name: str | None) -> None:
        """Credential paths among the words: read (blocked) or only named (flagged)."""
        if len(words) < 2:
            return
        joined = "\n".join([w.text for w in words])
        if not any(marker in joined for marker in SENSITIVE_PATHS):
            return
        pattern = self.pattern_operand(words, exec_index, name)
        reads = name is not None and name not in NAMING_COMMANDS
        for index, word in enumerate(words):
            if sensitive(word.text):
                if reads and index != pattern and credential(word.text):
                    self.findings.add("credential_read", word.text, word.start)
                else:
                    self.findings.add("sensitive_file_access", word.text, word.start)
                return

    @staticmethod
    def pattern_operand(words: list[Word], exec_index: int | None,
                        name: str | None) -> int | None:
        """The index of a search tool's pattern operand (`grep PATTERN FILE`)."""
        if exec_index is None or name not in PATTERN_FIRST:
            return None
        for index in range(exec_index + 1, len(words)):
            text = words[index].text
            if text in ("-e", "-f", "--regexp", "--file") or text.startswith(
                    ("--regexp=", "--file=")):
                return None
            if not text.startswith("-"):
                return index
        return None

    def named_rules(self, cmd: Command, words: list[Word], exec_index: int | None,
                    name: str | None, wrappers: list[str]) -> None:
        privileged = [w for w in wrappers if w in PRIVILEGE_COMMANDS]
        if name in PRIVILEGE_COMMANDS:
            privileged.append(name)
        if privileged:
            self.findings.add("privilege_escalation", words_text(words), cmd.start)
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
                if arg.text.startswith("of="):
                    self.write_target(arg.text[3:], "dd of=", arg.start)
        elif name in DISK_TOOLS or name.startswith("mkfs"):
            for arg in args:
                if BLOCK_DEVICE.match(arg.text):
                    self.findings.add("raw_disk_write", f"{name} {arg.text}", arg.start)
                    break
        elif name in POWER_COMMANDS:
            self.findings.add("host_disruption", words_text(words[exec_index:]), start)
        elif name in ("init", "telinit"):
            if args and args[0].text in ("0", "6"):
                self.findings.add("host_disruption", f"{name} {args[0].text}", start)
        elif name == "systemctl":
            if any(a.text in SYSTEMCTL_POWER for a in args):
                self.findings.add("host_disruption", words_text(words[exec_index:]), start)
        elif name in ("kill", "pkill", "killall"):
            self.kill(name, args, start)
        elif name in ("nc", "ncat", "netcat"):
            for arg in args:
                text = arg.text
                if text in ("--exec", "--sh-exec", "--lua-exec") or (
                        (cluster := option_cluster(text)) and ("e" in cluster
                                                                or "c" in cluster)):
                    self.findings.add("reverse_shell", words_text(words[exec_index:]), start)
                    break
        elif name == "socat":
            for arg in args:
                lowered = arg.text.lower()
                if "exec:" in lowered or "system:" in lowered:
                    self.findings.add("reverse_shell", words_text(words[exec_index:]), start)
                    break
        elif name in WRITE_TOOLS_LAST_OPERAND or name in WRITE_TOOLS_ALL_OPERANDS:
            operands = [a for a in args if not a.text.startswith("-")]
            if name in WRITE_TOOLS_LAST_OPERAND:
                operands = operands[-1:]
            for operand in operands:
                self.write_target(operand.text, name, operand.start)
        elif name == "sed":
            if any(a.text.startswith("-i") or a.text.startswith("--in-place") for a in args):
                for arg in args[1:]:
                    if not arg.text.startswith("-"):
                        self.write_target(arg.text, "sed -i", arg.start)
        elif name == "find":
            self.find_delete(args, start)
        elif name == "crontab":
            self.crontab(args, start)
        elif name in ("cd", "pushd"):
            self.change_directory(args)
        self.package_install(name, args, start, words)

    def crontab(self, args: list[Word], start: int) -> None:
        """`crontab FILE`, `crontab -` and a bare `crontab` (stdin) install a schedule."""
        operands: list[str] = []
        other_mode = False      # -l (list), -r (remove), -e (edit interactively)
        skip = False
        for arg in args:
            text = arg.text
            if skip:
                skip = False
            elif text == "-u":
                skip = True
            elif text.startswith("-") and text != "-":
                other_mode = other_mode or any(c in text for c in "lre")
            else:
                operands.append(text)
        if operands or not other_mode:
            source = operands[0] if operands else "stdin"
            self.findings.add("persistence", f"crontab installed from {source}", start)

    def change_directory(self, args: list[Word]) -> None:
        operands = [a for a in args if not a.text.startswith("-") or a.text == "-"]
        if not operands:
            self.cwd = HOME_MARK
        elif operands[0].static and operands[0].text != "-":
            self.cwd = resolved_path(operands[0].text, self.cwd)
        else:
            self.cwd = None

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
            self.findings.add("recursive_delete_critical", "rm --no-preserve-root", start)
        for target in targets:
            if critical_path(target.text, self.cwd):
                self.findings.add("recursive_delete_critical", f"rm -r {target.text}", target.start)
                return
        for target in targets:
            if broad_path(target.text):
                self.findings.add("recursive_delete_broad", f"rm -r {target.text}", target.start)
                return

    def permissions(self, name: str, args: list[Word], start: int) -> None:
        recursive = any(a.text == "--recursive" or (
            (cluster := option_cluster(a.text)) and "R" in cluster) for a in args)
        operands = [a for a in args if not a.text.startswith("-")]
        if recursive:
            for operand in operands[1:]:
                if critical_path(operand.text, self.cwd):
                    self.findings.add("recursive_permission_change_critical",
                                      f"{name} -R {operand.text}", operand.start)
                    break
        if name == "chmod" and operands and _WORLD_WRITABLE.fullmatch(operands[0].text):
            self.findings.add("world_writable_permissions", f"chmod {operands[0].text}", start)

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
                self.findings.add("host_disruption", "kill -1 (every process)", start)
                return

    def find_delete(self, args: list[Word], start: int) -> None:
        roots = []
        for arg in args:
            if arg.text.startswith(("-", "(", "!")):
                break
            roots.append(arg)
        if any(a.text == "-delete" for a in args) and any(
                critical_path(r.text, self.cwd) for r in roots):
            self.findings.add("recursive_delete_critical",
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
            self.findings.add("package_install", words_text(words), start)

