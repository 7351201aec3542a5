"""The MCP session owner: one live session per configured server for the agent's life.

`McpSessions` runs its own event loop on a daemon thread. Each enabled server
gets one task there that opens the transport (a stdio process or a
streamable-HTTP connection), initializes the session, lists the tools and
then holds the session open until `close`. The tools it hands out bridge to
that loop: the synchronous form waits for the call there, the asynchronous
form awaits it from any other loop, and both give up after the server's
``call_timeout``. So the synchronous `create_agent`/`invoke` and async use
both work, and a session's streams never cross event loops.

A server that cannot start (the command does not exist, it crashes, it does
not answer within ``start_timeout``) is one warning naming the server and the
reason, and its tools are absent; with ``required: true`` starting fails with
that message (`BuildError`). `close` (called by `AntlerAgent.close`, and at
interpreter exit for an owner nobody closed) ends every session, which stops
the stdio processes.

Importing this module imports the MCP SDK: it is loaded only when
``mcp_servers:`` names a server (install the ``mcp`` extra).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import re
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, TextIO

from langchain_core.tools import BaseTool, StructuredTool
from mcp import ClientSession

from antler.chain.config import McpServerSettings
from antler.errors import BuildError

__all__ = ["Connector", "McpSessions", "ServerStatus", "expand_env"]

logger = logging.getLogger("antler.mcp")

Connector = Callable[[], AbstractAsyncContextManager[ClientSession]]
"""Opens one initialized session (the in-memory transport in tests, for example)."""

CLOSE_TIMEOUT = 10.0
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class ServerStatus:
    """What `antler mcp list` shows about one server."""

    name: str
    transport: str
    state: str = "starting"
    """``starting``, ``ready``, ``failed``, ``disabled`` or ``closed``."""
    reason: str | None = None
    tools: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "transport": self.transport, "state": self.state,
                "reason": self.reason, "tools": list(self.tools)}


def expand_env(values: Mapping[str, str], where: str,
               environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`values` with each ``${VAR}`` replaced from `environ`; a missing VAR is a ValueError."""
    environ = os.environ if environ is None else environ
    expanded = {}
    for key, value in values.items():
        missing = [name for name in _VAR.findall(value) if name not in environ]
        if missing:
            raise ValueError(f"{where}.{key} uses ${{{missing[0]}}}, which is not set in the "
                             "environment; export it before starting Antler")
        expanded[key] = _VAR.sub(lambda m: environ[m.group(1)], value)
    return expanded


class McpSessions:
    """Owns the sessions of the configured MCP servers and the tools that call them."""

    def __init__(self, servers: Mapping[str, McpServerSettings], *,
                 connectors: Mapping[str, Connector] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.servers = dict(servers)
        self.connectors = dict(connectors or {})
        self.environ = environ
        self.status = {name: ServerStatus(name, "memory" if name in self.connectors
                                          else settings.transport)
                       for name, settings in self.servers.items()}
        self._tools: list[BaseTool] = []
        self._stops: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._errlogs = contextlib.ExitStack()  # the servers' stderr, for failure reasons
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- starting ---------------------------------------------------------------------

    def start(self, *, strict: bool = True) -> McpSessions:
        """Start every enabled server (concurrently, each bounded by its start_timeout).

        With `strict`, raises `BuildError` when a ``required`` server fails; the
        sessions that did start are closed first.
        """
        for name, settings in self.servers.items():
            if not settings.enabled:
                self.status[name].state = "disabled"
        wanted = [name for name, s in self.servers.items() if s.enabled]
        if not wanted:
            return self
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="antler-mcp-sessions")
        self._thread.start()
        atexit.register(self.close)
        asyncio.run_coroutine_threadsafe(self._start_all(wanted), self._loop).result()
        failed = [self.status[n] for n in wanted if self.status[n].state == "failed"]
        for status in failed:
            logger.warning("MCP server %r did not start: %s; its tools are not available",
                           status.name, status.reason)
        fatal = [s for s in failed if strict and self.servers[s.name].required]
        if fatal:
            self.close()
            raise BuildError("\n".join(
                f"MCP server {s.name!r} is required but did not start: {s.reason}. Fix it, "
                f"or set `mcp_servers.{s.name}.required: false` to run without its tools"
                for s in fatal))
        return self

    async def _start_all(self, names: list[str]) -> None:
        loaded = await asyncio.gather(*(self._start_one(name) for name in names))
        taken: dict[str, str] = {}
        for name, tools in zip(names, loaded, strict=True):
            for tool in tools:
                if tool.name in taken:
                    logger.warning(
                        "MCP server %r: tool %r is left out, server %r already has a tool of "
                        "that name; set `mcp_servers.%s.tool_name_prefix`", name, tool.name,
                        taken[tool.name], name)
                    continue
                taken[tool.name] = name
                self.status[name].tools.append(tool.name)
                self._tools.append(tool)

    async def _start_one(self, name: str) -> list[BaseTool]:
        settings = self.servers[name]
        status = self.status[name]
        ready: asyncio.Future[list[BaseTool]] = asyncio.get_running_loop().create_future()
        stop = self._stops[name] = asyncio.Event()
        errlog: TextIO | None = None
        try:
            if name in self.connectors:
                connector = self.connectors[name]
            else:
                errlog = self._errlogs.enter_context(
                    tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))  # noqa: SIM115 (closed with the sessions)
                connector = self._connector(name, settings, errlog)
        except ValueError as exc:
            status.state, status.reason = "failed", str(exc)
            return []
        task = self._tasks[name] = asyncio.create_task(self._serve(name, connector, ready, stop))
        try:
            tools = await asyncio.wait_for(asyncio.shield(ready), settings.start_timeout)
        except TimeoutError:
            # Nobody waits for this session any more: its end is not news.
            ready.cancel()
            stop.set()
            task.cancel()
            status.state = "failed"
            status.reason = (f"it did not start and list its tools within "
                             f"{settings.start_timeout:g} s (mcp_servers.{name}.start_timeout)")
            return []
        except Exception as exc:
            status.state, status.reason = "failed", _reason(exc, settings, errlog)
            return []
        status.state = "ready"
        return [self._bridge(name, settings, tool) for tool in tools]

    async def _serve(self, name: str, connector: Connector,
                     ready: asyncio.Future[list[BaseTool]], stop: asyncio.Event) -> None:
        from langchain_mcp_adapters.tools import load_mcp_tools

        try:
            async with connector() as session:
                tools = await load_mcp_tools(session, server_name=name)
                if not ready.done():
                    ready.set_result(tools)
                await stop.wait()
        except BaseException as exc:  # the session ended: report it to whoever waits
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception)
                                    else RuntimeError(f"the session was {type(exc).__name__}"))
            elif not stop.is_set():
                self.status[name].state = "failed"
                self.status[name].reason = f"the session ended: {_leaf(exc)}"
                logger.warning("MCP server %r stopped: %s; its tools now fail", name, _leaf(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    def _connector(self, name: str, settings: McpServerSettings, errlog: TextIO) -> Connector:
        where = f"mcp_servers.{name}"
        if settings.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=settings.command, args=list(settings.args), cwd=settings.cwd,
                env=expand_env(settings.env, f"{where}.env", self.environ) or None)

            @contextlib.asynccontextmanager
            async def stdio() -> AsyncIterator[ClientSession]:
                async with stdio_client(params, errlog=errlog) as (read, write), \
                        ClientSession(read, write) as session:
                    await session.initialize()
                    yield session

            return stdio
        import httpx
        from mcp.client.streamable_http import streamable_http_client

        url, headers = str(settings.url), expand_env(settings.headers, f"{where}.headers",
                                                     self.environ)
        timeout = httpx.Timeout(settings.start_timeout, read=max(300.0, settings.call_timeout))

        @contextlib.asynccontextmanager
        async def http() -> AsyncIterator[ClientSession]:
            async with httpx.AsyncClient(headers=headers, timeout=timeout) as client, \
                    streamable_http_client(url, http_client=client) as (read, write, _), \
                    ClientSession(read, write) as session:
                await session.initialize()
                yield session

        return http

    # -- the tools --------------------------------------------------------------------

    @property
    def tools(self) -> list[BaseTool]:
        """The tools of every server that started, named as configured."""
        return list(self._tools)

    def _bridge(self, server: str, settings: McpServerSettings, tool: BaseTool) -> BaseTool:
        """`tool` callable from any thread or loop; its session stays on the owner's loop."""
        original = getattr(tool, "coroutine", None)
        if original is None:
            raise TypeError(f"MCP server {server!r}: tool {tool.name!r} has no coroutine")
        name = f"{settings.tool_name_prefix or ''}{tool.name}"
        timeout = settings.call_timeout

        def submit(kwargs: dict[str, Any]) -> Any:
            loop = self._loop
            if self._closed or loop is None or loop.is_closed():
                raise RuntimeError(f"MCP server {server!r} is closed; tool {name!r} cannot run")
            return asyncio.run_coroutine_threadsafe(self._call(server, name, original, kwargs,
                                                               timeout), loop)

        def run(**kwargs: Any) -> Any:
            return submit(kwargs).result()

        async def arun(**kwargs: Any) -> Any:
            return await asyncio.wrap_future(submit(kwargs))

        metadata = {**(tool.metadata or {}),
                    "antler": {"mcp_server": server,
                               "mcp_routing": settings.routing_for(tool.name).model_dump()}}
        return StructuredTool(
            name=name, description=tool.description, args_schema=tool.args_schema,
            func=run, coroutine=arun, response_format=tool.response_format,
            metadata=metadata, handle_tool_error=tool.handle_tool_error)

    @staticmethod
    async def _call(server: str, name: str, original: Callable[..., Any],
                    kwargs: dict[str, Any], timeout: float) -> Any:
        try:
            return await asyncio.wait_for(original(**kwargs), timeout)
        except TimeoutError:
            raise TimeoutError(f"MCP server {server!r}: tool {name!r} timed out after "
                               f"{timeout:g} s (mcp_servers.{server}.call_timeout)") from None

    # -- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """End every session and stop the loop; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        loop, thread = self._loop, self._thread
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop_all(), loop).result(CLOSE_TIMEOUT)
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(CLOSE_TIMEOUT)
            if thread is None or not thread.is_alive():
                loop.close()
        for status in self.status.values():
            if status.state == "ready":
                status.state = "closed"
        self._errlogs.close()

    async def _stop_all(self) -> None:
        for stop in self._stops.values():
            stop.set()
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def __enter__(self) -> McpSessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException, settings: McpServerSettings, errlog: TextIO | None) -> str:
    """Why a server did not start, in words, with the last line it wrote to stderr."""
    leaf = _leaf(exc)
    if isinstance(leaf, FileNotFoundError) and settings.command is not None:
        text = (f"command {settings.command!r} was not found; check `command:` (and `cwd:`) "
                "or install the server")
    elif isinstance(leaf, PermissionError) and settings.command is not None:
        text = f"command {settings.command!r} cannot be executed ({leaf.strerror})"
    else:
        detail = str(leaf).strip() or type(leaf).__name__
        text = f"{type(leaf).__name__}: {detail}" if str(leaf).strip() else detail
        if settings.command is not None:
            text += " (the server exited or closed its output before it was ready)"
        else:
            text += f" (connecting to {settings.url})"
    last = _last_line(errlog)
    return f"{text}; its stderr ends with: {last}" if last else text


def _last_line(errlog: TextIO | None) -> str | None:
    if errlog is None:
        return None
    with contextlib.suppress(Exception):
        errlog.flush()
        errlog.seek(0)
        lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
        errlog.seek(0, os.SEEK_END)
        return lines[-1][:300] if lines else None
    return None
