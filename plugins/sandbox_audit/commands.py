"""Per-command rules: what one simple command does, judged by its name and arguments.

`CommandRules.named_rules` gets a command whose name is known (after exec
wrappers) and adds the findings its name and arguments call for: recursive
deletes of critical paths, raw disk writes, power-off, reverse-shell tools,
writes to system paths, privilege escalation, package installs. The words the
rules look for are data in `rules.py`; the path predicates below say what a
path names.
"""

from __future__ import annotations

import re

from .rules import (
    BLOCK_DEVICE,
    DISK_TOOLS,
    PACKAGE_MANAGERS,
    POWER_COMMANDS,
    PRIVILEGE_COMMANDS,
    REVERSE_SHELL_CODE_MARKERS,
    REVERSE_SHELL_SPAWN_MARKERS,
    SENSITIVE_PATHS,
    SYSTEM_TOP_DIRS,
    SYSTEM_WRITE_PREFIXES,
    SYSTEMCTL_POWER,
    WRITE_TOOLS_ALL_OPERANDS,
    WRITE_TOOLS_LAST_OPERAND,
    interpreter_family,
)
from .script import Command, Redirect, Word
from .verdict import Findings
from .words import option_cluster, words_text

__all__ = ["CommandRules", "critical_path", "reverse_shell_code", "sensitive",
           "system_write_target"]

_SLASHES = re.compile(r"/{2,}")
_WORLD_WRITABLE = re.compile(r"[0-7]?[0-7]?[0-7][2367]|[ugoa]*[ao][ugoa]*[+=][rwxXst]*w[rwxXst]*")
_KILL_SIGNAL = re.compile(r"-(?:[0-9]+|[A-Z][A-Z0-9+-]*)")


def critical_path(text: str) -> bool:
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


def reverse_shell_code(text: str) -> bool:
    """Socket-plus-spawn code in an interpreter's code string."""
    if "pty.spawn" in text or "fsockopen" in text:
        return True
    if any(marker in text for marker in REVERSE_SHELL_CODE_MARKERS):
        return any(marker in text for marker in REVERSE_SHELL_SPAWN_MARKERS)
    return False



class CommandRules:
    """The rules on one simple command, adding to the classification's findings."""

    __slots__ = ("findings",)

    def __init__(self, findings: Findings) -> None:
        self.findings = findings

    def check_redirect_target(self, redirect: Redirect) -> None:
        target = redirect.target
        if target is None or redirect.op not in (">", ">>", ">|", "&>", "&>>", "<>", ">&"):
            return
        text = target.text
        if redirect.op == ">&" and (text.isdigit() or text == "-"):
            return
        if BLOCK_DEVICE.match(text):
            self.findings.add("raw_disk_write", f"{redirect.op} {text}", redirect.start)
        elif system_write_target(text):
            self.findings.add("system_path_write", f"{redirect.op} {text}", redirect.start)
        elif sensitive(text):
            self.findings.add("sensitive_file_access", f"{redirect.op} {text}", redirect.start)


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
                if arg.text.startswith("of=") and BLOCK_DEVICE.match(arg.text[3:]):
                    self.findings.add("raw_disk_write", f"dd {arg.text}", arg.start)
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
                if BLOCK_DEVICE.match(operand.text):
                    self.findings.add("raw_disk_write", f"{name} {operand.text}", operand.start)
                elif system_write_target(operand.text):
                    self.findings.add("system_path_write", f"{name} {operand.text}", operand.start)
        elif name == "sed":
            if any(a.text.startswith("-i") or a.text.startswith("--in-place") for a in args):
                for arg in args:
                    if system_write_target(arg.text):
                        self.findings.add("system_path_write", f"sed -i {arg.text}", arg.start)
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
            self.findings.add("recursive_delete_critical", "rm --no-preserve-root", start)
        for target in targets:
            if critical_path(target.text):
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
                if critical_path(operand.text):
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
        if any(a.text == "-delete" for a in args) and any(critical_path(r.text) for r in roots):
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

