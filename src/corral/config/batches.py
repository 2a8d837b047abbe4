"""Settings of the Files and Batch APIs (/v1/files, /v1/batches), mixed into the frontend's settings (issue 25).

File bodies live in PostgreSQL (frontend/inference/files.py says why), so no directory is configured: any
frontend serves any file.
"""

from __future__ import annotations

from corral.config.parse import parse_positive_duration_s, parse_positive_int
from corral.config.settings import setting, settings_class
from corral.config.sizes import parse_size_bytes


def _positive_size(raw: str) -> int:
    size = parse_size_bytes(raw)
    if size <= 0:
        raise ValueError(f"{raw!r} must be a positive size, e.g. 100MiB")
    return size


@settings_class
class FrontendBatchSettings:
    """the Files and Batch APIs (/v1/files, /v1/batches)."""

    files_max_bytes: int = setting(
        "--files-max-bytes",
        "CORRAL_FILES_MAX_BYTES",
        default=100 << 20,
        parse=_positive_size,
        help="largest file one POST /v1/files takes (413 past it); kept in PostgreSQL",
    )
    batch_max_requests: int = setting(
        "--batch-max-requests",
        "CORRAL_BATCH_MAX_REQUESTS",
        default=50_000,
        parse=parse_positive_int,
        help="most request lines one batch's input file may hold (OpenAI's bound by default)",
    )
    batch_concurrency: int = setting(
        "--batch-concurrency",
        "CORRAL_BATCH_CONCURRENCY",
        default=2,
        parse=parse_positive_int,
        help="batch request lines this frontend runs at once (at the lowest priority class, 'batch')",
    )
    batch_poll_interval_s: float = setting(
        "--batch-poll-interval",
        "CORRAL_BATCH_POLL_INTERVAL",
        default=2.0,
        parse=parse_positive_duration_s,
        help="how often an idle frontend looks for batch work (new batches, lines, batches to finish)",
    )
    batch_lease_s: float = setting(
        "--batch-lease",
        "CORRAL_BATCH_LEASE",
        default=60.0,
        parse=parse_positive_duration_s,
        help="a running batch line's claim, renewed while it runs; a killed frontend's lines are run again "
        "by another after it lapses",
    )
    files_sweep_interval_s: float = setting(
        "--files-sweep-interval",
        "CORRAL_FILES_SWEEP_INTERVAL",
        default=60.0,
        parse=parse_positive_duration_s,
        help="how often a frontend deletes the files past their expires_after (an expired file is answered as "
        "deleted at once; this only frees the space)",
    )
