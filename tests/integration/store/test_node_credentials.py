"""Node credentials and who-drained against a real PostgreSQL: a name is taken over only with its
credential, and an admin's drain outlives the worker's re-registrations and resume calls."""

from __future__ import annotations

import asyncio
import hashlib

import asyncpg
import pytest

from corral.store import nodes as node_store
from corral.store import replicas as replica_store
from support.rows import present

VICTIM = node_store.NodeFacts(name="victim", address="10.0.0.1:50051", http_address="10.0.0.1:50050")
ATTACKER = node_store.NodeFacts(name="victim", address="10.6.6.6:50051", http_address="10.6.6.6:50050")
KEY, OTHER = hashlib.sha256(b"victim-secret").hexdigest(), hashlib.sha256(b"other").hexdigest()


async def _victim(pool: asyncpg.Pool) -> asyncpg.Record:
    row = await node_store.register(
        pool, VICTIM, "", {"zone": "a"}, auto_approve=True, new_credential_hash=KEY
    )
    await replica_store.upsert(
        pool,
        node_id=row["id"],
        model="m",
        replica_index=0,
        address="10.0.0.1:50052",
        state=replica_store.LOADED,
        backend="simulator",
    )
    return row


@pytest.mark.parametrize("presented", ["", OTHER])  # no credential; another node's credential
async def test_a_known_name_without_its_credential_is_refused_and_nothing_changes(
    pool: asyncpg.Pool, presented: str
) -> None:
    first = await _victim(pool)
    with pytest.raises(node_store.CredentialMismatch) as refused:
        await node_store.register(
            pool,
            ATTACKER,
            "",
            {"zone": "evil"},
            auto_approve=True,
            credential_hash=presented,
            new_credential_hash=OTHER,
        )
    assert refused.value.node["id"] == first["id"]
    after = present(await node_store.get(pool, first["id"]))
    assert dict(after) == dict(first)  # address, status, credential, timestamps: all as they were
    assert [r["address"] for r in await replica_store.of_node(pool, first["id"])] == ["10.0.0.1:50052"]
    labels = {r["key"]: r["value"] for r in await pool.fetch("SELECT key, value FROM node_labels")}
    assert labels["zone"] == "a"


async def test_the_own_credential_re_registers_and_keeps_it(pool: asyncpg.Pool) -> None:
    first = await _victim(pool)
    moved = node_store.NodeFacts(name="victim", address="10.0.0.2:50051")
    again = await node_store.register(
        pool, moved, "", {}, auto_approve=True, credential_hash=KEY, new_credential_hash=OTHER
    )
    assert (again["id"], again["address"], again["credential_hash"]) == (first["id"], "10.0.0.2:50051", KEY)


async def test_a_re_keyed_node_takes_the_next_registrations_new_credential(pool: asyncpg.Pool) -> None:
    first = await _victim(pool)
    assert present(await node_store.rekey(pool, first["id"]))["name"] == "victim"
    assert await node_store.credential_of(pool, first["id"]) == ""
    again = await node_store.register(pool, VICTIM, "", {}, auto_approve=False, new_credential_hash=OTHER)
    assert (again["id"], again["credential_hash"], again["status"]) == (first["id"], OTHER, "healthy")
    assert await node_store.credential_of(pool, "00000000-0000-4000-8000-000000000000") is None


async def test_concurrent_first_registrations_of_one_name_give_one_node_and_one_credential(
    pool: asyncpg.Pool,
) -> None:
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(4)]
    results = await asyncio.gather(
        *(node_store.register(pool, VICTIM, "", {}, auto_approve=True, new_credential_hash=k) for k in keys),
        return_exceptions=True,
    )
    rows = [r for r in results if not isinstance(r, BaseException)]
    assert len(rows) == 1 and rows[0]["credential_hash"] in keys
    assert all(isinstance(r, node_store.CredentialMismatch) for r in results if r is not rows[0])


async def test_an_admin_drain_holds_across_re_registration_and_worker_resume(pool: asyncpg.Pool) -> None:
    node = await _victim(pool)
    assert await node_store.drain(pool, node["id"], by=node_store.WORKER)  # the worker's own drain ...
    again = await node_store.register(pool, VICTIM, "", {}, auto_approve=True, credential_hash=KEY)
    assert (again["status"], again["drained_by"]) == ("healthy", "")  # ... ends when it registers again
    assert await node_store.drain(pool, node["id"], by=node_store.ADMIN)
    assert await node_store.drain(pool, node["id"], by=node_store.WORKER)  # never replaces the admin's
    again = await node_store.register(pool, VICTIM, "", {}, auto_approve=True, credential_hash=KEY)
    assert (again["status"], again["drained_by"]) == ("draining", "admin")
    assert not await node_store.resume(pool, node["id"], by_admin=False)
    assert present(await node_store.get(pool, node["id"]))["status"] == "draining"
    assert await node_store.resume(pool, node["id"], by_admin=True)
    assert present(await node_store.get(pool, node["id"]))["status"] == "healthy"
