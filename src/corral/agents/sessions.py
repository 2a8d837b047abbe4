"""MCP client sessions of an agent worker, made with the official MCP Python SDK and reused across requests.

A stdio server is a subprocess of this worker (started at first use, kept while it lives); a remote
server is reached over streamable HTTP, or SSE when its URL path ends in `/sse`. Each session lives in
a task of its own, because the SDK's transports are anyio context managers that must be entered and
left in one task. A session whose server died (or whose connection broke) is dropped and started
afresh at the next use; a call that fails that way is retried once on the new session.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from corral.models.mcp import RemoteServer, StdioServer

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
START_TIMEOUT_KNOB = "--mcp-start-timeout / CORRAL_MCP_START_TIMEOUT"
CLOSE_TIMEOUT_S = 10.0
MAX_SESSIONS = 64

Server = StdioServer | RemoteServer


class ToolTimeout(Exception):
    """A tool did not answer within its deadline."""


class SessionUnavailable(Exception):
    """An MCP server could not be started or reached; the message names it and why."""


def server_key(server: Server) -> str:
    """Sessions are shared by every model naming the same server with the same settings."""
    digest = hashlib.sha256(json.dumps(server.wire(), sort_keys=True).encode()).hexdigest()[:16]
    return f"{type(server).__name__}:{server.name}:{digest}"


def server_type(server: Server) -> str:
    return "stdio" if isinstance(server, StdioServer) else "remote"


@contextlib.asynccontextmanager
async def _transport(server: Server) -> AsyncIterator[tuple[Any, Any]]:
    if isinstance(server, StdioServer):
        params = StdioServerParameters(command=server.command, args=list(server.args), env=dict(server.env))
        async with stdio_client(params, errlog=sys.stderr) as streams:
            yield streams
        return
    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    if server.url.rstrip("/").endswith("/sse"):
        async with sse_client(server.url, headers=headers) as streams:
            yield streams
        return
    async with (
        httpx2.AsyncClient(headers=headers) as client,
        streamable_http_client(server.url, http_client=client) as streams,
    ):
        yield streams


class LiveSession:
    """One initialised ClientSession held open by its own task until closed or broken."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.session: ClientSession | None = None
        self.tools: list[Any] = []
        self._ready = asyncio.Event()
        self._close = asyncio.Event()
        self._error: BaseException | None = None
        self._task = asyncio.create_task(self._hold(), name=f"mcp-session-{server.name}")

    @property
    def alive(self) -> bool:
        return not self._task.done() and self._error is None

    async def _hold(self) -> None:
        try:
            async with _transport(self.server) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self.tools = list((await session.list_tools()).tools)
                self.session = session
                self._ready.set()
                await self._close.wait()
        except BaseException as exc:
            self._error = exc if not isinstance(exc, asyncio.CancelledError) else SessionUnavailable("closed")
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.session = None
            self._ready.set()

    async def start(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            await self.close()
            raise SessionUnavailable(
                f"MCP server {self.server.name!r} did not initialise within {timeout_s:g}s; "
                f"raise {START_TIMEOUT_KNOB} if it starts slowly"
            ) from None
        if self.session is None:
            raise SessionUnavailable(
                f"MCP server {self.server.name!r} could not be started: {_describe(self._error)}"
            )

    async def close(self) -> None:
        self._close.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_TIMEOUT_S)
        except (TimeoutError, Exception):
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "the session ended"
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class SessionPool:
    """Live sessions by server key; one start at a time per server."""

    def __init__(self, start_timeout_s: float = START_TIMEOUT_S, max_sessions: int = MAX_SESSIONS) -> None:
        self.start_timeout_s = start_timeout_s
        self.max_sessions = max_sessions
        self._live: dict[str, LiveSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, server: Server) -> LiveSession:
        key = server_key(server)
        async with self._locks.setdefault(key, asyncio.Lock()):
            live = self._live.get(key)
            if live is not None and live.alive:
                self._live[key] = self._live.pop(key)  # most recently used last
                return live
            if live is not None:
                log.warning(
                    "MCP server %s session ended (%s); starting it again", server.name, _describe(live._error)
                )
                await live.close()
            live = LiveSession(server)
            self._live[key] = live
            try:
                await live.start(self.start_timeout_s)
            except SessionUnavailable:
                self._live.pop(key, None)
                raise
            await self._evict_beyond_cap()
            return live

    async def _evict_beyond_cap(self) -> None:
        """At most `max_sessions` servers run at once: a stream of distinct configs cannot pile up processes."""
        while len(self._live) > self.max_sessions:
            key = next(iter(self._live))  # least recently used first
            old = self._live.pop(key)
            self._locks.pop(key, None)
            log.info(
                "closing MCP server %s: more than %d sessions are open", old.server.name, self.max_sessions
            )
            await old.close()

    async def drop(self, server: Server) -> None:
        live = self._live.pop(server_key(server), None)
        if live is not None:
            await live.close()

    async def close_all(self) -> None:
        lives, self._live = list(self._live.values()), {}
        await asyncio.gather(*(live.close() for live in lives), return_exceptions=True)

    async def call_tool(
        self, server: Server, tool: str, arguments: dict[str, Any], timeout_s: float, knob: str
    ) -> tuple[str, bool]:
        """(text, is_error) of one tool call. A session whose server died (connection closed, broken
        transport) is dropped and started again, and the call retried once on the new one."""
        for attempt in (1, 2):
            live = await self.get(server)
            session = live.session
            try:
                if session is None:
                    raise MCPError(CONNECTION_CLOSED, "session ended")
                result = await asyncio.wait_for(
                    session.call_tool(tool, arguments, read_timeout_seconds=timeout_s), timeout_s + 1.0
                )
            except (TimeoutError, MCPError) as exc:
                if isinstance(exc, TimeoutError) or exc.code == REQUEST_TIMEOUT:
                    raise ToolTimeout(
                        f"MCP tool {tool!r} on server {server.name!r} did not answer within "
                        f"{timeout_s:g}s; raise {knob} if it needs longer"
                    ) from None
                if exc.code != CONNECTION_CLOSED:
                    raise
                why = _describe(exc)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                why = _describe(exc)
            else:
                return _result_text(result), bool(getattr(result, "is_error", False))
            log.warning(
                "MCP server %s is gone (%s) during %s (attempt %d); starting it again",
                server.name,
                why,
                tool,
                attempt,
            )
            await self.drop(server)
        raise SessionUnavailable(
            f"MCP server {server.name!r} died twice during tool {tool!r}; check its command"
        )


def _result_text(result: Any) -> str:
    parts = []
    for item in getattr(result, "content", None) or []:
        text = getattr(item, "text", None)
        parts.append(text if text is not None else json.dumps(item.model_dump(mode="json")))
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)
