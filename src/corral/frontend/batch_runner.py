"""The batch runner: every frontend runs one; together they run every batch (/v1/batches) to its end.

One pass (`run_periodic`, every CORRAL_BATCH_POLL_INTERVAL, at once after a line finishes) does three things,
each claimed with `FOR UPDATE SKIP LOCKED` so frontends share the work without meeting:

1. validate the oldest `validating` batch: its input file is read a chunk at a time and checked off the loop
   (batch_input.py); it becomes `in_progress` with its lines pending, or `failed` with the errors naming their
   lines — in one transaction, so a frontend killed half way leaves the batch to the next one;
2. claim pending lines up to CORRAL_BATCH_CONCURRENCY running here, each under a lease (CORRAL_BATCH_LEASE)
   renewed while it runs: a killed frontend's lines are run again by another once their lease lapses (a
   frontend that stops in order hands them back at once). A line runs through this frontend's own inference
   handlers in process (the fast path's table, no HTTP, no second implementation) as the batch's caller at
   priority class "batch", so the router queue serves it after every interactive request. Its answer is
   written as soon as it finishes, and counted in the batch's request_counts;
3. finish the oldest batch whose lines are all done, or that is cancelling or past its window, once none of
   its lines runs on a live lease: its output file (2xx answers) and error file (the rest, and the lines it
   never ran) are written in line order (kept `output_expires_after` when given), and it ends completed,
   cancelled or expired;
4. at most every CORRAL_FILES_SWEEP_INTERVAL, delete the files past their `expires_after` (reads hide them at once).

A line is answered by the same code as an HTTP request, so its errors are the API's: an unknown model is a 404
line in the error file. It runs as the API key that created the batch, with that key's policy as it is now
(looked up by id at most every POLICY_TTL_S): a model outside the key's list is a 403 line, a revoked key's
lines fail with 401, a key past its token quota gets 429 insufficient_quota lines, and a key at its rate limit
makes its lines wait for the window (a batch has a day, not a client holding a connection). What stays out:
the body limit and frontend concurrency of HTTP requests (a line is bounded by its batch's checks and
CORRAL_BATCH_CONCURRENCY).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from corral.frontend.batch_input import InputCheck
from corral.frontend.inference.fast_path import FastPath
from corral.frontend.inference.openai import inference_table
from corral.frontend.state import FrontendState
from corral.runtime.loops import run_periodic
from corral.store import api_keys
from corral.store import batches as store
from corral.tenancy.caller import CURRENT, Caller
from corral.tenancy.limits import Limits
from corral.tenancy.policy import CURRENT_POLICY, KeyPolicy, policy_of

log = logging.getLogger(__name__)

PRIORITY = "batch"
POLICY_TTL_S = 10.0  # a batch key's policy is looked up again after this (a revoked key stops its lines)
OVER_QUOTA = "insufficient_quota"
LINES_PER_COPY = 2000  # validated lines stored per COPY while the input file is read
SWEEP_BATCH = 500  # expired files deleted per statement
Scope = dict[str, Any]
Message = dict[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]
NOT_RUN = {
    "expired": ("batch_expired", "This request could not be executed before the completion window expired."),
    "cancelled": ("batch_cancelled", "This request was not executed: the batch was cancelled."),
}


class _Invalid(Exception):
    """The input file failed validation (its errors are on the InputCheck)."""


@dataclass(frozen=True)
class BatchRunnerSettings:
    concurrency: int = 2  # CORRAL_BATCH_CONCURRENCY
    poll_interval_s: float = 2.0  # CORRAL_BATCH_POLL_INTERVAL
    lease_s: float = 60.0  # CORRAL_BATCH_LEASE
    max_requests: int = 50_000  # CORRAL_BATCH_MAX_REQUESTS
    sweep_interval_s: float = 60.0  # CORRAL_FILES_SWEEP_INTERVAL

    @classmethod
    def from_settings(cls, settings: Any) -> BatchRunnerSettings:
        return cls(
            settings.batch_concurrency,
            settings.batch_poll_interval_s,
            settings.batch_lease_s,
            settings.batch_max_requests,
            settings.files_sweep_interval_s,
        )


async def _no_route(scope: Scope, receive: Any, send: Callable[[Message], Awaitable[None]]) -> None:
    body = b'{"error":{"message":"not an inference route","type":"invalid_request_error","code":"not_found"}}'
    await send(
        {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


async def call_in_process(app: ASGIApp, path: str, body: bytes) -> tuple[int, bytes]:
    """POST `body` to `path` of `app` as an HTTP request would: (status, whole response body)."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("batch-runner", 0),
        "server": ("batch-runner", 0),
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    never = asyncio.Event()  # nobody disconnects: the runner waits for the whole answer
    status, parts = 500, []

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(parts)


def _tokens(body: Any) -> tuple[int, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return (prompt if isinstance(prompt, int) else 0), (completion if isinstance(completion, int) else 0)


def result_line(custom_id: str, status: int, raw: bytes) -> tuple[bool, str, tuple[int, int]]:
    """(answered 2xx, the output-file line, (input, output) tokens) of one answered line."""
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = raw.decode("utf-8", "replace")
    line = {
        "id": f"batch_req_{secrets.token_hex(12)}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": f"req_{secrets.token_hex(12)}", "body": body},
        "error": None,
    }
    ok = 200 <= status < 300
    return ok, orjson.dumps(line).decode(), _tokens(body) if ok else (0, 0)


def error_line(custom_id: str, code: str, message: str) -> str:
    return orjson.dumps(
        {
            "id": f"batch_req_{secrets.token_hex(12)}",
            "custom_id": custom_id,
            "response": None,
            "error": {"code": code, "message": message},
        }
    ).decode()


class _FileWriter:
    """One output file written a chunk at a time inside the finishing transaction; no row when nothing is added."""

    def __init__(
        self, conn: asyncpg.Connection, owner: str, filename: str, expires_s: float | None = None
    ) -> None:
        self.conn, self.owner, self.filename, self.expires_s = conn, owner, filename, expires_s
        self.file_id: str | None = None
        self.buffer, self.seq, self.size = bytearray(), 0, 0

    async def add(self, line: str) -> None:
        if self.file_id is None:
            self.file_id = f"file-{secrets.token_hex(12)}"
            await store.new_file(
                self.conn, self.file_id, self.owner, self.filename, "batch_output", self.expires_s
            )
        self.buffer += line.encode() + b"\n"
        if len(self.buffer) >= store.CHUNK_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        if self.file_id is None:
            return
        await store.add_chunk(self.conn, self.file_id, self.seq, bytes(self.buffer))
        self.seq, self.size = self.seq + 1, self.size + len(self.buffer)
        self.buffer.clear()

    async def close(self) -> str | None:
        if self.file_id is not None:
            if self.buffer:
                await self._flush()
            await store.set_file_bytes(self.conn, self.file_id, self.size)
        return self.file_id


class BatchRunner:
    def __init__(
        self, pool: asyncpg.Pool, app: ASGIApp, settings: BatchRunnerSettings, limits: Limits | None = None
    ) -> None:
        self.pool, self.app, self.settings, self.limits = pool, app, settings, limits
        self._policies: dict[str, tuple[KeyPolicy | None, float]] = {}  # key id -> (policy, looked up at)
        self.owner = f"frontend-{uuid.uuid4()}"  # the lease holder's name in batch_lines
        self.running: set[asyncio.Task[None]] = set()
        self.wake = asyncio.Event()
        self._next_sweep = 0.0  # monotonic time of the next expired-file sweep

    @classmethod
    def for_frontend(cls, state: FrontendState, settings: BatchRunnerSettings) -> BatchRunner:
        """Lines run through the frontend's own inference handlers (the fast path's table)."""
        return cls(state.pool, FastPath(_no_route, inference_table(state)), settings, state.key_limits)

    async def run(self, stop: asyncio.Event) -> None:
        renew = asyncio.create_task(
            run_periodic(
                "batch lease renewal", self._renew, self.settings.lease_s / 3, stop, delay_first=True
            ),
            name="batch-lease-renewal",
        )
        try:
            await run_periodic(
                "batch runner", self.run_once, self.settings.poll_interval_s, stop, wake=self.wake
            )
        finally:
            renew.cancel()
            await self._hand_back()

    async def run_once(self) -> None:
        """One pass: validate a batch, claim lines for the free slots, finish a batch; now and then, delete
        expired files."""
        if await self._validate_one():
            self.wake.set()
        await self._claim()
        if await self._finish_one():
            self.wake.set()
        await self._sweep()

    async def _sweep(self) -> None:
        """Delete expired files (reads already treat them as deleted), at most every CORRAL_FILES_SWEEP_INTERVAL."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.settings.sweep_interval_s
        gone = await store.delete_expired_files(self.pool, SWEEP_BATCH)
        if gone:
            log.info("deleted %d expired file(s)", len(gone))
            if len(gone) == SWEEP_BATCH:
                self._next_sweep = now  # more are due: the next pass goes on

    async def _renew(self) -> None:
        if self.running:
            await store.renew(self.pool, self.owner, self.settings.lease_s)

    async def _hand_back(self) -> None:
        for task in self.running:
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
        try:
            await store.release(self.pool, self.owner)
        except (OSError, asyncpg.PostgresError) as exc:  # their leases lapse instead
            log.warning("batch runner: could not hand back its running lines: %s", exc)

    async def _validate_one(self) -> bool:
        async with self.pool.acquire() as conn, conn.transaction():
            batch = await store.claim_validating(conn)
            if batch is None:
                return False
            check = InputCheck(batch["endpoint"], self.settings.max_requests)
            try:
                async with (
                    conn.transaction()
                ):  # a savepoint: the lines stored so far go when a later one fails
                    async for chunk in store.file_chunks(conn, batch["input_file_id"]):
                        await asyncio.to_thread(check.feed, chunk)
                        if len(check.lines) >= LINES_PER_COPY:
                            await store.add_lines(conn, batch["id"], check.take_lines())
                    await asyncio.to_thread(check.close)
                    if check.failed:
                        raise _Invalid
                    await store.add_lines(conn, batch["id"], check.take_lines())
                    await store.start(conn, batch["id"], check.total, check.model)
            except _Invalid:
                await store.fail(conn, batch["id"], orjson.dumps(check.errors_obj()).decode())
                log.info("batch %s failed validation: %d error(s)", batch["id"], check.errors_total)
                return True
            log.info("batch %s: %d request(s) to run", batch["id"], check.total)
            return True

    async def _claim(self) -> None:
        free = self.settings.concurrency - len(self.running)
        if free <= 0:
            return
        for row in await store.claim_lines(self.pool, self.owner, free, self.settings.lease_s):
            task = asyncio.create_task(
                self._run_line(row), name=f"batch-line-{row['batch_id']}-{row['line']}"
            )
            self.running.add(task)
            task.add_done_callback(self._line_ended)

    def _line_ended(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.warning("batch line %s could not be recorded: %s", task.get_name(), task.exception())

    async def _policy(self, key_id: str) -> KeyPolicy | None:
        """The live policy of a batch's key; None once it is revoked."""
        now = asyncio.get_running_loop().time()
        cached = self._policies.get(key_id)
        if cached is None or now - cached[1] > POLICY_TTL_S:
            row = await api_keys.access_by_id(self.pool, key_id)
            cached = (None if row is None else policy_of(row), now)
            self._policies[key_id] = cached
        return cached[0]

    async def _refusal(self, key_id: str) -> tuple[int, bytes] | None:
        """Run the line as its batch's key (this task's context only): None, or the answer that refuses it."""
        if not key_id:
            return None
        policy = await self._policy(key_id)
        if policy is None:
            message = "the API key that created this batch is revoked: its remaining requests do not run"
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
            return 401, orjson.dumps({"error": error})
        while policy.metered and self.limits is not None:
            refusal, _ = self.limits.admit(policy)
            if refusal is None:
                break
            if refusal.code == OVER_QUOTA:
                return 429, orjson.dumps(refusal.body)
            await asyncio.sleep(max(1, refusal.retry_after_s))  # a rate window: the line waits for it
        CURRENT.set(Caller(policy.billed_tenant, key_id, PRIORITY))
        CURRENT_POLICY.set(policy)
        return None

    async def _run_line(self, row: Any) -> None:
        CURRENT.set(Caller(row["tenant"], row["key_id"], PRIORITY))  # this task's context only
        try:
            answer = await self._refusal(row["key_id"])
            if answer is None:
                answer = await call_in_process(self.app, row["url"], row["body"].encode())
            ok, line, tokens = result_line(row["custom_id"], *answer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the fast path answers its own errors; this is a bug, recorded on the line
            log.exception("batch line %s/%s", row["batch_id"], row["line"])
            ok, line, tokens = False, error_line(row["custom_id"], "internal_error", str(exc)), (0, 0)
        await store.line_done(self.pool, row["batch_id"], row["line"], (ok, line), self.owner, tokens)

    async def _finish_one(self) -> bool:
        async with self.pool.acquire() as conn, conn.transaction():
            batch = await store.claim_finishing(conn)
            if batch is None:
                return False
            keep = batch["output_expires_s"]  # output_expires_after.seconds, or None: kept until deleted
            output = _FileWriter(conn, batch["owner"], f"{batch['id']}_output.jsonl", keep)
            errors = _FileWriter(conn, batch["owner"], f"{batch['id']}_error.jsonl", keep)
            status = "cancelled" if batch["status"] == "cancelling" else "completed"
            not_run: list[str] = []
            async for line in store.results(conn, batch["id"]):
                if line["done"]:
                    await (output if line["ok"] else errors).add(line["result"])
                else:
                    not_run.append(line["custom_id"])
            if not_run and status == "completed":
                status = "expired"  # lines left while not cancelling: the window closed
            if not_run:
                code, message = NOT_RUN[status]
                for custom_id in not_run:
                    await errors.add(error_line(custom_id, code, message))
            failed_at_end = len(not_run) if status == "expired" else 0
            await store.finish(
                conn, batch["id"], status, (await output.close(), await errors.close()), failed_at_end
            )
            log.info("batch %s %s", batch["id"], status)
            return True
