"""The `loading` object of the 503 answer and of `/api/models/{id}/load-status` (reference §4.4)."""

from __future__ import annotations

import math
from typing import Any

from corral.loading.job_progress import STAGING
from corral.store.load_jobs import JobSnapshot

RETRY_AFTER_MIN_S = 5
RETRY_AFTER_MAX_S = 300
ETA_MIN_ELAPSED_S = 1.0


def progress_pct(job: JobSnapshot) -> float:
    """Percent over all files: ((file_index - 1) * 100 + current file %) / total_files."""
    if job.total_bytes <= 0:
        return 0.0
    file_pct = min(100.0, job.bytes_sent / job.total_bytes * 100.0)
    if job.total_files > 1 and job.file_index >= 1:
        return ((job.file_index - 1) * 100.0 + file_pct) / job.total_files
    return file_pct


def eta_s(job: JobSnapshot) -> float | None:
    """From the job's own transfer rate; None (omitted) until the rate means something."""
    if job.state != STAGING or not 0 < job.bytes_sent < job.total_bytes:
        return None
    if job.moving_s is None or job.moving_s < ETA_MIN_ELAPSED_S:
        return None
    rate_bps = job.bytes_sent / job.moving_s
    return (job.total_bytes - job.bytes_sent) / rate_bps


def loading_object(job: JobSnapshot) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": job.tracking_key,
        "state": job.state,
        "progress": round(progress_pct(job), 2),
        "bytes_sent": job.bytes_sent,
        "total_bytes": job.total_bytes,
        "file_index": job.file_index,
        "total_files": job.total_files,
    }
    if job.node_name:
        body["node"] = job.node_name
    if job.state == "failed" and job.last_error:
        body["error"] = job.last_error  # additive: the real cause, for followers (`corral models load`)
    eta = eta_s(job)
    if eta is not None:
        body["eta_seconds"] = round(eta, 1)
    if job.install:
        body["install"] = job.install  # the backend install on the node: phase, file, current/total, %
        if job.install.get("worker_busy"):
            body["worker_busy"] = True
    return body


def _eta_text(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"~{minutes}m" if minutes >= 1 else f"~{max(1, round(seconds))}s"


def loading_message(job: JobSnapshot) -> str:
    text = f"model {job.tracking_key} is {job.state}"
    if job.node_name:
        text += f" on node {job.node_name}"
    if job.install and job.install.get("worker_busy"):
        text += " (worker busy: still installing the backend)"
    if job.total_bytes > 0:
        text += f" ({progress_pct(job):.0f}%"
        eta = eta_s(job)
        text += f", ETA {_eta_text(eta)})" if eta is not None else ")"
    return text


def retry_after_s(job: JobSnapshot, wait_budget_s: float) -> int:
    eta = eta_s(job)
    base = eta if eta is not None else wait_budget_s
    return int(min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(base))))
