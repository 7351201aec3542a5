"""The LangGraph Server paths the served app's middlewares act on."""

from __future__ import annotations

import re

RUN_PATH = re.compile(r"^/(?:threads/([^/]+)/)?runs(/stream|/wait|/batch|/crons)?/?$")
CRON_PATH = re.compile(r"^/runs/crons/[^/]+/?$")
"""``PATCH`` there replaces a cron's run payload, input included."""
STATE_PATH = re.compile(r"^/threads/[^/]+/state/?$")
MCP_PATH = re.compile(r"^/mcp/?$")
A2A_PATH = re.compile(r"^/a2a/[^/]+/?$")
COMMANDS_PATH = re.compile(r"^/threads/([^/]+)/commands/?$")
EVENTS_PATH = re.compile(r"^/threads/([^/]+)/stream/events/?$")
"""As a WebSocket: protocol commands (``run.start``, ``input.respond``), one a message."""
COPY_PATH = re.compile(r"^/threads/([^/]+)/copy/?$")
THREADS_PATH = re.compile(r"^/threads/?$")
THREAD_PATH = re.compile(r"^/threads/([^/]+)/?$")
PRUNE_PATH = re.compile(r"^/threads/prune/?$")
THREAD_ID = re.compile(r"^[0-9a-fA-F-]{1,64}$")
"""What a sub-request may put in a path: the server's thread and run ids are UUIDs."""
