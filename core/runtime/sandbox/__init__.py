"""Sandboxes: where a thread's tools run commands and read or write files.

The interface lives in :mod:`antler.sandbox.provider`; the host-backed
development provider in :mod:`antler.sandbox.local`. Providers are loaded by
name with :func:`load_sandbox_provider`.
"""

from .provider import (
    SANDBOX_PROVIDER_GROUP,
    CommandInterrupted,
    CommandResult,
    Sandbox,
    SandboxClosedError,
    SandboxError,
    SandboxNotFoundError,
    SandboxProvider,
    SandboxProviderLoadError,
    UnknownSandboxProviderError,
    available_sandbox_providers,
    load_sandbox_provider,
)

__all__ = [
    "SANDBOX_PROVIDER_GROUP",
    "CommandInterrupted",
    "CommandResult",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxNotFoundError",
    "SandboxProvider",
    "SandboxProviderLoadError",
    "UnknownSandboxProviderError",
    "available_sandbox_providers",
    "load_sandbox_provider",
]
