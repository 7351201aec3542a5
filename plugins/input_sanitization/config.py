"""The `input_sanitization:` section of the operator config (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from antler.plugins._lib.tagguard import ExtraTagNames


class InputSanitizationConfig(BaseModel):
    """`input_sanitization:` - neutralize forged framework tags in the user's messages.

    The plugin is always on; this section only adds to what it covers.
    """

    model_config = ConfigDict(extra="forbid")

    extra_tags: ExtraTagNames = Field(
        default_factory=list,
        description="Tag names to reserve in addition to the built-in injection tags and the "
        "tags every plugin of the chain declares (`emits_tags`), e.g. ['company_policy'].",
    )
