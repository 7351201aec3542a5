"""A model request with other messages, made without `ModelRequest.override`'s field walk.

`ModelRequest.override(messages=...)` goes through `dataclasses.replace`, which
reads every field, checks each for a dataclass and calls the constructor again:
about 9 us per call, on every model call of every wrapper that rewrites the
request's messages. `with_messages` gives the same request (a new object, the
original untouched, every other attribute the same objects) by copying the
instance's attributes and setting ``messages``: about 1 us.

Only a plain `ModelRequest` is copied this way; a subclass (which may keep
more than its fields, or check them in its constructor) goes through
``override`` as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware.types import ModelRequest

__all__ = ["with_messages"]


def with_messages(request: ModelRequest[Any], messages: Sequence[Any]) -> ModelRequest[Any]:
    """``request.override(messages=list(messages))``, made by copying the request's attributes."""
    if type(request) is not ModelRequest:
        return request.override(messages=list(messages))
    copy = object.__new__(ModelRequest)
    attributes = copy.__dict__
    attributes.update(request.__dict__)
    attributes["messages"] = messages if isinstance(messages, list) else list(messages)
    return copy
