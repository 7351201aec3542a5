"""A sandbox provider that runs commands directly on the host, inside the thread's workspace.

This is the fallback and development provider. It confines *file operations*
to the thread's ``user-data`` directory and keeps skills read-only for them,
but a shell command can do anything the host user can: read other threads'
files and the host's ``/etc``, write anywhere the user may, reach the network.
It is not an isolation boundary; the ``bwrap`` provider is.

Commands see virtual paths: ``/mnt/user-data/...`` and ``/mnt/skills/...`` in
the command string are rewritten to the host directories before running, and
host paths in the output are rewritten back, so the model never learns where
the files really live and its commands are the same under every provider.
"""

from __future__ import annotations

import os

from antler.plugin_api.paths import ThreadPaths

from .host import FALLBACK_PATH, HostSandbox, HostSandboxProvider, Launch

__all__ = ["LocalSandbox", "LocalSandboxProvider"]


class LocalSandbox(HostSandbox):
    """One thread's sandbox on the host. Created by :class:`LocalSandboxProvider`."""

    def _command_text(self, command: str) -> str:
        return self.mapper.hostify_text(command)

    def _launch(self, command: str) -> Launch:
        workspace = self.thread_paths.workspace
        return Launch([self._resolved_shell(), "-c", command], workspace, self._environment(
            os.environ.get("PATH") or FALLBACK_PATH, str(workspace)))


class LocalSandboxProvider(HostSandboxProvider):
    """Hands out one :class:`LocalSandbox` per thread (arguments: `HostSandboxProvider`)."""

    name = "local"

    def _new_sandbox(self, sandbox_id: str, thread_paths: ThreadPaths) -> LocalSandbox:
        return LocalSandbox(sandbox_id, thread_paths, default_timeout=self.default_timeout,
                            max_output_bytes=self.max_output_bytes, shell=self.shell)
