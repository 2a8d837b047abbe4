"""The Files and Batch APIs' rows (`batch_files`, `batch_file_chunks`, `batches`, `batch_lines`): files kept in
chunks, batches and their request lines. The decisions (validation, claiming, finishing) are the batch runner's
(frontend/batch_runner.py); these are the statements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TypeAlias

import asyncpg

from corral.store.queries import q

CHUNK_BYTES = 1 << 20  # one batch_file_chunks row
RESULTS_PAGE = 500  # batch lines read per statement when a batch is finished
Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool
Row: TypeAlias = asyncpg.Record


async def insert_file(
    conn: asyncpg.Connection,
    file_id: str,
    owner: str,
    filename: str,
    purpose: str,
    chunks: AsyncIterator[bytes],
    expires_s: float | None = None,
) -> int:
    """A file from its `chunks` (each at most CHUNK_BYTES), inside the caller's transaction; returns its size.
    An exception from `chunks` (too large, client gone) propagates: the transaction keeps nothing. It expires
    `expires_s` seconds from now (None: kept until deleted)."""
    await new_file(conn, file_id, owner, filename, purpose, expires_s)
    size, seq = 0, 0
    async for chunk in chunks:
        if chunk:
            await add_chunk(conn, file_id, seq, chunk)
            size += len(chunk)
            seq += 1
    await set_file_bytes(conn, file_id, size)
    return size


async def new_file(
    conn: asyncpg.Connection,
    file_id: str,
    owner: str,
    filename: str,
    purpose: str,
    expires_s: float | None = None,
) -> None:
    """A file's row, of 0 bytes until `set_file_bytes` (its chunks follow in the same transaction)."""
    await conn.execute(q("batch_file_insert"), file_id, owner, filename, purpose, 0, expires_s)


async def add_chunk(conn: asyncpg.Connection, file_id: str, seq: int, data: bytes) -> None:
    await conn.execute(q("batch_file_chunk_insert"), file_id, seq, data)


async def set_file_bytes(conn: asyncpg.Connection, file_id: str, size: int) -> None:
    await conn.execute(q("batch_file_set_bytes"), file_id, size)


async def file_row(conn: Conn, file_id: str, owner: str) -> Row | None:
    return await conn.fetchrow(q("batch_file_get"), file_id, owner)


async def files(
    conn: Conn, owner: str, purpose: str | None, after: str | None, limit: int, *, ascending: bool
) -> list[Row]:
    name = "batch_files_list_asc" if ascending else "batch_files_list_desc"
    return list(await conn.fetch(q(name), owner, purpose, after, limit))


async def file_chunks(conn: Conn, file_id: str) -> AsyncIterator[bytes]:
    """A file's bytes, one chunk (one statement) at a time."""
    seq = 0
    while True:
        data = await conn.fetchval(q("batch_file_chunk"), file_id, seq)
        if data is None:
            return
        yield bytes(data)
        seq += 1


async def delete_expired_files(conn: Conn, limit: int) -> list[str]:
    """Delete up to `limit` expired files with their chunks; their ids."""
    return [row["id"] for row in await conn.fetch(q("batch_files_expired_delete"), limit)]


async def delete_file(conn: Conn, file_id: str, owner: str) -> bool:
    return await conn.fetchval(q("batch_file_delete"), file_id, owner) is not None


async def insert_batch(
    conn: Conn,
    batch_id: str,
    owner: str,
    caller: tuple[str, str],
    request: tuple[str, str, str],
    window_s: float,
    metadata: str | None,
    output_expires_s: int | None = None,
) -> None:
    """`caller`: (tenant, key_id); `request`: (endpoint, input_file_id, completion_window)."""
    await conn.execute(
        q("batch_insert"), batch_id, owner, *caller, *request, window_s, metadata, output_expires_s
    )


async def batch_row(conn: Conn, batch_id: str, owner: str) -> Row | None:
    return await conn.fetchrow(q("batch_get"), batch_id, owner)


async def batches(conn: Conn, owner: str, after: str | None, limit: int) -> list[Row]:
    return list(await conn.fetch(q("batches_list"), owner, after, limit))


async def cancel(conn: Conn, batch_id: str, owner: str) -> bool:
    """Whether the batch was validating or running (it is cancelling now)."""
    return await conn.fetchval(q("batch_cancel"), batch_id, owner) is not None


async def claim_validating(conn: asyncpg.Connection) -> Row | None:
    """Inside a transaction: the oldest batch to validate, locked until the transaction ends."""
    return await conn.fetchrow(q("batch_claim_validating"))


async def add_lines(
    conn: asyncpg.Connection, batch_id: str, lines: Iterable[tuple[int, str, str, str]]
) -> None:
    """Pending lines: (line number, custom_id, url, body JSON text)."""
    await conn.copy_records_to_table(
        "batch_lines",
        records=[(batch_id, n, custom_id, url, body) for n, custom_id, url, body in lines],
        columns=["batch_id", "line", "custom_id", "url", "body"],
    )


async def start(conn: asyncpg.Connection, batch_id: str, total: int, model: str | None) -> None:
    await conn.execute(q("batch_start"), batch_id, total, model)


async def fail(conn: asyncpg.Connection, batch_id: str, errors_json: str) -> None:
    await conn.execute(q("batch_fail"), batch_id, errors_json)


async def claim_lines(pool: asyncpg.Pool, owner: str, limit: int, lease_s: float) -> list[Row]:
    return list(await pool.fetch(q("batch_lines_claim"), owner, limit, lease_s))


async def renew(pool: asyncpg.Pool, owner: str, lease_s: float) -> None:
    await pool.execute(q("batch_lines_renew"), owner, lease_s)


async def line_done(
    pool: asyncpg.Pool,
    batch_id: str,
    line: int,
    result: tuple[bool, str],
    owner: str,
    tokens: tuple[int, int],
) -> None:
    """`result`: (answered 2xx, output line); `tokens`: (input, output)."""
    await pool.execute(q("batch_line_done"), batch_id, line, *result, owner, *tokens)


async def claim_finishing(conn: asyncpg.Connection) -> Row | None:
    """Inside a transaction: the oldest batch ready to finish, locked until the transaction ends."""
    return await conn.fetchrow(q("batch_claim_finishing"))


async def results(conn: asyncpg.Connection, batch_id: str) -> AsyncIterator[Row]:
    """A batch's lines in order (line, custom_id, done, ok, result), a page of RESULTS_PAGE at a time."""
    after = 0
    while rows := await conn.fetch(q("batch_results"), batch_id, after, RESULTS_PAGE):
        for row in rows:
            yield row
        after = rows[-1]["line"]


async def finish(
    conn: asyncpg.Connection,
    batch_id: str,
    status: str,
    files: tuple[str | None, str | None],
    failed_at_end: int,
) -> None:
    """`files`: (output file id, error file id)."""
    await conn.execute(q("batch_finish"), batch_id, status, *files, failed_at_end)


async def release(pool: asyncpg.Pool, owner: str) -> None:
    """The lines `owner` is running, pending again (it stops before they finish)."""
    await pool.execute(q("batch_lines_release"), owner)
