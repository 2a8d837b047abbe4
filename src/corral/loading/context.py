"""What a cold load needs, typed: the context the frontend assembles, and the roles it receives.

`loading` never imports `routing`: the backend channels and the evictor come in as protocols,
and a finished load is reported as a `LoadedReplica` (routing turns it into a routable replica).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import asyncpg
import httpx
from nats.aio.client import Client

from corral.loading.fleet import FleetView
from corral.placement.pipeline import Decision
from corral.placement.snapshot import NodeSnapshot
from corral.proto import backend_pb2_grpc
from corral.staging.stager import StagingContext


class BackendStubs(Protocol):
    """gRPC stubs to backend processes, one channel per address, with the bearer metadata."""

    metadata: tuple[tuple[str, str], ...]

    def stub(self, address: str) -> backend_pb2_grpc.BackendStub: ...

    async def discard(self, address: str) -> None:
        """Close the channel to an address whose replica is gone (routing's forget)."""
        ...


class Evictor(Protocol):
    """Frees room for a model that fits nowhere as things stand (routing's in-flight-safe eviction)."""

    async def make_room(self, decision: Decision) -> NodeSnapshot:
        """Stop idle replicas on one node the decision allows until the model fits there; that node.

        Raises PlacementError naming why when no allowed node can be freed enough.
        """
        ...


@dataclass(frozen=True)
class LoadContext:
    pool: asyncpg.Pool
    nc: Client
    http: httpx.AsyncClient
    channels: BackendStubs
    staging: StagingContext
    token: str
    install_timeout_s: float
    load_timeout_override_s: float | None
    evictor: Evictor | None = None  # None: a model that fits nowhere is placed on the best node anyway
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias -> model (models/aliases.py)
    fleet: FleetView = field(default_factory=FleetView)  # this frontend's incremental placement view


@dataclass(frozen=True)
class LoadedReplica:
    """Where a load put the model: enough for routing to build its replica."""

    model: str
    node_id: str
    node_name: str
    address: str
    replica_index: int
