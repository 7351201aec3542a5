"""The `input_sanitization:` section of the operator config (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from antler.plugins._lib.tagguard import normalize_tag_name


class InputSanitizationConfig(BaseModel):
    """`input_sanitization:` - neutralize forged framework tags in the user's messages.

    The plugin is always on; this section only adds to what it covers.
    """

    model_config = ConfigDict(extra="forbid")

    extra_tags: list[str] = Field(
        default_factory=list,
        description="Tag names to reserve in addition to the built-in injection tags and the "
        "tags every plugin of the chain declares (`emits_tags`), e.g. ['company_policy'].",
    )

    @field_validator("extra_tags")
    @classmethod
    def _names_not_blank(cls, value: list[str]) -> list[str]:
        for name in value:
            if not normalize_tag_name(name):
                raise ValueError(f"tag name {name!r} is empty once case and separators are "
                                 "ignored; give a name with letters or digits")
        return value
