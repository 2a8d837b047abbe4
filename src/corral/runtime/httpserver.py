"""Run an ASGI app on uvicorn inside an existing event loop, without uvicorn's signal handling.

The owning process handles SIGINT/SIGTERM itself and shuts its parts down in order. Before it
listens, in a worker thread, uvicorn loads its config (protocol modules, imported lazily) and one
request for a path no route has goes through the app: FastAPI
builds its per-route state (pydantic adapters for every route) lazily on the first match, which
took the first request's event loop 150-450 ms of CPU on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

from corral.runtime.httpguard import ConnectionLimits, guarded


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class EmbeddedHTTPServer:
    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        name: str,
        reuse_port: bool = False,
        limits: ConnectionLimits | None = None,
    ) -> None:
        """`reuse_port`: share the port with other processes (SO_REUSEPORT; the kernel spreads connections).
        `limits`: deadlines to receive a request and the connection cap (httpguard.py)."""
        self.host, self.port, self.name, self.reuse_port = host, port, name, reuse_port
        # httptools (C parser, with our deadlines and cap) named, not left to "auto"; the loop is the caller's
        # (uvloop: cli._run_fast); no access log; no X-Forwarded-For rewriting (the client address is the peer's:
        # the auth throttle counts failures by it).
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=5,
            loop="none",
            # a factory, not a class (the protocol is compiled: no subclass made at run time); uvicorn only calls it
            http=guarded((limits or ConnectionLimits()).within_open_files()),  # type: ignore[arg-type]
            proxy_headers=False,
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None
        self.app = app

    async def start(self) -> None:
        await asyncio.to_thread(self._prepare)
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise OSError(f"{self.name}: cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        sock.listen(2048)
        sock.setblocking(False)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=self.name)
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    def _prepare(self) -> None:
        """Off the loop: uvicorn's protocol imports (`Config.load`, ~0.1 s), the app's route warm-up and its
        OpenAPI schema (FastAPI builds and caches it on the first GET /openapi.json: ~0.1-0.3 s of CPU)."""
        self._server.config.load()
        warm_up(self.app)
        openapi = getattr(self.app, "openapi", None)
        if callable(openapi):
            openapi()

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


WARM_UP_PATH = "/_corral/warm-up"


def warm_up(app: Any) -> int:
    """Send one GET for a path no route has through `app` on a private event loop; returns the status."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": WARM_UP_PATH,
        "raw_path": WARM_UP_PATH.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "server": ("127.0.0.1", 0),
        "client": ("127.0.0.1", 0),
    }
    asyncio.run(app(scope, receive, send))
    return int(sent[0]["status"]) if sent else 0
