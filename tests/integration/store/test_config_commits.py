"""Config edits to one model serialise on its row in PostgreSQL and take rising commit numbers in commit order."""

from __future__ import annotations

import asyncio

import asyncpg

from corral.store import revisions
from support.rows import present
from support.waiting import wait_for_async


async def _lock_waits(pool: asyncpg.Pool) -> bool:
    return bool(
        await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
    )


async def test_an_edit_holding_the_model_waits_out_another_and_both_commit_numbers_rise_in_commit_order(
    pool: asyncpg.Pool,
) -> None:
    await revisions.establish(pool, "m", "rev-0", "name: m\n")
    established = present(await revisions.get(pool, "m"))["config_seq"]
    first_read = asyncio.Event()
    release_first = asyncio.Event()
    order: list[tuple[str, str, int]] = []

    async def edit(label: str, revision: str, hold: bool) -> None:
        async with revisions.locked(pool, "m") as (conn, row):
            assert row is not None
            order.append((label, row["config_revision"], row["config_seq"]))  # the base this edit is made on
            if hold:
                first_read.set()
                await release_first.wait()
            seq, _ = await revisions.advance_on(conn, "m", revision, f"name: m\n# {revision}\n")
            order.append((label, revision, seq))

    first = asyncio.create_task(edit("first", "rev-1", hold=True))
    await first_read.wait()
    second = asyncio.create_task(edit("second", "rev-2", hold=False))
    await wait_for_async(lambda: _lock_waits(pool), "the second edit to wait on the model's row lock", 10)
    assert [label for label, _, _ in order] == ["first"]  # it has not read its base yet
    release_first.set()
    await asyncio.gather(first, second)
    (_, base_1, seq_0), (_, _, seq_1), (_, base_2, seq_1_seen), (_, _, seq_2) = order
    assert (base_1, seq_0) == ("rev-0", established)
    assert (base_2, seq_1_seen) == ("rev-1", seq_1)  # the second edit's base is the first's commit
    assert established < seq_1 < seq_2
    assert present(await revisions.get(pool, "m"))["config_revision"] == "rev-2"


async def test_reasserting_the_same_config_keeps_its_number_and_a_row_established_again_continues_above_it(
    pool: asyncpg.Pool,
) -> None:
    await revisions.advance(pool, "m", "rev-1", "name: m\n")
    seq = present(await revisions.get(pool, "m"))["config_seq"]
    await revisions.advance(pool, "m", "rev-1", "name: m\n")  # a load re-asserting the current revision
    assert present(await revisions.get(pool, "m"))["config_seq"] == seq
    await pool.execute("DELETE FROM model_config_states WHERE model_name = 'm'")  # the spec's manual reset
    await revisions.establish(pool, "m", "rev-1", "name: m\n")
    assert (await revisions.all_seqs(pool))["m"] > seq  # frontends holding `seq` still take what follows
