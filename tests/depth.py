"""How many examples a scaled property test draws.

`make test` draws a quarter of a property's full count; the long checks (`make test-slow`,
which CI runs too) pass `--full-examples` and draw all of them. A scaled test carries the
`fuzz` mark, which is how the long checks select it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import settings

FULL = False
"""Set from `--full-examples` before any test module is imported (tests/conftest.py)."""

Test = TypeVar("Test", bound=Callable[..., Any])


def examples(full: int) -> int:
    """`full` under `--full-examples`, else a quarter of it (at least ten)."""
    return full if FULL else max(10, full // 4)


def scaled(full: int, parent: settings | None = None, **options: Any) -> Callable[[Test], Test]:
    """Hypothesis settings of `examples(full)` examples (`parent` and `options` as `settings`
    takes them), with the `fuzz` mark."""
    chosen = settings(parent, max_examples=examples(full), **options)

    def decorate(test: Test) -> Test:
        return pytest.mark.fuzz(chosen(test))

    return decorate
