"""Client to backend processes: one gRPC channel per address (bearer auth, 50 MiB limits, keepalive), and
the backend's fast lane when it advertises one.

Every call has a bound (`BackendBudgets`): unary calls a deadline, streams a first-token and an idle
budget, and the connection pings the backend (HTTP/2 keepalive, or the lane's PING) so a peer that
stopped answering fails its calls instead of hanging them.

`caller(address)` is what the request path calls: the backend's fast lane (`corral.lane.client`) once it is
connected, else the gRPC stub — a `BackendCaller` (`backend_caller`) either way. The first request to an address starts, in the background, a `Status`
call; a corral backend answers it with its lane's port and the lane is connected and authenticated
with the same token. A backend that advertises none (reference backends) is served over gRPC until
the address is discarded; a lane that cannot be reached is retried after `LANE_RETRY_S`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import grpc

from corral.lane.client import Keepalive, LaneConnection, LaneRefused, open_lane
from corral.proto import backend_pb2, backend_pb2_grpc
from corral.routing.backend_caller import BackendCaller

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 50 << 20
LANE_RETRY_S = 30.0  # after a lane could not be connected (or was lost), gRPC only for this long

CALL_TIMEOUT_KNOB = "CORRAL_BACKEND_CALL_TIMEOUT"
FIRST_TOKEN_TIMEOUT_KNOB = "CORRAL_STREAM_FIRST_TOKEN_TIMEOUT"
IDLE_TIMEOUT_KNOB = "CORRAL_STREAM_IDLE_TIMEOUT"
KEEPALIVE_KNOB = "CORRAL_BACKEND_KEEPALIVE"


@dataclass(frozen=True)
class BackendBudgets:
    """The bounds of every backend call (see the knobs in config/frontend.py)."""

    call_timeout_s: float = 600.0  # CORRAL_BACKEND_CALL_TIMEOUT: one unary call
    first_token_timeout_s: float = 300.0  # CORRAL_STREAM_FIRST_TOKEN_TIMEOUT: prompt processing
    idle_timeout_s: float = 60.0  # CORRAL_STREAM_IDLE_TIMEOUT: silence between two replies of a stream
    probe_timeout_s: float = 2.0  # CORRAL_BACKEND_PROBE_TIMEOUT: Health probe after a timeout
    keepalive_s: float = 20.0  # CORRAL_BACKEND_KEEPALIVE: ping interval while calls are in flight
    keepalive_timeout_s: float = (
        60.0  # CORRAL_BACKEND_KEEPALIVE_TIMEOUT: silence after a ping that fails the calls
    )

    @classmethod
    def from_settings(cls, settings: Any) -> BackendBudgets:
        return cls(
            call_timeout_s=settings.backend_call_timeout_s,
            first_token_timeout_s=settings.stream_first_token_timeout_s,
            idle_timeout_s=settings.stream_idle_timeout_s,
            probe_timeout_s=settings.backend_probe_timeout_s,
            keepalive_s=settings.backend_keepalive_s,
            keepalive_timeout_s=settings.backend_keepalive_timeout_s,
        )

    @property
    def keepalive(self) -> Keepalive:
        return Keepalive(self.keepalive_s, self.keepalive_timeout_s)


def channel_options(budgets: BackendBudgets) -> list[tuple[str, int]]:
    keepalive_ms = max(1000, int(budgets.keepalive_s * 1000))
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", max(1000, int(budgets.keepalive_timeout_s * 1000))),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),  # keep pinging through a long silent prefill
        ("grpc.http2.min_time_between_pings_ms", keepalive_ms),
    ]


def replica_gone(exc: grpc.aio.AioRpcError) -> bool:
    """True when the error means the replica no longer serves the model and must be dropped. FAILED_PRECONDITION
    only when it says the model is not loaded: a loaded model refusing a kind of request it cannot serve (no chat
    template, loaded without embeddings, a method its backend lacks) is a healthy replica."""
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return "not loaded" in details
    return code == grpc.StatusCode.NOT_FOUND and "model identity mismatch" in details


class BackendChannels:
    def __init__(self, token: str, budgets: BackendBudgets | None = None, *, fast_lane: bool = True) -> None:
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.budgets = budgets or BackendBudgets()
        self._token = token
        self._options = channel_options(self.budgets)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, backend_pb2_grpc.BackendStub] = {}
        self._fast_lane = fast_lane
        self._lanes: dict[str, LaneConnection] = {}
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._no_lane_until: dict[str, float] = {}  # monotonic seconds; inf: the backend advertises none

    def caller(self, address: str) -> BackendCaller:
        """The fast lane of `address` when connected, else its gRPC stub (and the lane looked for)."""
        lane = self._lanes.get(address)
        if lane is not None:
            return lane
        if (
            self._fast_lane
            and address not in self._probes
            and time.monotonic() >= self._no_lane_until.get(address, 0.0)
        ):
            self._probes[address] = asyncio.get_running_loop().create_task(
                self._find_lane(address), name=f"fast-lane {address}"
            )
        return self.stub(address)

    def lane(self, address: str) -> LaneConnection | None:
        return self._lanes.get(address)

    async def _find_lane(self, address: str) -> None:
        timeout_s = self.budgets.probe_timeout_s
        try:
            status = await self.stub(address).Status(
                backend_pb2.HealthMessage(), metadata=self.metadata, timeout=timeout_s
            )
            port = int(status.corral_fast_lane_port)
            if not port:
                self._no_lane_until[address] = math.inf
                return
            lane = await open_lane(
                address, port, self._token, self.budgets.keepalive, timeout_s, self._lane_lost
            )
        except (grpc.aio.AioRpcError, LaneRefused) as exc:
            detail = (
                f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            )
            log.info("no fast lane to %s (%s); using gRPC, retrying in %.0fs", address, detail, LANE_RETRY_S)
            self._no_lane_until[address] = time.monotonic() + LANE_RETRY_S
            return
        finally:
            self._probes.pop(address, None)
        if address not in self._stubs:  # discarded while connecting
            lane.close()
            return
        log.info("fast lane to %s on port %d", address, port)
        self._lanes[address] = lane

    def _lane_lost(self, lane: LaneConnection) -> None:
        if self._lanes.get(lane.address) is lane:
            del self._lanes[lane.address]
            self._no_lane_until[lane.address] = time.monotonic() + LANE_RETRY_S

    def stub(self, address: str) -> backend_pb2_grpc.BackendStub:
        """The stub of `address`, made once: a new stub builds one callable per RPC (~30 µs per request)."""
        stub = self._stubs.get(address)
        if stub is None:
            channel = grpc.aio.insecure_channel(address, options=self._options)
            self._channels[address] = channel
            stub = self._stubs[address] = backend_pb2_grpc.BackendStub(channel)
        return stub

    async def healthy(self, address: str) -> bool:
        """The backend's Health RPC answered OK within CORRAL_BACKEND_PROBE_TIMEOUT."""
        try:
            reply = await self.stub(address).Health(
                backend_pb2.HealthMessage(), metadata=self.metadata, timeout=self.budgets.probe_timeout_s
            )
        except grpc.aio.AioRpcError:
            return False
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller itself was cancelled
            # the channel was closed under the probe (another call dropped the replica): no answer
            return False
        return bool(reply.message == b"OK")

    def close_lane(self, address: str) -> None:
        """Fail the fast-lane calls in flight to `address` UNAVAILABLE (their replies will not come). The gRPC
        channel stays: closing it would cancel its calls, Health probes included, as if their callers had."""
        lane = self._lanes.pop(address, None)
        if lane is not None:
            lane.close()

    async def discard(self, address: str) -> None:
        self._stubs.pop(address, None)
        self._no_lane_until.pop(address, None)
        lane = self._lanes.pop(address, None)
        if lane is not None:
            lane.close()
        probe = self._probes.pop(address, None)
        if probe is not None:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        for address in {*self._channels, *self._lanes, *self._probes}:
            await self.discard(address)
