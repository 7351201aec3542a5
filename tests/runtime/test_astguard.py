"""`antler.runtime.astguard`: parsing from many threads never fails on CPython 3.11."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from antler.runtime import astguard

# Four threads parse while finalizers run mid-conversion (a small GC threshold and a
# tiny switch interval make the interleaving likely); it prints how many parses failed.
_RACE = textwrap.dedent("""
    import ast, gc, sys, threading
    if sys.argv[1] == "guarded":
        from antler.runtime import astguard
        astguard.install()
    gc.set_threshold(50, 5, 5)
    sys.setswitchinterval(1e-6)
    SOURCE = "def f(a, b):\\n    return [i for i in range(a) if i % b]\\n" * 30
    failures = []
    class Finalized:
        def __del__(self):
            sum(range(200))
    def parse_many():
        for _ in range(int(sys.argv[2])):
            junk = []
            for _ in range(30):
                item = Finalized(); item.me = item; junk.append(item)
            del junk
            try:
                ast.parse(SOURCE)
            except SystemError:
                failures.append(1)
                return
    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for thread in threads: thread.start()
    for thread in threads: thread.join()
    print(len(failures))
""")


def _failed_parses(mode: str, rounds: int) -> int:
    done = subprocess.run([sys.executable, "-c", _RACE, mode, str(rounds)], capture_output=True,
                          text=True, timeout=240, check=True)
    return int(done.stdout.strip())


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="only CPython 3.11 needs the guard")
def test_parallel_parses_do_not_fail_once_guarded() -> None:
    assert _failed_parses("guarded", 150) == 0


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info >= (3, 12), reason="only CPython 3.11 has the race")
def test_the_race_is_real_without_the_guard() -> None:
    """The guard is needed: unguarded, the same threads do fail (the interpreter's bug)."""
    assert _failed_parses("plain", 400) > 0


def test_install_is_idempotent_and_keeps_parse_working() -> None:
    astguard.install()
    first = ast.parse
    astguard.install()
    assert ast.parse is first
    assert astguard.installed() == (sys.version_info < (3, 12))
    assert isinstance(ast.parse("x = 1"), ast.Module)
    with pytest.raises(SyntaxError):
        ast.parse("x = (")


def test_create_agent_installs_it() -> None:
    from antler.agent import create_agent

    create_agent()
    assert astguard.installed() == (sys.version_info < (3, 12))
