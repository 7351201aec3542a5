"""The `sandbox:` section of the operator config (pydantic only; imported to validate)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SandboxLimits(BaseModel):
    """`sandbox: {limits: ...}` - per-process resource limits of bwrap commands."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(default=8192, ge=64, description="Address space per process (MB).")
    processes: int = Field(default=1024, ge=8, description="Processes of the sandbox user.")
    cpu_seconds: int | None = Field(
        default=None, ge=1, description="CPU seconds per process (default: the command timeout).")
    file_size_mb: int = Field(default=1024, ge=1, description="Largest file a command writes (MB).")


class SandboxConfig(BaseModel):
    """`sandbox:` - which sandbox provider runs the thread's tools, and its limits."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(
        default="auto",
        description="Name of the sandbox provider, as registered in the "
        "`antler.sandbox_providers` entry point group, or 'auto': 'bwrap' when bubblewrap is "
        "usable here, else 'local' with a warning. 'bwrap' runs each command in fresh "
        "namespaces holding only the thread's files; 'local' runs commands on the host "
        "(its file tools are confined, its commands are not).",
    )
    require_isolation: bool = Field(
        default=False,
        description="Refuse to run unless commands are isolated: an error instead of the "
        "fallback to 'local' (and with provider 'local').",
    )
    network: bool = Field(
        default=False,
        description="Let bwrap sandboxes reach the network (the local provider always can).",
    )
    limits: SandboxLimits = Field(
        default_factory=SandboxLimits,
        description="Resource limits of each command's processes under bwrap (hard rlimits).",
    )
    command_timeout: float = Field(
        default=60.0, gt=0, le=3600,
        description="Seconds a bash command may run before it is killed.",
    )
    max_output_bytes: int = Field(
        default=64 * 1024, ge=1024, le=16 * 1024 * 1024,
        description="Largest output a tool returns to the model (per file read for read_file; "
        "for bash when no tool-output budget saves long output); the rest is cut with a note.",
    )
    command_capture_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
        description="How much of each output stream of a bash command the sandbox keeps; the "
        "rest is drained and reported as cut. The tool-output budget saves what is kept in "
        "full, so this is the size of the longest complete output it can save.",
    )
    lazy: bool = Field(
        default=True,
        description="Acquire the sandbox on the first tool call of a thread (true) or at the "
        "start of every run (false).",
    )
    provider_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra keyword arguments for the provider's constructor.",
    )

    @field_validator("provider")
    @classmethod
    def _provider_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; name a sandbox provider such as 'auto', 'bwrap' or "
                             "'local'")
        return value.strip()
