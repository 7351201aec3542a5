"""Sandboxes: where a thread's tools run commands and read or write files.

The interface lives in :mod:`antler.plugin_api.sandbox` (on the plugin SDK,
`antler.plugin_api`). The built-in
providers share :mod:`~antler.runtime.sandbox.host` (files on the host,
commands as child processes): :mod:`~antler.runtime.sandbox.bwrap` runs each
command in bubblewrap namespaces, :mod:`~antler.runtime.sandbox.local` on the
host. :mod:`~antler.runtime.sandbox.search` is ``glob`` and ``grep`` over the
thread's files. :mod:`~antler.runtime.sandbox.choice` picks one from the config
(``auto``); providers are loaded by name with
:func:`antler.plugin_api.sandbox.load_sandbox_provider`. The interface's names
imported from here still work until antler 0.2, with a `DeprecationWarning`.
"""

from antler.deprecation import moved_names

__getattr__ = moved_names("antler.runtime.sandbox", "antler.plugin_api.sandbox", [
    "SANDBOX_PROVIDER_GROUP", "CommandInterrupted", "CommandResult", "GlobResult",
    "GrepResult", "Sandbox", "SandboxClosedError", "SandboxError", "SandboxNotFoundError",
    "SandboxProvider", "SandboxProviderLoadError", "SearchPatternError",
    "UnknownSandboxProviderError", "available_sandbox_providers", "load_sandbox_provider",
])
