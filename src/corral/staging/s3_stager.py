"""S3 mode, frontend side: put a file in the bucket (skipped when the same content is there), then ask
the worker over NATS ``nodes.<id>.files.ensure`` to fetch it into its cache and tell us its local path.

Progress: the bucket upload reports bytes as they go; the worker's fetch reports over a per-request
progress subject. A fetch with no progress for the stall window fails, naming the knob.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from corral.bus import subjects
from corral.bus.messages import ValidationError
from corral.staging.errors import ObjectStoreFailed
from corral.staging.messages import FILES_ENSURE, FileEnsureReply, FileEnsureRequest, FileProgress
from corral.staging.plan import PlannedFile
from corral.staging.s3 import ObjectStore

log = logging.getLogger(__name__)

ENSURE_REQUEST_TIMEOUT_S = 7 * 24 * 3600.0  # the real bound is the progress stall window below
STALL_POLL_S = 1.0

Report = Callable[[int, int], None]


@dataclass(frozen=True)
class S3Target:
    nc: Client
    node_id: str
    node_name: str
    stall_s: float


async def upload_to_bucket(
    store: ObjectStore, planned: PlannedFile, local_hash: str, on_bytes: Report
) -> int:
    """Make the bucket hold ``planned`` under its key; returns the bytes uploaded (0 when skipped)."""
    existing = await asyncio.to_thread(store.head, planned.key)
    if existing is not None and existing.sha256 == local_hash and existing.size_bytes == planned.size_bytes:
        on_bytes(planned.size_bytes, planned.size_bytes)
        log.info(
            "bucket %s already holds %s with sha256 %s; upload skipped", store.bucket, planned.key, local_hash
        )
        return 0
    loop = asyncio.get_running_loop()
    sent = [0]

    def on_chunk(count: int) -> None:  # boto3 threads
        sent[0] += count
        loop.call_soon_threadsafe(on_bytes, min(sent[0], planned.size_bytes), planned.size_bytes)

    on_bytes(0, planned.size_bytes)
    await asyncio.to_thread(store.upload, planned.local_path, planned.key, local_hash, on_chunk)
    return planned.size_bytes


async def ensure_on_worker(
    target: S3Target, planned: PlannedFile, local_hash: str, on_bytes: Report
) -> FileEnsureReply:
    """Ask the worker to fetch ``planned.key`` from the bucket; returns its reply (``local_path`` set)."""
    last_progress_s = [time.monotonic()]
    progress_subject = target.nc.new_inbox()

    async def on_progress(msg: Msg) -> None:
        try:
            event = FileProgress.from_json(msg.data)
        except ValidationError:
            return
        last_progress_s[0] = time.monotonic()
        on_bytes(event.bytes_done, event.total_bytes or planned.size_bytes)

    subscription = await target.nc.subscribe(progress_subject, cb=on_progress)
    request = FileEnsureRequest(key=planned.key, sha256=local_hash, progress_subject=progress_subject)
    subject = subjects.node_subject(target.node_id, FILES_ENSURE)
    call = asyncio.create_task(
        target.nc.request(subject, request.to_json(), timeout=ENSURE_REQUEST_TIMEOUT_S)
    )
    try:
        while not call.done():
            await asyncio.wait({call}, timeout=STALL_POLL_S)
            if not call.done() and time.monotonic() - last_progress_s[0] > target.stall_s:
                raise _failed(
                    target,
                    planned,
                    f"the worker reported no progress for {target.stall_s:g}s; "
                    "raise CORRAL_LOAD_STALL_WINDOW if its link to the bucket is slow",
                )
        try:
            msg = call.result()
        except NoRespondersError:
            raise _failed(
                target,
                planned,
                f"nobody answers {subject}: the worker is offline or not in S3 mode "
                "(set LOCALAI_STORAGE_URL and the other LOCALAI_STORAGE_* on the "
                "worker too)",
            ) from None
        except NatsTimeout:
            raise _failed(target, planned, f"no reply on {subject}") from None
        reply = FileEnsureReply.from_json(msg.data)
    finally:
        if not call.done():
            call.cancel()
        await subscription.unsubscribe()
    if reply.error or not reply.local_path:
        raise _failed(target, planned, reply.error or "the worker replied without a local_path")
    return reply


def _failed(target: S3Target, planned: PlannedFile, message: str) -> ObjectStoreFailed:
    return ObjectStoreFailed(
        f"S3 staging of {str(planned.local_path)!r} (key {planned.key!r}) to node "
        f"{target.node_name}: {message}"
    )
