"""Worker progress events reach the operation's row over real NATS and PostgreSQL — and never end it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import nats

from corral.bus import subjects
from corral.bus.messages import BackendInstallProgressEvent
from corral.nodes.backend_ops import ProgressRelay
from corral.store import operations


async def _row_when(
    pool: asyncpg.Pool, op_id: str, check: Callable[[asyncpg.Record], bool], timeout_s: float = 5.0
) -> asyncpg.Record:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        row = await operations.get(pool, op_id)
        if check(row) or asyncio.get_running_loop().time() > deadline:
            return row
        await asyncio.sleep(0.05)


async def test_progress_hints_are_shown_and_only_for_their_operation(
    pool: asyncpg.Pool, nats_url: str
) -> None:
    op = await operations.insert(
        pool, operations.NewOperation("simcopy", operations.BACKEND_INSTALL, "node-1", "w1")
    )
    await operations.start(pool, op["id"], "frontend", "installing")
    relay = ProgressRelay(pool, op["id"], "node-1")
    frontend, worker = await nats.connect(nats_url), await nats.connect(nats_url)
    try:
        subject = subjects.backend_install_progress("node-1", op["id"])
        await frontend.subscribe(subject, cb=relay.on_msg)
        await frontend.flush()
        for event in (
            BackendInstallProgressEvent(op_id="other-op", node_id="node-1", percentage=99),
            BackendInstallProgressEvent(op_id=op["id"], node_id="node-2", percentage=98),
        ):
            await worker.publish(subject, event.to_json())  # another operation's, another node's: ignored
        await worker.publish(subject, b"not json")
        await worker.publish(
            subject,
            BackendInstallProgressEvent(
                op_id=op["id"],
                node_id="node-1",
                backend="simcopy",
                file_name="run.sh",
                current="2 KB",
                total="4 KB",
                percentage=50.0,
                phase="downloading",
            ).to_json(),
        )
        row = await _row_when(pool, op["id"], lambda r: r["status"] == operations.DOWNLOADING)
        assert (
            row["status"],
            row["phase"],
            row["file_name"],
            row["downloaded_file_size"],
            row["total_file_size"],
            row["progress"],
        ) == (operations.DOWNLOADING, "downloading", "run.sh", "2 KB", "4 KB", 0.5)
        await worker.publish(
            subject,
            BackendInstallProgressEvent(
                op_id=op["id"], node_id="node-1", percentage=100.0, phase="starting"
            ).to_json(),
        )
        row = await _row_when(pool, op["id"], lambda r: r["phase"] == "starting")
        assert row["progress"] == 1.0 and row["finished_at"] is None  # a hint never ends an operation
    finally:
        await frontend.close()
        await worker.close()
