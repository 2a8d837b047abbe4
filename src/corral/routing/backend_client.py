"""gRPC client to backend processes: one channel per address, bearer auth, 50 MiB limits, keepalive.

Every call has a bound (`BackendBudgets`): unary calls a deadline, streams a first-token and an idle
budget, and the channel pings the backend (HTTP/2 keepalive) so a peer that stopped answering fails
its calls instead of hanging them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from corral.proto import backend_pb2, backend_pb2_grpc

MAX_MESSAGE_BYTES = 50 << 20

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
    keepalive_s: float = 20.0  # CORRAL_BACKEND_KEEPALIVE: HTTP/2 ping interval (and ack budget)

    @classmethod
    def from_settings(cls, settings: Any) -> BackendBudgets:
        return cls(call_timeout_s=settings.backend_call_timeout_s,
                   first_token_timeout_s=settings.stream_first_token_timeout_s,
                   idle_timeout_s=settings.stream_idle_timeout_s,
                   probe_timeout_s=settings.backend_probe_timeout_s,
                   keepalive_s=settings.backend_keepalive_s)


def channel_options(budgets: BackendBudgets) -> list[tuple[str, int]]:
    keepalive_ms = max(1000, int(budgets.keepalive_s * 1000))
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", keepalive_ms),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),  # keep pinging through a long silent prefill
        ("grpc.http2.min_time_between_pings_ms", keepalive_ms),
    ]


def replica_gone(exc: grpc.aio.AioRpcError) -> bool:
    """True when the error means the replica no longer serves the model and must be dropped."""
    code = exc.code()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION):
        return True
    return code == grpc.StatusCode.NOT_FOUND and "model identity mismatch" in (exc.details() or "")


class BackendChannels:
    def __init__(self, token: str, budgets: BackendBudgets | None = None) -> None:
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.budgets = budgets or BackendBudgets()
        self._options = channel_options(self.budgets)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, backend_pb2_grpc.BackendStub] = {}

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
            reply = await self.stub(address).Health(backend_pb2.HealthMessage(), metadata=self.metadata,
                                                    timeout=self.budgets.probe_timeout_s)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.message == b"OK")

    async def discard(self, address: str) -> None:
        self._stubs.pop(address, None)
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        for address in list(self._channels):
            await self.discard(address)
