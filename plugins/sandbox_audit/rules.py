"""The audit's rules and vocabulary, as data.

Every verdict names one rule of `RULES`. A rule says what it matches, why that
matters and what the model should do instead; the classifier (`classifier.py`)
holds the matching logic, keyed by rule name, and the sets below are the words
that logic looks for. Order matters: when several rules of the same action fire
on one command, the earliest rule in `RULES` is the one reported (the more
specific ones come first), and every finding stays in the audit log.

This is defense in depth and audit, not a security boundary: the sandbox is the
isolation boundary. The rules aim at what a model is plausibly talked into (an
installer piped to a shell, fetched text run as code, a destructive one-liner)
and at keeping the audit log honest, not at an adversary with the whole shell
language at hand.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CODE_FLAGS",
    "DECODERS",
    "DOWNLOADERS",
    "EVAL_WORDS",
    "FETCHERS",
    "NETWORK_TOOLS",
    "RAW_PATTERNS",
    "RULES",
    "RULES_BY_NAME",
    "SHELLS",
    "SHELL_CALLS",
    "WRAPPERS",
    "Action",
    "Downloader",
    "Rule",
    "Wrapper",
    "interpreter_family",
]


class Action(StrEnum):
    """What happens to the command: refused, run and flagged, or run."""

    BLOCK = "block"
    WARN = "warn"
    PASS = "pass"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {Action.PASS: 0, Action.WARN: 1, Action.BLOCK: 2}


@dataclass(frozen=True)
class Rule:
    """One named rule: what it matches, why, and what the model should do instead."""

    name: str
    action: Action
    matches: str
    why: str
    advice: str = ""


_B, _W, _P = Action.BLOCK, Action.WARN, Action.PASS

RULES: tuple[Rule, ...] = (
    # -- destructive one-liners --------------------------------------------------------
    Rule("reverse_shell", _B,
         "a shell wired to a network socket: /dev/tcp or /dev/udp, nc/ncat -e, socat "
         "EXEC:, a pipeline joining a shell and a network tool, socket+spawn code, an awk "
         "program that opens a network file (`/inet/tcp/...`, `/inet4/`, `/inet6/`) and runs "
         "commands (`system()`, a pipe, a `|&` coprocess on anything but the socket)",
         "it hands an interactive shell to whoever listens on the other end",
         "Do not open network shells; run the commands you need directly."),
    Rule("fork_bomb", _B,
         "a function that pipes or backgrounds calls to itself (`:(){ :|:& };:`), a loop "
         "that starts commands in the background (`&`, or inside `sh -c`/`eval` code) with "
         "no `wait` or exit and no bound: a condition that never ends it (`while true`, "
         "`while [ 1 ]`, `while ((1))`, `until false`, `for ((;;))`) or more than "
         "1,024 passes (`for i in {1..100000}`, `$(seq 100000)`, `for ((i=0;i<100000;i++))`), "
         "or interpreter code that forks in an endless loop (`fork while fork`, "
         "`while True: os.fork()`)",
         "it multiplies processes until the machine stops responding",
         "Do not start unbounded processes."),
    Rule("recursive_delete_critical", _B,
         "rm -r/-R/--recursive of /, the home directory, a top-level system directory, "
         "/mnt/user-data itself, or with --no-preserve-root; paths are normalised "
         "(`/usr/../`, `//`, `~/..`) and relative ones joined to a directory `cd` made "
         "known (`cd / && rm -rf *`); a command named by a variable or glob counts as every "
         "command it could be (`$X -rf /`, `/bin/r? -rf /`)",
         "it destroys the system or every file of the user",
         "Delete only the specific files or directories you created, by explicit path."),
    Rule("raw_disk_write", _B,
         "writes to a block device: dd of=/dev/sdX, a redirect or tee to a disk, mkfs, "
         "wipefs, shred, partitioners",
         "it overwrites a disk below the file system",
         "Write to regular files under /mnt/user-data instead."),
    Rule("host_disruption", _B,
         "shutdown, reboot, halt, poweroff, init 0/6, systemctl poweroff/reboot, kill -1",
         "it stops the host or every process on it",
         "Do not stop the machine or kill every process; stop only your own processes by PID."),
    Rule("persistence", _B,
         "writing or appending to a shell start-up file (~/.bashrc, ~/.profile, ~/.zshrc, "
         "~/.bash_profile, /etc/profile.d/, ...), an autostart or cron location, "
         "authorized_keys, or installing a crontab from a pipe or a file",
         "it plants commands that run again in every later shell or on a schedule, long "
         "after this command was reviewed",
         "Do not change start-up files or schedules; run what you need in this command."),
    Rule("credential_read", _B,
         "reading /etc/shadow, /etc/gshadow or a process's environment (/proc/*/environ)",
         "these hold password hashes and the secrets of running processes",
         "Do not read credentials; ask the user for what the task needs."),
    Rule("loader_hijack", _B,
         "LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT or their macOS forms pointing at a writable "
         "path (/tmp, the workspace, home, a relative path)",
         "every later program loads code from a place anyone in the sandbox can write",
         "Link or load libraries from system locations, or run the program that needs "
         "them directly."),
    Rule("system_path_write", _B,
         "a redirect, tee, cp, mv, install, ln, sed -i or file tool writing under /etc, "
         "/bin, /sbin, /usr/bin, /usr/lib, /lib, /boot or the loader preload file",
         "it changes the system the sandbox runs on",
         "Write your files under /mnt/user-data (workspace or outputs)."),
    Rule("recursive_permission_change_critical", _B,
         "chmod/chown/chgrp -R on /, the home directory or a system directory",
         "it breaks permissions system-wide",
         "Change permissions only on the files you created."),
    Rule("fetch_piped_to_interpreter", _B,
         "downloaded content piped into a shell or interpreter (`curl ... | sh`, "
         "`wget -O- ... | python`)",
         "it runs code from the network without anyone seeing it",
         "Download to a file, read it, and run it only if the task needs it."),
    Rule("decode_piped_to_interpreter", _B,
         "decoded content piped into a shell or interpreter (`base64 -d | sh`, `xxd -r | bash`)",
         "decoding right before execution hides what runs",
         "Run the decoded commands in plain text so they can be audited."),
    Rule("pipe_to_shell", _B,
         "any output piped into a shell that reads its script from stdin (`... | sh`, "
         "`| bash -s`)",
         "the script that runs is never visible as a command",
         "Run the commands directly, or write a script file and run `bash file.sh`."),
    Rule("substitution_in_command_position", _B,
         "a command substitution (`$(...)`, backticks, `<(...)`) that fetches, decodes, "
         "interprets or runs a computed command, used as the command itself, including "
         "after assignments, exec wrappers (env, command, builtin, exec, nohup, time, sudo, "
         "doas, ...) and expansions that may be empty (`$unset $(curl u)`)",
         "the shell executes whatever the substitution prints",
         "Capture the output into a variable or file, inspect it, and run explicit commands."),
    Rule("interpreter_runs_substitution", _B,
         "an interpreter whose script is a process substitution or a redirect from one "
         "(`bash <(curl ...)`, `sh < <(curl ...)`), a descriptor path open on one "
         "(`source /dev/fd/3 3< <(curl ...)`, `exec 3< <(curl ...); bash /dev/fd/3`, "
         "`source /dev/stdin < <(curl ...)`), or one as a file of code (`bash --rcfile`, "
         "`awk -f`, `sed -f`, `node --require`, `BASH_ENV=`)",
         "the interpreter runs the fetched content as its script",
         "Download to a file, read it, and run it only if the task needs it."),
    Rule("eval_source_substitution", _B,
         "a fetching, decoding or interpreting substitution anywhere in the arguments of "
         "eval or source/. (position-blind, including `. <(curl ...)`)",
         "eval and source execute what they receive wherever they appear",
         "Do not eval or source generated content; run explicit commands."),
    Rule("code_string_substitution", _B,
         "such a substitution (or a tainted variable) in a code-valued place, position-blind: "
         "after an interpreter's code-string flag: -c (shells, also after their other "
         "options and `--`, python, su), -e (perl, ruby, node), -p (perl, node), -r (php), "
         "-Command (PowerShell), e.g. `xargs sh -c \"$(curl ...)\"`; a code option or "
         "operand (`awk \"$(curl ...)\"`, `git -c core.pager=`, `ssh -o ProxyCommand=`, "
         "`flock -c`, `watch`, `env -S`, `tar --to-command=`, `vim -c`); a variable holding "
         "a command (`PAGER=\"$(curl ...)\"`)",
         "the interpreter executes the substituted text as code",
         "Put the code in the command itself, or in a file you can read first."),
    Rule("here_input_substitution", _B,
         "such a substitution in a here-string (`<<<`) or an unquoted heredoc feeding a "
         "shell or interpreter, or literal substitution text fed to one",
         "the interpreter reads the substituted text as code through stdin",
         "Put the code in the command itself, or in a file you can read first."),
    Rule("tainted_variable_executed", _B,
         "a variable assigned from a fetching/decoding substitution (or read from one) and "
         "later executed: `x=$(curl u); eval \"$x\"`, `$x` as a command, `sh -c \"$x\"`",
         "the two-step form runs fetched content just like the one-step form",
         "Save fetched content to a file, inspect it, and run explicit commands."),
    Rule("downloaded_file_executed", _B,
         "a file written from downloaded content (`curl -o F`, `curl -O URL`, `wget -O F`, "
         "`wget URL`, a fetcher's stdout redirected to F, `curl u | tee F`) and run later in "
         "the same command line: as the command (`./F`), as the script of a shell or "
         "interpreter (`bash F`, `python3 F`, `bash < F`), or by `source F`/`. F`; names "
         "compare as written, with `F` == `./F`",
         "a file written from downloaded content is run later in the same command, which "
         "runs fetched code unseen just like `curl u | sh`",
         "Download the file in one command, read it, and run it in a later, separate command "
         "only if the task needs it."),
    Rule("nesting_too_deep", _B,
         "substitutions, quotes or code strings nested deeper than the audit follows",
         "a command the audit cannot see through cannot be vouched for",
         "Split the command into simpler steps or write a script file."),
    Rule("command_too_complex", _B,
         "more commands, substitutions or words than the audit builds for one command "
         "(10,000 commands, substitutions and redirects; 50,000 words and quotes)",
         "a command line nobody can read is refused rather than half-audited",
         "Write the work to a script file in the workspace and run it in smaller steps."),
    Rule("audit_failed", _B,
         "a command the audit itself failed on",
         "the audit log must be complete, so what it cannot classify does not run",
         "Simplify the command or split it into steps."),
    # -- flagged, but allowed ---------------------------------------------------------
    Rule("dynamic_command_substitution", _W,
         "a substitution used as the command whose content does not fetch, decode or "
         "interpret (`$(which python) x.py`)",
         "the command that runs is computed, so the log cannot say what ran"),
    Rule("pipe_to_interpreter", _W,
         "local output piped into a non-shell interpreter reading code from stdin "
         "(`echo 'print(1)' | python3`)",
         "the code that runs is not visible as a command"),
    Rule("decode_piped", _W,
         "decoded content piped onward (`base64 -d | ...`) into something that is not an "
         "interpreter",
         "decoding in a pipeline is a common obfuscation step"),
    Rule("privilege_escalation", _W,
         "sudo, doas, su, pkexec, runuser",
         "the command asks for more privileges than the sandbox user has"),
    Rule("package_install", _W,
         "package installs: pip/uv/npm/yarn/pnpm/gem/cargo/go install, apt/yum/dnf/apk/"
         "brew/pacman install",
         "it pulls third-party code into the sandbox"),
    Rule("world_writable_permissions", _W,
         "chmod to a world-writable mode (777, 666, o+w, a+w)",
         "anyone on the host may then change the file"),
    Rule("loader_path_override", _W,
         "setting PATH, or LD_PRELOAD/LD_LIBRARY_PATH/LD_AUDIT to a system location",
         "it changes which programs and libraries every later command loads"),
    Rule("sensitive_file_access", _W,
         "/etc/sudoers, SSH keys, cloud or git credentials (and /etc/shadow or "
         "/proc/*/environ only named, as by `ls` or `echo`)",
         "these files hold credentials"),
    Rule("recursive_delete_broad", _W,
         "rm -r of `*`, `.`, `..` or `./*`",
         "it deletes everything in the current directory"),
    # -- deliberate passes ------------------------------------------------------------
    Rule("value_position_substitution", _P,
         "a fetching or interpreting substitution in value position: an assignment "
         "(`x=$(curl u)`), an argument (`echo $(curl u)`), a for word list, a heredoc "
         "body, a here-string to a non-interpreter",
         "it only captures output; nothing the substitution prints is executed"),
    Rule("no_match", _P, "no rule matched", "nothing risky was found"),
)

RULES_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULES}
RULE_RANK: dict[str, int] = {rule.name: index for index, rule in enumerate(RULES)}

RAW_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    # (rule, a literal the text must hold, pattern), matched against the whole command
    # text (quotes and all); the literal is looked for first (a fast substring search).
    # Each pattern is a fixed string with bounded classes between fixed tokens: linear.
    ("fork_bomb", "fork", re.compile(r"\bfork[ \t]*while[ \t]*fork\b")),
)

SOCKET_PATHS = ("/dev/tcp/", "/dev/udp/")
"""Bash's socket pseudo-files: a redirect to or from one opens a network connection (the
same text as a `grep` pattern or an argument opens nothing)."""

# -- vocabulary ------------------------------------------------------------------------

FETCHERS = frozenset({
    "curl", "wget", "fetch", "aria2c", "axel", "http", "https", "xh", "lwp-request", "GET",
    "nc", "ncat", "netcat", "socat", "telnet", "ftp", "tftp", "sftp", "ssh", "scp",
    "lynx", "links", "w3m",
})
"""Commands whose output is content from the network."""

DECODERS: dict[str, frozenset[str]] = {
    # name -> option letters/long options that make it decode (empty: always decodes)
    "base64": frozenset({"d", "D", "--decode"}),
    "base32": frozenset({"d", "--decode"}),
    "basenc": frozenset({"d", "--decode"}),
    "xxd": frozenset({"r", "--revert"}),
    "uudecode": frozenset(),
    "openssl": frozenset({"d", "-d", "--decode"}),
    "gpg": frozenset({"d", "--decrypt"}),
}
"""Commands whose output is decoded (possibly obfuscated) content."""



@dataclass(frozen=True)
class Downloader:
    """How a downloader names the file it writes (for `downloaded_file_executed`).

    Short options are letters (`"o"`), long ones full words (`"--output"`).
    `short_args` are the short options taking an argument, so that the rest of
    a cluster (`-dfoo`) is read as that argument and not as more options.
    """

    output_short: str = ""                       # `curl -o F`, `wget -O F`
    output_long: frozenset[str] = frozenset()    # `--output F`, `--output-document=F`
    short_args: frozenset[str] = frozenset()
    remote_short: str = ""                       # `curl -O URL`: the URL's file name
    remote_long: frozenset[str] = frozenset()
    names_from_url: bool = False                 # `wget URL` with no output option
    dir_short: str = ""                          # `wget -P DIR`
    dir_long: frozenset[str] = frozenset()       # `--directory-prefix`, `--output-dir`


def _d(output_short: str = "", output_long: str = "", short_args: str = "",
       remote_short: str = "", remote_long: str = "", names_from_url: bool = False,
       dir_short: str = "", dir_long: str = "") -> Downloader:
    return Downloader(output_short, frozenset(output_long.split()), frozenset(short_args),
                      remote_short, frozenset(remote_long.split()), names_from_url,
                      dir_short, frozenset(dir_long.split()))


DOWNLOADERS: dict[str, Downloader] = {
    "curl": _d("o", "--output", "AbcCdDeEFHKmoPQrtTuUwxXyYz", "O",
               "--remote-name --remote-name-all", dir_long="--output-dir"),
    "wget": _d("O", "--output-document", "eoaiBtOTwQPUlARDXIn", names_from_url=True,
               dir_short="P", dir_long="--directory-prefix"),
    "aria2c": _d("o", "--out", "odsxjiU", names_from_url=True, dir_short="d",
                 dir_long="--dir"),
    "axel": _d("o", "--output", "osnHU", names_from_url=True),
    "http": _d("o", "--output", "aoA"),
    "https": _d("o", "--output", "aoA"),
    "xh": _d("o", "--output", "aoA"),
}
"""Fetchers that write files (the others in `FETCHERS` taint only what their stdout writes)."""

NETWORK_TOOLS = frozenset({"nc", "ncat", "netcat", "socat", "telnet", "openssl", "cryptcat"})
"""Tools that connect a pipeline to a socket (for reverse-shell pipelines)."""

SHELLS = frozenset({
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "fish", "csh", "tcsh",
    "busybox-sh", "rbash",
})

EVAL_WORDS = frozenset({"eval", "source"})
"""Position-blind executors (`.` counts only where a command name can stand)."""


@dataclass(frozen=True)
class CodeFlags:
    """An interpreter family: its code-string flags and options taking an argument."""

    family: str
    short: frozenset[str]
    long: frozenset[str] = frozenset()
    takes_arg: frozenset[str] = frozenset()
    stop_opts: frozenset[str] = frozenset()  # options after which the rest is not code
    words: frozenset[str] = frozenset()      # whole-word code flags, any case (`-Command`)


CODE_FLAGS: dict[str, CodeFlags] = {
    "shell": CodeFlags("shell", frozenset("c"), frozenset({"--command"}),
                       frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})),
    "python": CodeFlags("python", frozenset("c"), frozenset(),
                        frozenset({"-W", "-X", "-Q"}), frozenset({"-m"})),
    "perl": CodeFlags("perl", frozenset("eEp"), frozenset(), frozenset({"-I", "-M", "-m"})),
    "ruby": CodeFlags("ruby", frozenset("e"), frozenset(), frozenset({"-I", "-r", "-C"})),
    "node": CodeFlags("node", frozenset("ep"), frozenset({"--eval", "--print"}),
                      frozenset({"-r", "--require", "--import"})),
    "php": CodeFlags("php", frozenset("r"), frozenset(), frozenset({"-c", "-d", "-f"})),
    "lua": CodeFlags("lua", frozenset("e"), frozenset(), frozenset({"-l"})),
    "su": CodeFlags("su", frozenset("c"), frozenset({"--command"}),
                    frozenset({"-s", "--shell", "-g", "--group", "-G"})),
    "powershell": CodeFlags(
        "powershell", frozenset(),
        takes_arg=frozenset({"-executionpolicy", "-ex", "-ep", "-workingdirectory", "-wd",
                             "-outputformat", "-of", "-inputformat", "-if", "-windowstyle",
                             "-w", "-configurationname", "-settingsfile"}),
        stop_opts=frozenset({"-file", "-f"}),
        # `-Command` and `-EncodedCommand` (base64 code) as PowerShell abbreviates them
        words=frozenset({*("-command"[:n] for n in range(2, 9)), "-e", "-ec",
                         *("-encodedcommand"[:n] for n in range(3, 16))})),
    "generic": CodeFlags("generic", frozenset("e"), frozenset({"--eval"})),
}

_FAMILY_PATTERN = re.compile(
    r"(?P<python>(?:python|pypy)[0-9.]*[dmu]?)|(?P<perl>perl[0-9.]*)"
    r"|(?P<ruby>(?:ruby|jruby)[0-9.]*)|(?P<node>(?:node|nodejs|deno|bun)[0-9.]*)"
    r"|(?P<php>php[0-9.]*(?:-cli)?)|(?P<lua>(?:lua|luajit)[0-9.]*)|(?P<su>su|runuser)"
    r"|(?P<powershell>(?:pwsh|powershell)(?:\.exe)?)|(?P<generic>Rscript|osascript|tclsh|wish|julia)"
)

SHELL_CALLS: dict[str, dict[str, str]] = {
    # family -> call name -> how its literal arguments reach a shell
    # (`interpreter_code.py`; a list literal argument is always an argv):
    #   "shell":  the first argument is a command line (`os.system("...")`)
    #   "system": one argument is a command line, several are an argv (Perl, Ruby)
    #   "spawn":  a program and a list of its arguments (`spawn("sh", ["-c", "..."])`),
    #             or a command line alone
    #   "execv":  a path, then the whole argv as a list (`os.execv(p, ["sh", "-c", ...])`)
    #   "execl":  a path, then the argv as further arguments
    "python": {
        "system": "shell", "popen": "shell", "run": "shell", "call": "shell",
        "check_call": "shell", "check_output": "shell", "Popen": "shell",
        "getoutput": "shell", "getstatusoutput": "shell", "create_subprocess_shell": "shell",
        "create_subprocess_exec": "system",
        "execv": "execv", "execve": "execv", "execvp": "execv", "execvpe": "execv",
        "execl": "execl", "execle": "execl", "execlp": "execl", "execlpe": "execl",
    },
    "node": {
        "exec": "shell", "execSync": "shell",
        "spawn": "spawn", "spawnSync": "spawn", "execFile": "spawn", "execFileSync": "spawn",
    },
    "perl": {"system": "system", "exec": "system"},
    "ruby": {
        "system": "system", "exec": "system", "spawn": "system", "popen": "system",
        "capture2": "system", "capture2e": "system", "capture3": "system",
        "popen2": "system", "popen2e": "system", "popen3": "system",
    },
    "php": {
        "system": "shell", "exec": "shell", "shell_exec": "shell", "passthru": "shell",
        "popen": "shell", "proc_open": "shell", "pcntl_exec": "spawn",
    },
    "lua": {"execute": "shell", "popen": "shell"},
}
"""Calls that hand their (literal) arguments to a shell or run them as a command, by
interpreter family. Command literals (backticks, `qx{}`, `%x()`, zx/Bun `` $`...` ``) are
recognized by the scanner itself."""


@functools.lru_cache(maxsize=4096)
def interpreter_family(name: str) -> str | None:
    """'shell', 'python', 'perl', ... for an interpreter's command name, else None."""
    if name in SHELLS:
        return "shell"
    if not name or len(name) > 24:
        return None
    match = _FAMILY_PATTERN.fullmatch(name)
    return match.lastgroup if match is not None else None


@dataclass(frozen=True)
class Wrapper:
    """A command that runs its operand as a command (so the operand is in command position)."""

    takes_arg: frozenset[str] = frozenset()
    positional: int = 0          # operands before the command (timeout's duration, ...)
    assignments: bool = False    # NAME=value operands are skipped (env, sudo)


def _w(takes_arg: str = "", positional: int = 0, assignments: bool = False) -> Wrapper:
    return Wrapper(frozenset(takes_arg.split()), positional, assignments)


WRAPPERS: dict[str, Wrapper] = {
    # exec wrappers: the command they run is still in command position
    "env": _w("-u --unset -C --chdir -S --split-string", assignments=True),
    "command": _w(),
    "builtin": _w(),
    "exec": _w("-a"),
    "nohup": _w(),
    "time": _w("-f --format -o --output"),
    "sudo": _w("-u --user -g --group -C --close-from -D --chdir -h --host -p --prompt "
               "-r --role -t --type -T --command-timeout -U --other-user", assignments=True),
    "doas": _w("-u -C"),
    # more of the same kind: each one only adds command positions
    "nice": _w("-n --adjustment"),
    "ionice": _w("-c --class -n --classdata -p --pid -P --pgid -u --uid"),
    "timeout": _w("-k --kill-after -s --signal", positional=1),
    "stdbuf": _w("-i --input -o --output -e --error"),
    "setsid": _w(),
    "chroot": _w("--userspec --groups", positional=1),
    "xargs": _w("-a --arg-file -d --delimiter -E -e --eof -I -i --replace -L -l "
                "--max-lines -n --max-args -P --max-procs -s --max-chars --process-slot-var"),
    "parallel": _w("-j --jobs -S --sshlogin --colsep -d --delimiter"),
    "busybox": _w(),
    "strace": _w("-e -o -p -s -u -E -b -P -I -a -X"),
    "ltrace": _w("-e -o -p -s -u -n -a"),
    "flock": _w("-w --timeout -E --conflict-exit-code", positional=1),
    "unbuffer": _w(),
    "chrt": _w(positional=1),
    "taskset": _w(positional=1),
    "caffeinate": _w("-t -w"),
    "nsenter": _w("-t --target -S --setuid -G --setgid"),
    "unshare": _w(),
    "firejail": _w(),
    "proxychains": _w("-f"),
    "proxychains4": _w("-f"),
    "torsocks": _w(),
    "catchsegv": _w(),
    "coproc": _w(),
}
"""Exec wrappers: the word after them (and their options) is still a command position."""

PRIVILEGE_COMMANDS = frozenset({"sudo", "doas", "su", "pkexec", "runuser"})

FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

SOURCE_STDIN = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})

# -- paths -----------------------------------------------------------------------------

SYSTEM_TOP_DIRS = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/opt", "/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/var", "/mnt", "/media",
    "/Users", "/System", "/Library", "/Applications", "/private",
    "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/local", "/usr/share", "/var/lib",
    "/mnt/user-data",
})
"""Deleting (or recursively re-permissioning) any of these is destroying the system."""

SYSTEM_WRITE_PREFIXES = (
    "/etc/", "/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/lib/", "/usr/lib64/",
    "/usr/libexec/", "/usr/local/bin/", "/usr/local/sbin/", "/lib/", "/lib64/", "/lib32/",
    "/boot/", "/var/spool/cron/", "/root/.ssh/",
)
"""Writing a file under these changes the host system."""

BLOCK_DEVICE = re.compile(
    r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme[0-9]|mmcblk[0-9]|r?disk[0-9]|md[0-9]|"
    r"dm-[0-9]|mapper/|loop[0-9]|sr[0-9]|nbd[0-9]|zram[0-9]|mtdblock[0-9]|mem\b|kmem\b|port\b)"
)
"""Block devices (and raw memory): writing to them bypasses every file system."""

DISK_TOOLS = frozenset({
    "mkfs", "mke2fs", "mkswap", "wipefs", "blkdiscard", "shred", "fdisk", "sfdisk", "cfdisk",
    "parted", "sgdisk", "gdisk", "mkdosfs", "mkntfs", "hdparm", "badblocks",
})

SENSITIVE_PATHS = (
    "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/.ssh/id_", ".ssh/id_",
    ".ssh/authorized_keys", ".aws/credentials", ".netrc", ".git-credentials",
    "/environ", ".kube/config", ".docker/config.json", ".gnupg/", ".pgpass",
)
"""Substrings of paths to credentials."""

CREDENTIAL_FILES = ("/etc/shadow", "/etc/gshadow")
"""Reading these (or `/proc/*/environ`) blocks; the rest of `SENSITIVE_PATHS` warns."""

NAMING_COMMANDS = frozenset({
    "ls", "stat", "echo", "printf", "test", "[", "[[", "file", "realpath", "readlink",
    "dirname", "basename", "which", "type", "du", "namei", "lsattr", "getfacl",
})
"""Commands that name a path without reading its content."""

PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "zgrep"})
"""Search tools whose first operand is a pattern, not a file (unless -e/-f gives it)."""

STARTUP_FILE_NAMES = frozenset({
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
    ".zprofile", ".zshenv", ".zlogin", ".zlogout", ".kshrc", ".mkshrc", ".cshrc", ".tcshrc",
    ".login", ".xprofile", ".xinitrc", ".xsession", ".inputrc", "authorized_keys",
    "authorized_keys2", "config.fish",
})
"""Files (by name, in any directory) that later shells or logins read and run."""

STARTUP_PREFIXES = (
    "/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/zsh/", "/etc/zshrc",
    "/etc/zprofile", "/etc/environment", "/etc/rc.local", "/etc/init.d/", "/etc/cron",
    "/etc/anacrontab", "/var/spool/cron/", "/etc/systemd/", "/etc/xdg/autostart/",
)
"""System locations whose content runs at start-up or on a schedule."""

STARTUP_DIRS = ("/.config/autostart/", "/.config/systemd/", "/.config/fish/conf.d/",
                "/.local/share/systemd/")
"""Per-user directories whose files run at log-in."""

LOADER_HIJACK_VARIABLES = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
                                     "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH"})
"""Loader variables: pointing one at a writable path makes every program load code from
there."""

READ_ONLY_LIBRARY_PREFIXES = ("/usr/", "/lib/", "/lib64/", "/lib32/", "/libx32/", "/opt/",
                              "/System/", "/Library/")
"""Library locations the sandbox user cannot write: the loader variables may name them."""

WRITE_TOOLS_LAST_OPERAND = frozenset({"cp", "mv", "install", "ln", "rsync"})
WRITE_TOOLS_ALL_OPERANDS = frozenset({"tee", "truncate", "touch"})

LOADER_VARIABLES = frozenset({"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
                              "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH"})

DECLARATION_COMMANDS = frozenset({"export", "declare", "typeset", "local", "readonly"})

PACKAGE_MANAGERS: dict[str, frozenset[str]] = {
    # manager -> subcommands that install
    "pip": frozenset({"install", "download"}),
    "pipx": frozenset({"install", "run", "inject"}),
    "uv": frozenset({"install", "add", "run", "tool"}),
    "npm": frozenset({"install", "i", "add", "ci", "exec"}),
    "npx": frozenset({"*"}),
    "pnpm": frozenset({"install", "i", "add", "dlx"}),
    "yarn": frozenset({"add", "install", "dlx"}),
    "bun": frozenset({"add", "install", "i", "x"}),
    "gem": frozenset({"install"}),
    "cargo": frozenset({"install"}),
    "go": frozenset({"install", "get"}),
    "apt": frozenset({"install"}),
    "apt-get": frozenset({"install"}),
    "aptitude": frozenset({"install"}),
    "yum": frozenset({"install", "localinstall"}),
    "dnf": frozenset({"install"}),
    "zypper": frozenset({"install", "in"}),
    "apk": frozenset({"add"}),
    "pacman": frozenset({"-S", "-U", "--sync", "--upgrade"}),
    "brew": frozenset({"install"}),
    "port": frozenset({"install"}),
    "snap": frozenset({"install"}),
    "conda": frozenset({"install", "create"}),
    "mamba": frozenset({"install", "create"}),
    "poetry": frozenset({"add", "install"}),
    "composer": frozenset({"require", "install"}),
    "dpkg": frozenset({"-i", "--install"}),
    "rpm": frozenset({"-i", "-U", "--install", "--upgrade"}),
}

POWER_COMMANDS = frozenset({"shutdown", "reboot", "halt", "poweroff"})
SYSTEMCTL_POWER = frozenset({"poweroff", "reboot", "halt", "kexec", "emergency", "rescue"})

REVERSE_SHELL_CODE_MARKERS = ("pty.spawn", "fsockopen", "TCPSocket", "socket.socket",
                              "new Socket", "IO::Socket", "use Socket", "net.Socket")
REVERSE_SHELL_SPAWN_MARKERS = ("dup2", "subprocess", "/bin/sh", "/bin/bash", "exec(",
                               "spawn(", "popen", "system(", "child_process", "exec ")


# -- code carried in options and operands ------------------------------------------------


@dataclass(frozen=True)
class CodeOptions:
    """Where a command carries code it runs in its options or operands.

    `options` maps an option's spelling to how its value runs:

    * ``"shell"``: a command line a shell runs (`flock -c CMD`, `tar -I CMD`);
    * ``"stdin"``: a command line that reads the command's data on stdin
      (`tar --to-command=CMD`: each member's content);
    * ``"exec="``: a value `exec=CMD` (`tar --checkpoint-action=exec=CMD`);
    * ``"split"``: a command line split into words, followed by the operands
      (`env -S 'CMD ARGS'`);
    * ``"keyed"``: a `KEY=VALUE` setting, looked up in `keys` (`ssh -o`, `git -c`);
    * ``"program"``: a program in `language` (`awk -e`, `sed -e`, `vim -c`).

    A long option takes its value attached (`--opt=V`) or as the next word, a short
    one attached (`-IV`) or next; `"+"` is vim's `+CMD`. `keys` maps a
    (lower-case, glob) key to ``"shell"``, or ``"bang"`` when only a value starting
    with `!` is a command line (`git -c alias.x='!sh'`). `program_operand`: the
    first operand is the program unless an option gave one (awk, sed). `joined`:
    the operands are one command line run by a shell (`watch`, `parallel`).
    `config`: the subcommand that stores a setting (`git config KEY VALUE`), whose
    value is looked up in `keys` too. `takes_arg` lists the other options with a
    value, so the operands are found.

    Every command line found is audited as nested shell code, like the code string
    of `sh -c`; a language's own commands are read by `embedded.py`.
    """

    options: dict[str, str]
    keys: dict[str, str] = dataclasses.field(default_factory=dict)
    language: str = ""
    program_operand: bool = False
    joined: bool = False
    config: str = ""
    takes_arg: frozenset[str] = frozenset()


def _c(options: str = "", keys: dict[str, str] | None = None, language: str = "",
       program_operand: bool = False, joined: bool = False, config: str = "",
       takes_arg: str = "") -> CodeOptions:
    parsed = {key: kind for key, _, kind in (item.partition(":") for item in options.split())}
    return CodeOptions(parsed, keys or {}, language, program_operand, joined, config,
                       frozenset(takes_arg.split()))


_AWK = _c("-e:program --source:program", language="awk", program_operand=True,
          takes_arg="-F -v -f -i -l -E --field-separator --assign --file --include --load "
                    "--exec")
_SED = _c("-e:program --expression:program", language="sed", program_operand=True,
          takes_arg="-f --file -l --line-length")
_VIM = _c("-c:program --cmd:program +:program", language="vim",
          takes_arg="-u -U -i -T -w -W -s -t -q -S --servername --remote-send")
_TAR = _c("--to-command:stdin --use-compress-program:shell -I:shell --info-script:shell "
          "-F:shell --new-volume-script:shell --rsh-command:shell --checkpoint-action:exec=",
          takes_arg="-f --file -C --directory -T --files-from -X --exclude-from -b "
                    "--blocking-factor -H --format -K --starting-file -N --newer -V --label")
_SSH = _c("-o:keyed", keys={"proxycommand": "shell", "localcommand": "shell",
                            "knownhostscommand": "shell"},
          takes_arg="-b -c -D -E -e -F -I -i -J -L -l -m -O -p -Q -R -S -W -w -B -P")
_GIT_KEYS = {
    "core.pager": "shell", "core.editor": "shell", "core.sshcommand": "shell",
    "core.fsmonitor": "shell", "core.askpass": "shell", "sequence.editor": "shell",
    "diff.external": "shell", "diff.*.command": "shell", "difftool.*.cmd": "shell",
    "mergetool.*.cmd": "shell", "merge.*.driver": "shell", "filter.*.clean": "shell",
    "filter.*.smudge": "shell", "filter.*.process": "shell", "pager.*": "shell",
    "gpg.program": "shell", "gpg.*.program": "shell", "uploadpack.packobjectshook": "shell",
    "credential.helper": "bang", "credential.*.helper": "bang", "alias.*": "bang",
}

CODE_OPTIONS: dict[str, CodeOptions] = {
    "awk": _AWK, "gawk": _AWK, "mawk": _AWK, "nawk": _AWK, "busybox-awk": _AWK,
    "sed": _SED, "gsed": _SED,
    "vim": _VIM, "vi": _VIM, "nvim": _VIM, "view": _VIM, "ex": _VIM, "gvim": _VIM,
    "vimdiff": _VIM, "rvim": _VIM,
    "tar": _TAR, "gtar": _TAR, "bsdtar": _TAR,
    "ssh": _SSH, "scp": _c("-o:keyed", keys=_SSH.keys, takes_arg="-c -F -i -J -l -P -S -D"),
    "sftp": _c("-o:keyed", keys=_SSH.keys, takes_arg="-B -b -c -D -F -i -J -l -P -R -S"),
    "rsync": _c("-e:shell --rsh:shell", takes_arg="--rsync-path -f --filter --exclude "
                "--include --exclude-from --include-from --files-from -T --temp-dir"),
    "git": _c("-c:keyed", keys=_GIT_KEYS, config="config",
              takes_arg="-C --git-dir --work-tree --namespace --exec-path --config-env"),
    "env": _c("-S:split --split-string:split", takes_arg="-u --unset -C --chdir"),
    "watch": _c(joined=True, takes_arg="-n --interval -q --equexit"),
    "parallel": _c(joined=True, takes_arg="-j --jobs -S --sshlogin --colsep -d --delimiter "
                   "-a --arg-file --results --joblog --tmpdir -I --delay --timeout"),
    "flock": _c("-c:shell --command:shell", takes_arg="-w --timeout -E --conflict-exit-code"),
    "script": _c("-c:shell --command:shell", takes_arg="-T -I -O -B -E -m"),
}
"""Commands whose options or operands carry code (see `CodeOptions`). `find -exec`,
`xargs`, `nice`, `timeout`, `stdbuf` and the other exec wrappers run an argv rather than
a command line: they are `WRAPPERS`, and the command they run stands in command
position."""

CODE_VARIABLES = frozenset({
    "PAGER", "MANPAGER", "GIT_PAGER", "EDITOR", "VISUAL", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR",
    "GIT_SSH_COMMAND", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS", "PROMPT_COMMAND",
    "LESSOPEN", "LESSCLOSE",
})
"""Environment variables whose value later programs run as a command line."""

CODE_FILE_VARIABLES = frozenset({"BASH_ENV", "ENV"})
"""Environment variables naming a file of code a shell runs first."""

_AWK_FILES = frozenset({"-f", "--file", "-i", "--include"})
CODE_FILE_OPTIONS: dict[str, frozenset[str]] = {
    # interpreter family or command name -> options whose value is a file of code it runs
    "shell": frozenset({"--rcfile", "--init-file"}),
    "node": frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader"}),
    "ruby": frozenset({"-r"}),
    "php": frozenset({"-f", "--file"}),
    "awk": _AWK_FILES, "gawk": _AWK_FILES, "mawk": _AWK_FILES, "nawk": _AWK_FILES,
    "busybox-awk": _AWK_FILES,
    "sed": frozenset({"-f", "--file"}), "gsed": frozenset({"-f", "--file"}),
}
"""A process substitution (or a downloaded file) as such a value is the script that runs."""

CANDIDATE_COMMANDS = ("rm", "dd", "chmod", "chown", "chgrp", "kill", "find", "mkfs",
                      "wipefs", "shred")
"""The commands a variable command name (`$X -rf /`) is judged as: those whose rules
depend on their arguments (a name alone, such as `reboot`, is not suspected of every
unknown command). A glob name (`/bin/r? -rf /`) is judged as every ruled command it
matches."""

RULED_COMMANDS = frozenset({
    *CANDIDATE_COMMANDS, "shutdown", "reboot", "halt", "poweroff", "init", "telinit",
    "systemctl", "pkill", "killall", "nc", "ncat", "netcat", "socat", "cp", "mv",
    "install", "ln", "rsync", "tee", "truncate", "sed", "curl", "wget", "sudo", "su",
    "bash", "sh", "zsh", "dash", "python", "python3", "perl", "ruby", "node",
})
"""Command names with rules of their own, which a glob command name may stand for."""

ARGUMENT_READERS: dict[str, tuple[str, ...]] = {
    "python": ("sys.argv",), "node": ("process.argv",), "perl": ("ARGV", "shift"),
    "ruby": ("ARGV",), "php": ("$argv",), "lua": ("arg[", "..."),
}
"""How interpreter code reads its command-line arguments (`python3 -c CODE ARG ...`)."""

CODE_RUNNERS = ("eval", "exec", "`")
"""Besides `SHELL_CALLS`, what in interpreter code runs a string as code or a command."""
