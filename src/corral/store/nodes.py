"""Node registry table family: registration, heartbeats, status, labels, placement snapshot."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from corral.store.locks import KEY_PENDING_NODES
from corral.store.queries import q

PENDING, HEALTHY, UNHEALTHY, OFFLINE, DRAINING = "pending", "healthy", "unhealthy", "offline", "draining"
STATUSES = (PENDING, HEALTHY, UNHEALTHY, OFFLINE, DRAINING)
ADMIN, WORKER = "admin", "worker"  # who drained a node (`drained_by`)


@dataclass(frozen=True)
class NodeFacts:
    """What a worker reports about itself at registration."""

    name: str
    address: str
    http_address: str = ""
    node_type: str = "backend"
    total_vram: int = 0
    available_vram: int = 0
    total_ram: int = 0
    available_ram: int = 0
    total_disk: int = 0
    available_disk: int = 0
    gpu_vendor: str = ""
    gpu_compute_capability: str = ""
    capability: str = ""
    max_replicas_per_model: int = 1
    vram_budget: str = ""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest() if token else ""


def vram_bucket(total_vram: int) -> str:
    gib = total_vram / (1 << 30)
    for floor, label in ((80, "80GB+"), (48, "48GB"), (24, "24GB"), (16, "16GB"), (8, "8GB")):
        if gib >= floor:
            return label
    return f"{int(gib)}GB"


def _columns(facts: NodeFacts, token: str, approved: bool) -> tuple[Any, ...]:
    """The registration's column values, in the order node_insert and node_reregister take them."""
    return (
        facts.node_type,
        facts.address,
        facts.http_address,
        HEALTHY if approved else PENDING,
        token_hash(token),
        approved,
        facts.total_vram,
        facts.available_vram,
        facts.total_ram,
        facts.available_ram,
        facts.total_disk,
        facts.available_disk,
        facts.gpu_vendor,
        facts.gpu_compute_capability,
        facts.capability,
        max(1, facts.max_replicas_per_model),
        facts.vram_budget,
    )


class PendingCapReached(Exception):
    """A new node would be pending approval, and `cap` nodes already are."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"{cap} nodes are already pending approval")
        self.cap = cap


class CredentialMismatch(Exception):
    """The name belongs to a node with a credential, and the registration did not present it."""

    def __init__(self, node: asyncpg.Record) -> None:
        super().__init__(f"node {node['name']!r} ({node['id']}) holds another credential")
        self.node = node


async def register(
    pool: asyncpg.Pool,
    facts: NodeFacts,
    token: str,
    labels: dict[str, str],
    *,
    auto_approve: bool,
    credential_hash: str = "",
    new_credential_hash: str = "",
    max_pending: int | None = None,
) -> asyncpg.Record:
    """Insert or refresh a node. A node keeps its id; it is healthy only if auto-approve or approved once.

    A new node gets `new_credential_hash`. A known name is refreshed only when `credential_hash` is its
    credential (or it has none: then it takes `new_credential_hash`); otherwise CredentialMismatch is
    raised and nothing about the node changes. A new name that would be pending while `max_pending` nodes
    already are raises PendingCapReached (counted under a lock, so concurrent registrations cannot pass it).
    """
    async with pool.acquire() as conn, conn.transaction():
        existing = await conn.fetchrow(q("node_by_name"), facts.name)
        row = None
        if existing is None and not auto_approve and max_pending is not None:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", KEY_PENDING_NODES)
            if await conn.fetchval(q("nodes_pending_count")) >= max_pending:
                raise PendingCapReached(max_pending)
        if existing is None:
            row = await conn.fetchrow(
                q("node_insert"),
                str(uuid.uuid4()),
                facts.name,
                *_columns(facts, token, auto_approve),
                new_credential_hash,
            )
        if row is None:  # known, or registered by a concurrent call since we looked
            existing = await conn.fetchrow(q("node_by_name_locked"), facts.name)
            approved = auto_approve or bool(existing["approved"])
            row = await conn.fetchrow(
                q("node_reregister"),
                existing["id"],
                *_columns(facts, token, approved),
                new_credential_hash,
                credential_hash,
            )
            if row is None:
                raise CredentialMismatch(existing)
            await conn.execute(q("replicas_delete_for_node"), existing["id"])
        auto = {"node.name": facts.name, "node.replica-slots": str(max(1, facts.max_replicas_per_model))}
        if facts.gpu_vendor:
            auto["gpu.vendor"] = facts.gpu_vendor
            auto["gpu.vram"] = vram_bucket(facts.total_vram)
        for key, value in {**labels, **auto}.items():
            await conn.execute(q("label_upsert"), str(uuid.uuid4()), row["id"], key, value)
        return row


async def heartbeat(pool: asyncpg.Pool, node_id: str, update: dict[str, Any]) -> asyncpg.Record | None:
    """A durable heartbeat write; None when the node is unknown (deleted: the worker must register again)."""
    return await pool.fetchrow(
        q("node_heartbeat"),
        node_id,
        update.get("available_vram"),
        update.get("available_ram"),
        update.get("total_disk"),
        update.get("available_disk"),
        update.get("total_vram"),
        update.get("gpu_vendor"),
    )


async def set_status(pool: asyncpg.Pool, node_id: str, status: str, *, drop_replicas: bool = False) -> bool:
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(q("node_set_status"), node_id, status)
        if row and drop_replicas:
            await conn.execute(q("replicas_delete_for_node"), node_id)
        return row is not None


async def drain(pool: asyncpg.Pool, node_id: str, *, by: str, drop_replicas: bool = False) -> bool:
    """Drain a node; `by` is ADMIN or WORKER (an admin's drain holds until an admin resumes)."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(q("node_drain"), node_id, by)
        if row and drop_replicas:
            await conn.execute(q("replicas_delete_for_node"), node_id)
        return row is not None


async def resume(pool: asyncpg.Pool, node_id: str, *, by_admin: bool) -> bool:
    """Back to healthy; False when unknown or (for a worker's call) drained by an admin."""
    return await pool.fetchrow(q("node_resume"), node_id, by_admin) is not None


async def rekey(pool: asyncpg.Pool, node_id: str) -> asyncpg.Record | None:
    """Forget a node's credential (its next registration gets a new one); None when unknown."""
    return await pool.fetchrow(q("node_rekey"), node_id)


async def credential_of(pool: asyncpg.Pool, node_id: str) -> str | None:
    """The node's credential hash ('' when it has none); None when the node is unknown."""
    value = await pool.fetchval(q("node_credential"), node_id)
    return None if value is None else str(value)


async def swap_status(
    pool: asyncpg.Pool, node_id: str, expected: str, status: str, *, drop_replicas: bool = False
) -> bool:
    """Compare-and-set a status: no change when someone else changed it since the caller looked."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(q("node_swap_status"), node_id, expected, status)
        if row and drop_replicas:
            await conn.execute(q("replicas_delete_for_node"), node_id)
        return row is not None


async def approve(pool: asyncpg.Pool, node_id: str) -> asyncpg.Record | None:
    """Approve a never-approved node; None when unknown or already approved."""
    return await pool.fetchrow(q("node_approve"), node_id)


async def delete(pool: asyncpg.Pool, node_id: str) -> bool:
    return await pool.fetchrow(q("node_delete"), node_id) is not None


async def expire_pending(
    conn: asyncpg.Connection, node_id: str, older_than_s: float
) -> asyncpg.Record | None:
    """Delete a never-approved node not heard of for `older_than_s` (durably); None when it is not (any more)."""
    return await conn.fetchrow(q("node_expire_pending"), node_id, older_than_s)


async def get(pool: asyncpg.Pool, node_id: str) -> asyncpg.Record | None:
    return await pool.fetchrow(q("node_by_id"), node_id)


async def listing(pool: asyncpg.Pool, node_id: str | None = None) -> list[asyncpg.Record]:
    """Nodes with `model_count`, `in_flight_count` and `labels` (a JSON object string)."""
    return list(await pool.fetch(q("nodes_list"), node_id))


async def for_health(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("nodes_for_health")))


async def set_max_replicas(pool: asyncpg.Pool, node_id: str, value: int) -> bool:
    async with pool.acquire() as conn, conn.transaction():
        if await conn.fetchrow(q("node_set_max_replicas"), node_id, value) is None:
            return False
        await conn.execute(q("label_upsert"), str(uuid.uuid4()), node_id, "node.replica-slots", str(value))
        return True


async def reset_max_replicas(pool: asyncpg.Pool, node_id: str) -> bool:
    return await pool.fetchrow(q("node_reset_max_replicas"), node_id) is not None
