"""Reducers whose writes in one superstep fold into fewer: one channel write instead of several.

A fused node runs many members' hooks and returns their updates applied in
sequence; a reducer key written by several members would reach LangGraph as
several writes to one channel (each a write LangGraph groups, applies, and, for
the pending writes of a saver, stores). A reducer declares with `folds_with`
how to fold such a sequence: ``fold(values)`` returns a list (usually of one
value) that the reducer, applied one by one from *any* current value, takes to
the same result as the original values. The compiler (`antler.compiler.steps`,
``Run.finish``) uses it where a node writes a key more than once; a reducer
without a fold keeps every write.

A fold must be exact: the channel's value after the superstep is the one the
unfolded writes give, whatever the value before. It may return the values
unchanged when it cannot fold them (one it does not recognise, say).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["FOLD_ATTRIBUTE", "fold_of", "folds_with"]

FOLD_ATTRIBUTE = "__antler_fold__"
"""Where `folds_with` keeps a reducer's fold."""

Reducer = TypeVar("Reducer", bound=Callable[..., Any])


def folds_with(fold: Callable[[list[Any]], list[Any]]) -> Callable[[Reducer], Reducer]:
    """Declare `fold` as the decorated reducer's fold (the reducer itself is unchanged)."""

    def declare(reducer: Reducer) -> Reducer:
        setattr(reducer, FOLD_ATTRIBUTE, fold)
        return reducer

    return declare


def fold_of(reducer: Any) -> Callable[[list[Any]], list[Any]] | None:
    """The fold `reducer` declares, or None."""
    fold = getattr(reducer, FOLD_ATTRIBUTE, None)
    return fold if callable(fold) else None
