"""Admin: a worker's backend logs, proxied from NATS (the worker side and the transport choice are in
`worker/log_handlers.py`).

* `GET /api/nodes/<id>/backend-logs` — `[{"model_id", "backend", "process_keys", "running", "lines"}]`.
* `GET /api/nodes/<id>/backend-logs/<model>?limit=N` — `{"model_id", "lines": [{seq, process_key,
  timestamp, stream, text}]}` (oldest first; 404 when the worker has no log of that model).
* `GET /ws/nodes/<id>/backend-logs/<model>` (WebSocket) — the last lines, then every new line live,
  one JSON line object per text frame. The follower subscribes before it asks for the snapshot and
  drops lines it has already sent (per process key, by `seq`), so nothing is lost or repeated at the
  seam. A follower that reads too slowly loses lines, and is told so with a `{"dropped": n}` frame.

Admin auth applies to all three (the WebSocket is refused with close code 1008 before it opens).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, WebSocket
from fastapi.responses import JSONResponse
from nats.aio.msg import Msg
from starlette.websockets import WebSocketDisconnect, WebSocketState

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import BackendLogsReply, BackendLogsRequest
from corral.frontend.admin.node_requests import NodeId, backend_node, bus_failure
from corral.frontend.node_api.identity import node_error
from corral.frontend.state import FrontendState
from corral.models.names import name_problem
from corral.nodes.backend_ops import NODE_OP_KNOB
from corral.store import nodes as node_store

log = logging.getLogger(__name__)

LIMIT_MAX = 5000
SNAPSHOT_LINES = 500
FOLLOW_QUEUE_MAX = 2000
ModelId = Annotated[str, Path(max_length=255)]
POLICY_VIOLATION, UNAVAILABLE = 1008, 1011


def build_backend_logs_router(state: FrontendState) -> APIRouter:
    router = APIRouter()

    async def snapshot(node_id: str, model_id: str, limit: int) -> BackendLogsReply:
        reply: BackendLogsReply = await bus.request(
            state.nc,
            subjects.backend_logs(node_id),
            BackendLogsRequest(model_id=model_id, limit=limit),
            BackendLogsReply,
            state.backend_op_settings().node_op_timeout_s,
            NODE_OP_KNOB,
        )
        return reply

    @router.get("/api/nodes/{node_id}/backend-logs")
    async def models(node_id: NodeId) -> Any:
        node = await backend_node(state.pool, node_id)
        if isinstance(node, JSONResponse):
            return node
        try:
            reply = await snapshot(node_id, "", 0)
        except bus.BusError as exc:
            return bus_failure(exc)
        return reply.models or []

    @router.get("/api/nodes/{node_id}/backend-logs/{model_id}")
    async def lines(
        node_id: NodeId, model_id: ModelId, limit: Annotated[int, Query(ge=1, le=LIMIT_MAX)] = SNAPSHOT_LINES
    ) -> Any:
        if (problem := name_problem(model_id)) is not None:
            return node_error(400, f"invalid request: path 'model_id' {problem}")
        node = await backend_node(state.pool, node_id)
        if isinstance(node, JSONResponse):
            return node
        try:
            reply = await snapshot(node_id, model_id, limit)
        except bus.BusError as exc:
            return bus_failure(exc)
        if reply.error:
            return node_error(404, f"node {node['name']}: {reply.error}")
        return {"model_id": model_id, "lines": reply.lines or []}

    @router.websocket("/ws/nodes/{node_id}/backend-logs/{model_id}")
    async def follow(websocket: WebSocket, node_id: str, model_id: str) -> None:
        if (
            (problem := name_problem(model_id)) is not None
            or len(node_id) > 36
            or await node_store.get(state.pool, node_id) is None
        ):
            reason = f"model_id {problem}" if problem else f"node {node_id[:36]} not found"
            await websocket.close(code=POLICY_VIOLATION, reason=reason[:120])
            return
        await Follower(state, websocket, node_id, model_id).run(snapshot)

    return router


class Follower:
    """One WebSocket following one model's backend lines on one node."""

    def __init__(self, state: FrontendState, websocket: WebSocket, node_id: str, model_id: str) -> None:
        self.state, self.ws, self.node_id, self.model_id = state, websocket, node_id, model_id
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=FOLLOW_QUEUE_MAX)
        self.seen: dict[str, int] = {}
        self.dropped = 0

    async def _on_lines(self, msg: Msg) -> None:
        try:
            payload = json.loads(msg.data)
        except ValueError:
            return
        if not isinstance(payload, dict) or payload.get("model_id") != self.model_id:
            return  # another model whose name sanitises to the same subject token
        for line in payload.get("lines") or []:
            if not isinstance(line, dict):
                continue
            try:
                self.queue.put_nowait(line)
            except asyncio.QueueFull:
                self.dropped += 1

    async def _send(self, line: dict[str, Any]) -> None:
        key, seq = str(line.get("process_key", "")), line.get("seq")
        if isinstance(seq, int):
            if seq <= self.seen.get(key, 0):
                return
            self.seen[key] = seq
        await self.ws.send_json(line)

    async def run(self, snapshot: Any) -> None:
        await self.ws.accept()
        sub = await self.state.nc.subscribe(
            subjects.backend_log_lines(self.node_id, self.model_id), cb=self._on_lines
        )
        try:
            try:
                reply = await snapshot(self.node_id, self.model_id, SNAPSHOT_LINES)
            except bus.BusError as exc:
                await self.ws.send_json({"error": str(exc)})
                await self.ws.close(code=UNAVAILABLE, reason="worker did not answer")
                return
            for line in reply.lines or []:
                await self._send(line)
            await self._pump()
        except WebSocketDisconnect:
            pass
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            if self.ws.application_state is WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await self.ws.close()

    async def _pump(self) -> None:
        """Send live lines until the client goes away (any frame it sends is ignored)."""
        receiver = asyncio.ensure_future(self.ws.receive())
        try:
            while True:
                getter = asyncio.ensure_future(self.queue.get())
                done, _ = await asyncio.wait({getter, receiver}, return_when=asyncio.FIRST_COMPLETED)
                if receiver in done:
                    if getter in done:
                        await self._send(getter.result())
                    else:
                        getter.cancel()
                    message = receiver.result()
                    if message.get("type") == "websocket.disconnect":
                        return
                    receiver = asyncio.ensure_future(self.ws.receive())
                    continue
                if self.dropped:
                    await self.ws.send_json({"dropped": self.dropped})
                    self.dropped = 0
                await self._send(getter.result())
        finally:
            receiver.cancel()
            with contextlib.suppress(BaseException):
                await receiver
