"""Chat models as a plugin sees them: a config field naming one, and turning it into one.

A plugin's config names a model with a `ModelSpec` field (a `models.named`
entry, an `init_chat_model` spec such as 'openai:gpt-4o-mini', or
'scripted:FILE'); its factory turns that reference into a chat model with
`resolve_model`, which asks the build's model catalog (the `model_catalog`
service). A plugin that falls back to the agent's own model for a side call
(a title, a memory update) takes it through `side_call_model`, so a scripted
model answers side calls from its side script and never spends the agent's turns.

Nothing here imports LangChain: the catalog, which builds models, is the runtime's.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from antler.errors import BuildError

from .context import MODEL_CATALOG, Services

__all__ = ["ModelSpec", "resolve_model", "side_call_model"]


def _model_spec_text(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.strip():
        raise ValueError("is empty; leave it out to use the default model")
    return value.strip()


ModelSpec = Annotated[str | None, AfterValidator(_model_spec_text)]
"""A config field naming a chat model (`init_chat_model` string or 'scripted:FILE');
blank is refused, None means "the default model". For plugin config models."""


def resolve_model(services: Services | Any, reference: Any) -> Any:
    """The chat model `reference` stands for: a model object is itself; a name or spec is
    resolved by the build's model catalog (`services` may be `Services` or its dict).

    Raises:
        BuildError: `reference` is not a model and the build has no model catalog.
    """
    if hasattr(reference, "invoke") and not isinstance(reference, str):
        return reference
    if not isinstance(services, Services):
        services = Services(services)  # the same dict: a default catalog is kept in it
    catalog = services.find(MODEL_CATALOG)
    if catalog is None:
        raise BuildError(
            f"model {reference!r} cannot be resolved: this build has no {MODEL_CATALOG!r} "
            "service. Build through antler's create_agent or antler.testing (both provide "
            "it), or pass services={'model_catalog': ...} or a chat model object")
    return catalog.resolve(reference)


def side_call_model(model: Any, purpose: str) -> Any:
    """The model a plugin should use for a side call (`purpose`: 'title', 'memory') when
    it falls back to the agent's own model: the same model, except that a scripted model
    answers side calls from its own side script, so they never spend the agent's turns."""
    side = getattr(model, "side_model", None)
    return side(purpose) if callable(side) else model
