"""How many examples a scaled property test draws.

`make test` draws a quarter of a property's full count (the same first examples every
run: its settings are derandomized); the long checks (`make test-slow`, which CI runs too)
pass `--full-examples` and draw all of them. A scaled test carries the `fuzz` mark, which
is how the long checks select it.
"""

from __future__ import annotations

FULL = False
"""Set from `--full-examples` before any test module is imported (tests/conftest.py)."""


def examples(full: int) -> int:
    """`full` under `--full-examples`, else a quarter of it (at least ten)."""
    return full if FULL else max(10, full // 4)
