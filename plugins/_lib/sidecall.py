"""A plugin's side call to a chat model (a thread's title, memory's facts).

A side call sends one prompt and reads one reply. Made with `model.invoke`,
the call inherits the running graph's config: LangChain copies the node's
tags, metadata (a dozen keys) and callback manager into it and sets up a
callback run under the node's, about 40 us of a title call, which is what
lets a tracer show the call inside the run that made it.

When nothing could observe that run (no callback handler in the inherited
config or on the model, no LangSmith run current, tracing not enabled:
`could_trace`, which inside a quiet graph node answers with tracing's setting
as the node found it when it started, without asking LangSmith again),
`side_invoke` calls the model's `generate` with the call's own tags, metadata
and run name instead: what `invoke` does for a prompt, less the inheritance no
handler receives. The model's own work is the same (its
cache, rate limiter, retries, streaming choice and callbacks). A model whose
class changes `invoke` or `generate_prompt` is always called through `invoke`.
"""

from __future__ import annotations

import functools
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from antler.plugin_api import could_trace

__all__ = ["side_ainvoke", "side_invoke"]


def side_invoke(model: Any, prompt: str, config: RunnableConfig) -> Any:
    """`model.invoke(prompt, config=config)`: the reply (see the module docs)."""
    if _observed(model):
        return model.invoke(prompt, config=config)
    result = model.generate([[HumanMessage(content=prompt)]], tags=config.get("tags"),
                            metadata=config.get("metadata"), run_name=config.get("run_name"))
    return result.generations[0][0].message


async def side_ainvoke(model: Any, prompt: str, config: RunnableConfig) -> Any:
    """`await model.ainvoke(prompt, config=config)`: the reply (see the module docs)."""
    if _observed(model):
        return await model.ainvoke(prompt, config=config)
    result = await model.agenerate([[HumanMessage(content=prompt)]], tags=config.get("tags"),
                                   metadata=config.get("metadata"),
                                   run_name=config.get("run_name"))
    return result.generations[0][0].message


def _observed(model: Any) -> bool:
    """Whether the call must go through `invoke`: its class calls models its own way, or a
    callback handler or LangSmith could receive the call's run."""
    cls: Any = type(model)
    if not _plain_invoke(cls):
        return True
    callbacks: Any = model.callbacks
    # A callback manager, or a list of handlers: any handler observes. The inherited
    # config's handlers and LangSmith are `could_trace`'s.
    if callbacks is not None and getattr(callbacks, "handlers", callbacks):
        return True
    return could_trace()


@functools.cache
def _plain_invoke(cls: type) -> bool:
    """Whether chat model class `cls` invokes through LangChain's `generate` unchanged."""
    return issubclass(cls, BaseChatModel) and all(
        getattr(cls, name) is getattr(BaseChatModel, name)
        for name in ("invoke", "ainvoke", "generate_prompt", "agenerate_prompt"))
