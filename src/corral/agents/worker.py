"""`corral agent-worker`: registers as an agent node, serves MCP discovery and tool calls and runs agent
jobs from the `agent-workers` NATS queue group, heartbeats, and drains then deregisters on SIGTERM.

It reuses the backend worker's registration client, node credential and NATS credential handling; it
runs no backend processes and serves no files.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from corral.agents.authority import ServerAuthority
from corral.agents.jobs import JobRunner
from corral.agents.sessions import SessionPool
from corral.agents.tools import ToolService
from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.agent_messages import (
    MCPDiscoveryRequest,
    MCPDiscoveryResponse,
    MCPToolRequest,
    MCPToolResponse,
)
from corral.bus.messages import Message, ValidationError
from corral.bus.security import TlsFiles
from corral.config.agents import AgentWorkerSettings
from corral.node.credentials import WorkerCredentials, first_registration, refresh_loop
from corral.node.heartbeat import Heartbeat
from corral.node.node_credential import NodeCredentialFile
from corral.node.registration import FrontendClient

log = logging.getLogger(__name__)

DEREGISTER_TIMEOUT_S = 10.0
Handler = Callable[[Msg], Awaitable[None]]


def default_state_dir() -> Path:
    return Path.home() / ".corral-agent-worker"


class AgentWorker:
    def __init__(self, settings: AgentWorkerSettings) -> None:
        self.settings = settings
        self.node_name = settings.node_name or f"agent-{socket.gethostname()}"
        self.node_id = ""
        self.api_token = settings.api_token or ""
        self.frontend = FrontendClient(settings.register_to, settings.registration_token)
        self.creds = WorkerCredentials()
        state_dir = Path(settings.state_dir) if settings.state_dir else default_state_dir()
        self.credential_file = NodeCredentialFile(state_dir, self.node_name)
        self.pool = SessionPool(settings.mcp_start_timeout_s)
        self.tools = ToolService(self.pool, ServerAuthority(self._fetch_servers).servers)
        self.jobs: JobRunner | None = None
        self.nc: Client | None = None
        self._queue_subs: list[Subscription] = []
        self._other_subs: list[Subscription] = []
        self._inflight: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.nats_up = False
        self.heartbeat = Heartbeat(  # as a backend worker: a node that cannot receive work does not beat
            self.frontend,
            lambda: self.node_id,
            self._heartbeat_body,
            settings.heartbeat_interval_s,
            ready=lambda: self.nats_up,
            reregister=self._reregister,
        )

    # registration ----------------------------------------------------------------------------------

    async def _fetch_servers(self, model: str) -> dict[str, Any]:
        return await self.frontend.mcp_servers(self.node_id, model)

    def _registration_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.node_name, "node_type": "agent"}
        if self.settings.registration_token:
            body["token"] = self.settings.registration_token
        return body

    async def _keep(self, reply: dict[str, Any]) -> dict[str, Any]:
        """Keep the node credential (first registration) and the provisioned API key (each approval)."""
        token = str(reply.get("node_token") or "")
        if token:
            await asyncio.to_thread(self.credential_file.save, str(reply["id"]), token)
            self.frontend.use_node_token(token)
        if reply.get("api_token") and not self.settings.api_token:
            self.api_token = str(reply["api_token"])
            if self.jobs is not None:
                self.jobs.api_token = self.api_token
        return reply

    async def _register_once(self) -> dict[str, Any]:
        return await self._keep(await self.frontend.register(self._registration_body(), attempts=1))

    async def _register(self) -> dict[str, Any]:
        return await self._keep(await self.frontend.register(self._registration_body()))

    async def _first_registration(self) -> dict[str, Any]:
        self.creds, reply = await first_registration(
            self.settings, self.creds, self._register_once, self._register
        )
        return reply

    async def _refresh_nats(self) -> dict[str, Any]:
        return await self.frontend.nats_credentials(self.node_id)

    async def _adopt(self, reply: dict[str, Any]) -> None:
        if self.creds.adopt(reply) and self.nc is not None:
            await self.nc.force_reconnect()

    # NATS ------------------------------------------------------------------------------------------

    def _spawn(self, handler: Handler) -> Handler:
        """Each message in its own task, tracked so that SIGTERM waits for it (bounded)."""

        async def callback(msg: Msg) -> None:
            task = asyncio.create_task(self._guard(handler, msg))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

        return callback

    async def _guard(self, handler: Handler, msg: Msg) -> None:
        try:
            await handler(msg)
        except Exception:
            log.exception("handler for %s failed", msg.subject)

    async def _reply(self, msg: Msg, answer: Message) -> None:
        if msg.reply:
            await msg.respond(answer.to_json())

    async def _discovery(self, msg: Msg) -> None:
        try:
            req = MCPDiscoveryRequest.from_json(msg.data)
        except ValidationError as exc:
            await self._reply(
                msg, MCPDiscoveryResponse(error=f"invalid request: {exc}", node_id=self.node_id)
            )
            return
        await self._reply(msg, await self.tools.discover(req))

    async def _tool(self, msg: Msg) -> None:
        try:
            req = MCPToolRequest.from_json(msg.data)
        except ValidationError as exc:
            await self._reply(msg, MCPToolResponse(error=f"invalid request: {exc}", node_id=self.node_id))
            return
        log.info("tool %s for model %s", req.tool_name, req.model_name)
        await self._reply(msg, await self.tools.execute(req, self.settings.mcp_tool_timeout_s))

    async def _subscribe(self, nc: Client, jobs: JobRunner) -> None:
        queue = self.settings.queue
        routes: dict[str, Handler] = {
            subjects.MCP_DISCOVERY: self._discovery,
            subjects.MCP_TOOLS_EXECUTE: self._tool,
            self.settings.subject: jobs.on_agent_execute,
            subjects.MCP_CI_JOBS_NEW: jobs.on_mcp_ci_job,
        }
        for subject, handler in routes.items():
            self._queue_subs.append(await nc.subscribe(subject, queue=queue, cb=self._spawn(handler)))
        for subject in ("jobs.*.cancel", "agent.*.cancel"):
            self._other_subs.append(await nc.subscribe(subject, cb=jobs.on_cancel))
        await nc.flush(timeout=5)

    # lifecycle -------------------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        async with self.started() as (beat, refresh):
            stop_wait = asyncio.create_task(self._stop.wait(), name="stop-signal")
            try:
                await asyncio.wait({stop_wait, refresh, beat}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop_wait.cancel()
                await asyncio.gather(stop_wait, return_exceptions=True)
            if refresh.done() and not refresh.cancelled() and refresh.exception() is not None:
                log.error("%s; exiting", refresh.exception())
                return 1
            return 0

    @asynccontextmanager
    async def started(self) -> AsyncIterator[tuple[asyncio.Task[None], asyncio.Task[None]]]:
        """Register, connect NATS, join the queue group, then start the loops; each part is entered into one
        exit stack as it starts, so leaving (a stop, or a start that failed half way) closes what had
        started, the last started first: loops, drain and deregistration, agent jobs, MCP sessions, NATS,
        the frontend client. Yields (heartbeat, credential refresh)."""
        async with AsyncExitStack() as stack:
            stack.push_async_callback(self.frontend.close)
            self.frontend.use_node_token(await asyncio.to_thread(self.credential_file.load))
            reply = await self._first_registration()
            self.node_id = reply["id"]
            self.tools.node_id = self.node_id
            log.info(
                "registered as agent node %s (%s), status %s",
                self.node_name,
                self.node_id,
                reply.get("status"),
            )
            tls = TlsFiles(self.settings.nats_tls_ca, self.settings.nats_tls_cert, self.settings.nats_tls_key)
            nc = await bus.connect(
                self.settings.nats_url,
                f"corral-agent-worker-{self.node_name}",
                self._on_nats_state,
                credentials=self.creds.for_connect(),
                tls=tls,
            )
            self.nc, self.nats_up = nc, nc.is_connected
            stack.push_async_callback(_drain, nc)
            stack.push_async_callback(self.pool.close_all)  # the MCP servers
            api_url = (self.settings.api_url or self.settings.register_to).rstrip("/")
            self.jobs = JobRunner(
                nc,
                self.tools,
                api_url,
                self.api_token,
                self.node_id,
                self.settings.mcp_ci_job_timeout_s,
                self.settings.mcp_tool_timeout_s,
            )
            stack.push_async_callback(self.jobs.close)
            await self._subscribe(nc, self.jobs)
            stack.push_async_callback(self._leave)
            log.info(
                "agent worker %s ready: queue %s on %s, %s, %s, %s",
                self.node_name,
                self.settings.queue,
                subjects.MCP_DISCOVERY,
                subjects.MCP_TOOLS_EXECUTE,
                self.settings.subject,
                subjects.MCP_CI_JOBS_NEW,
            )
            loops_stop = asyncio.Event()
            beat = asyncio.create_task(self.heartbeat.run(loops_stop), name="heartbeat")
            refresh = asyncio.create_task(self._refresh_loop(loops_stop), name="nats-credential-refresh")
            stack.push_async_callback(_stop_loops, loops_stop, [beat, refresh])
            stack.callback(log.info, "agent worker %s shutting down", self.node_name)
            yield beat, refresh

    async def _refresh_loop(self, stop: asyncio.Event) -> None:
        """Refresh minted credentials; ends only by raising (credentials that never expire need no refresh)."""
        await refresh_loop(self._refresh_nats, self.creds, self._adopt, stop)
        await stop.wait()

    async def _leave(self) -> None:
        """Leave the queue group first (new work goes to the other agent workers), let in-flight work finish
        within the drain timeout, then deregister."""
        try:
            await asyncio.wait_for(self.frontend.drain(self.node_id), DEREGISTER_TIMEOUT_S)
        except Exception as exc:  # the frontend may be gone; shutdown continues
            log.warning("could not mark node draining: %s", exc or type(exc).__name__)
        for sub in self._queue_subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # a closed connection has nothing left to drop
                log.debug("unsubscribe failed: %s", exc)
        if self._inflight:
            _done, pending = await asyncio.wait(set(self._inflight), timeout=self.settings.drain_timeout_s)
            if pending:
                log.warning(
                    "drain timeout (%gs, CORRAL_DRAIN_TIMEOUT) reached with %d tool calls/jobs running; "
                    "cancelling them",
                    self.settings.drain_timeout_s,
                    len(pending),
                )
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        try:
            await asyncio.wait_for(self.frontend.deregister(self.node_id), DEREGISTER_TIMEOUT_S)
        except Exception as exc:
            log.warning("deregistration failed: %s", exc or type(exc).__name__)

    async def _on_nats_state(self, up: bool) -> None:
        self.nats_up = up

    async def _heartbeat_body(self) -> dict[str, Any]:
        return {}

    async def _reregister(self) -> None:
        reply = await self._register_once()
        await self._adopt(reply)
        self.node_id = self.tools.node_id = reply["id"]


async def _drain(nc: Client) -> None:
    try:
        await nc.drain()
    except Exception as exc:  # a dead link has nothing to drain
        log.debug("NATS drain failed: %s", exc)


async def _stop_loops(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
