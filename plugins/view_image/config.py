"""The `view_image:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_MAX_IMAGE_BYTES", "ViewImageConfig"]

DEFAULT_MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""5 MiB: the smallest per-image limit among the common vision providers."""


class ViewImageConfig(BaseModel):
    """`view_image:` - show images to vision models through the `view_image` tool."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None, description="Offer view_image (on by default whenever the model supports vision).")
    max_image_bytes: int = Field(
        DEFAULT_MAX_IMAGE_BYTES, ge=1, le=64 * 1024 * 1024, strict=True,
        description="Largest image file view_image reads, in bytes; larger files are refused "
        "with an error the model sees. The base64 payload is a third larger.",
    )
