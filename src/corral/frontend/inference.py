"""Call a backend through the router: pick a replica, call, drop a dead replica and retry once."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import grpc

from corral.frontend.errors import APIError
from corral.loading.errors import LoadError, ModelStillLoading
from corral.loading.place import plan
from corral.models.config import ModelConfig
from corral.placement.errors import PlacementError
from corral.placement.rejection import NoNodeFits
from corral.proto import backend_pb2
from corral.routing.backend_client import replica_gone
from corral.routing.replica import Replica
from corral.routing.router import Router

log = logging.getLogger(__name__)

T = TypeVar("T")
ATTEMPTS = 2  # a replica that vanished is dropped and the request retried once on a fresh load


async def _route(router: Router, cfg: ModelConfig) -> Replica:
    try:
        return await router.route(cfg)
    except PlacementError as exc:
        reasons = await _placement_reasons(router, cfg)
        raise APIError(503, str(exc), "server_error", "no_nodes_available",
                       extra={"rejections": reasons} if reasons else None) from None
    except LoadError as exc:
        raise APIError(502, str(exc), "server_error", "model_load_failed") from None
    except ModelStillLoading as exc:
        raise APIError(503, str(exc), "model_loading", "model_loading",
                       headers={"Retry-After": str(exc.retry_after_s)}, extra={"loading": exc.loading}) from None


async def _placement_reasons(router: Router, cfg: ModelConfig) -> list[dict[str, str]]:
    """The structured per-node reasons behind a placement failure (error path only: one snapshot read)."""
    try:
        await plan(router.ctx, cfg)
    except NoNodeFits as exc:
        return [{"node": name, "filter": r.filter, "reason": r.reason, "detail": r.detail}
                for name, r in sorted(exc.rejections.items())]
    except Exception:  # the message alone still explains the failure
        return []
    return []


def _backend_error(cfg: ModelConfig, replica: Replica, exc: grpc.aio.AioRpcError) -> APIError:
    if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
        return APIError(400, f"model {cfg.name}: {exc.details()}", "invalid_request_error", "invalid_value")
    return APIError(502, f"model {cfg.name} on node {replica.node_name}: backend error "
                         f"{exc.code().name}: {exc.details()}", "server_error", "backend_error")


async def unary(router: Router, cfg: ModelConfig,
                call: Callable[[Replica], Awaitable[T]]) -> tuple[T, Replica]:
    for attempt in range(ATTEMPTS):
        replica = await _route(router, cfg)
        try:
            async with router.using(replica):
                return await call(replica), replica
        except grpc.aio.AioRpcError as exc:
            if replica_gone(exc) and attempt + 1 < ATTEMPTS:
                await router.forget(replica, f"{exc.code().name}: {exc.details()}")
                continue
            if replica_gone(exc):
                await router.forget(replica, f"{exc.code().name}: {exc.details()}")
            raise _backend_error(cfg, replica, exc) from None
    raise AssertionError("unreachable")


async def open_stream(router: Router, cfg: ModelConfig, request: backend_pb2.PredictOptions
                      ) -> tuple[backend_pb2.Reply, AsyncIterator[backend_pb2.Reply], Replica]:
    """Start a stream and read its first reply, so a dead replica is retried before any byte is sent."""
    for attempt in range(ATTEMPTS):
        replica = await _route(router, cfg)
        stub = router.ctx.channels.stub(replica.address)
        call = stub.PredictStream(request, metadata=router.ctx.channels.metadata)
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as exc:
            if replica_gone(exc):
                await router.forget(replica, f"{exc.code().name}: {exc.details()}")
                if attempt + 1 < ATTEMPTS:
                    continue
            raise _backend_error(cfg, replica, exc) from None
        return first, _rest(router, replica, call), replica
    raise AssertionError("unreachable")


async def _rest(router: Router, replica: Replica, call: grpc.aio.UnaryStreamCall) -> AsyncIterator[backend_pb2.Reply]:
    async with router.using(replica):
        try:
            while True:
                reply = await call.read()
                if reply is grpc.aio.EOF:
                    return
                yield reply
        finally:
            call.cancel()
