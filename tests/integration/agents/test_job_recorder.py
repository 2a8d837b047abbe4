"""The frontend's record of agent jobs (agents/recorder.py) on real PostgreSQL and NATS: a job's trace keeps
every entry its result counted, whatever order the bus delivers them in, and once, however many frontends
record it."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import nats
import pytest
from nats.aio.client import Client

from corral.agents.recorder import JobRecorder
from corral.bus import subjects
from corral.bus.agent_messages import JobProgress, JobResult
from corral.bus.messages import Message
from corral.store import agent_jobs
from support.waiting import wait_for_async

NODE = "agent-node-1"


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_url)
    yield nc
    await nc.close()


@pytest.fixture
async def recorders(pool: asyncpg.Pool, nats_url: str) -> AsyncIterator[list[JobRecorder]]:
    """Two recorders, as two frontends run them, on their own NATS connections."""
    started: list[tuple[JobRecorder, Client]] = []
    for _ in range(2):
        nc = await nats.connect(nats_url)
        recorder = JobRecorder(pool, nc)
        await recorder.start()
        await nc.flush()
        started.append((recorder, nc))
    yield [r for r, _ in started]
    for recorder, nc in started:
        await recorder.stop()
        await nc.close()


async def _job(pool: asyncpg.Pool) -> str:
    job_id = str(uuid.uuid4())
    await agent_jobs.insert(pool, job_id, "mcp-ci", "sim", "call add")
    return job_id


async def _send(bus: Client, subject: str, message: Message) -> None:
    await bus.publish(subject, message.to_json())
    await bus.flush()


async def _row(pool: asyncpg.Pool, job_id: str) -> dict[str, Any]:
    row = await agent_jobs.get(pool, job_id)
    assert row is not None
    return {**dict(row), "trace": json.loads(row["trace"])}


def _entry(job_id: str, seq: int, kind: str) -> JobProgress:
    return JobProgress(
        job_id=job_id, trace_type=kind, trace_content=f"{kind} {seq}", node_id=NODE, trace_seq=seq
    )


async def test_the_last_trace_entry_delivered_after_the_result_is_kept(
    pool: asyncpg.Pool, bus: Client, recorders: list[JobRecorder]
) -> None:
    job_id = await _job(pool)
    await _send(bus, subjects.job_progress(job_id), _entry(job_id, 1, "tool_call"))
    await wait_for_async(lambda: _traced(pool, job_id, 1), "the first entry recorded", 10)
    result = JobResult(job_id=job_id, status="completed", result="42", node_id=NODE, trace_count=2)
    await _send(bus, subjects.job_result(job_id), result)  # the result overtakes the last progress event
    await wait_for_async(lambda: _status(pool, job_id, "completed"), "the result recorded", 10)
    await _send(bus, subjects.job_progress(job_id), _entry(job_id, 2, "tool_result"))
    await wait_for_async(lambda: _traced(pool, job_id, 2), "the late last entry recorded", 10)
    row = await _row(pool, job_id)
    assert [(t["seq"], t["type"]) for t in row["trace"]] == [
        (1, "tool_call"),
        (2, "tool_result"),
    ]  # once each
    assert row["status"] == "completed" and row["result"] == "42" and row["trace_count"] == 2


async def test_entries_out_of_order_take_their_place_and_none_beyond_the_count_is_taken(
    pool: asyncpg.Pool, bus: Client, recorders: list[JobRecorder]
) -> None:
    job_id = await _job(pool)
    result = JobResult(job_id=job_id, status="failed", error="tool crashed", node_id=NODE, trace_count=3)
    await _send(bus, subjects.job_result(job_id), result)
    await wait_for_async(lambda: _status(pool, job_id, "failed"), "the result recorded", 10)
    for seq, kind in (
        (3, "tool_call"),
        (1, "tool_call"),
        (4, "tool_result"),
        (2, "tool_result"),
        (1, "tool_call"),
    ):
        await _send(bus, subjects.job_progress(job_id), _entry(job_id, seq, kind))
    await _send(
        bus, subjects.job_progress(job_id), JobProgress(job_id=job_id, status="running", node_id=NODE)
    )
    await _drained(pool, bus, len(recorders))
    row = await _row(pool, job_id)
    assert [t["seq"] for t in row["trace"]] == [1, 2, 3]  # seq 4 was never counted; seq 1 twice is kept once
    assert row["status"] == "failed"  # a late "running" does not reopen it


async def test_a_trace_without_sequence_numbers_is_kept_in_arrival_order_until_the_result(
    pool: asyncpg.Pool, bus: Client, recorders: list[JobRecorder]
) -> None:
    """A worker that numbers nothing (an older one): entries append as they come, as before."""
    job_id = await _job(pool)
    await agent_jobs.progress(pool, job_id, "running", NODE, {"type": "tool_call", "content": "a"})
    await agent_jobs.finish(pool, job_id, "completed", NODE, "done", "")
    await agent_jobs.progress(pool, job_id, "", NODE, {"type": "tool_result", "content": "late"})
    row = await _row(pool, job_id)
    assert row["trace"] == [{"type": "tool_call", "content": "a"}] and row["trace_count"] is None


async def _drained(pool: asyncpg.Pool, bus: Client, recorders: int) -> None:
    """Every recorder has handled what was sent before: each appends an unnumbered entry of a marker job,
    and a recorder handles its progress events in the order they were sent."""
    marker = await _job(pool)
    await _send(
        bus, subjects.job_progress(marker), JobProgress(job_id=marker, trace_type="marker", node_id=NODE)
    )
    await wait_for_async(lambda: _traced(pool, marker, recorders), "every recorder past the events sent", 10)


async def _traced(pool: asyncpg.Pool, job_id: str, count: int) -> bool:
    return len((await _row(pool, job_id))["trace"]) >= count


async def _status(pool: asyncpg.Pool, job_id: str, status: str) -> bool:
    current: str = (await _row(pool, job_id))["status"]
    return current == status
