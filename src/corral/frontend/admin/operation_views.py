"""JSON views of activity-record rows: a job's status (reference `OpStatus` fields plus corral's per-node
rows and roll-up), a live operation (reference §4.5 entry shape) and a finished one (`OpRecord`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from corral.loading.request_status import progress_pct
from corral.store import operations
from corral.store.load_jobs import JobSnapshot

QUEUED, DOWNLOADING, BUSY, DONE, FAILED = "Queued", "Downloading", "Worker busy", "Done", "Failed"
WORKING = {
    operations.BACKEND_INSTALL: "Installing",
    operations.BACKEND_UPGRADE: "Upgrading",
    operations.BACKEND_DELETE: "Deleting",
}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def state_label(row: asyncpg.Record) -> str:
    """What an operator sees for one row (hints such as progress never decide Done or Failed)."""
    status = row["status"]
    if status == operations.COMPLETED:
        return DONE
    if status in (operations.FAILED, operations.CANCELLED):
        return FAILED
    if row["worker_busy"]:
        return BUSY
    if status == operations.DOWNLOADING:
        return DOWNLOADING
    if status == operations.PROCESSING:
        return WORKING.get(row["op_type"], "Running")
    return QUEUED


def node_row(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "jobID": row["id"],
        "node_id": row["node_id"],
        "node_name": row["node_name"],
        "backend": row["gallery_element_name"],
        "op_type": row["op_type"],
        "state": state_label(row),
        "status": row["status"],
        "phase": row["phase"],
        "file_name": row["file_name"],
        "downloaded_file_size": row["downloaded_file_size"],
        "total_file_size": row["total_file_size"],
        "progress": round(float(row["progress"]) * 100, 1),
        "error": row["error"] or None,
        "message": row["message"],
        "attempts": int(row["attempts"]),
        "retrying": row["status"] == operations.FAILED and row["finished_at"] is None,
        "worker_busy": bool(row["worker_busy"]),
        "started_at": _iso(row["started_at"]),
        "finished_at": _iso(row["finished_at"]),
    }


def rollup(kids: list[asyncpg.Record]) -> dict[str, Any]:
    done = sum(1 for k in kids if k["status"] == operations.COMPLETED)
    failed = sum(1 for k in kids if k["finished_at"] is not None and k["status"] != operations.COMPLETED)
    busy = sum(1 for k in kids if k["finished_at"] is None and k["worker_busy"])
    summary = f"{done} of {len(kids)} nodes done"
    if failed:
        summary += f", {failed} failed"
    if busy:
        summary += f", {busy} worker(s) busy"
    return {
        "summary": summary,
        "done": done,
        "failed": failed,
        "busy": busy,
        "total": len(kids),
        "nodes": [node_row(k) for k in kids],
    }


def job_view(row: asyncpg.Record, kids: list[asyncpg.Record] | None = None) -> dict[str, Any]:
    """`GET /api/backends/job/<id>`: the reference's job fields, corral's row fields, and for a fan-out
    job the roll-up over its nodes."""
    finished = row["finished_at"] is not None
    view: dict[str, Any] = {
        "deletion": row["op_type"] in (operations.BACKEND_DELETE, operations.MODEL_DELETE),
        "file_name": row["file_name"],
        "error": row["error"] or None,
        "processed": finished,
        "message": row["message"],
        "progress": round(float(row["progress"]) * 100, 1),
        "total_file_size": row["total_file_size"],
        "downloaded_file_size": row["downloaded_file_size"],
        "gallery_element_name": row["gallery_element_name"],
        "cancellable": bool(row["cancellable"]),
        **node_row(row),
    }
    if kids is not None:
        view.update(rollup(kids))
        view["progress"] = round(sum(float(k["progress"]) for k in kids) / max(1, len(kids)) * 100, 1)
        view["message"] = view["summary"]
    return view


def live_entry(row: asyncpg.Record, kids: list[asyncpg.Record] | None = None) -> dict[str, Any]:
    """One `GET /api/operations` entry (the reference's live shape), plus `state` and `error`."""
    entry: dict[str, Any] = {
        "id": row["id"],
        "name": row["gallery_element_name"],
        "fullName": row["gallery_element_name"],
        "jobID": row["id"],
        "progress": int(float(row["progress"]) * 100),
        "taskType": row["op_type"],
        "isDeletion": row["op_type"] in (operations.BACKEND_DELETE, operations.MODEL_DELETE),
        "isBackend": bool(row["is_backend_op"]),
        "isQueued": row["status"] == operations.PENDING,
        "cancellable": bool(row["cancellable"]),
        "message": row["message"],
        "nodeName": row["node_name"],
        "phase": row["phase"] or None,
        "currentBytes": int(row["current_bytes"]),
        "totalBytes": int(row["total_bytes"]),
        "state": state_label(row),
        "error": row["error"] or None,
    }
    if row["node_id"]:
        entry["nodeID"] = row["node_id"]
    if kids is not None:
        up = rollup(kids)
        entry.update(
            message=up["summary"],
            nodes=up["nodes"],
            progress=int(sum(float(k["progress"]) for k in kids) / max(1, len(kids)) * 100),
        )
    return {k: v for k, v in entry.items() if v is not None or k in ("error",)}


def staging_entry(job: JobSnapshot) -> dict[str, Any]:
    """A model load in progress, in the reference's `staging:<model>` entry shape (§4.5)."""
    entry: dict[str, Any] = {
        "id": f"staging:{job.tracking_key}",
        "name": job.tracking_key,
        "fullName": job.tracking_key,
        "jobID": f"staging:{job.tracking_key}",
        "progress": int(progress_pct(job)),
        "taskType": "staging",
        "isDeletion": False,
        "isBackend": False,
        "isQueued": False,
        "cancellable": False,
        "message": f"{job.state} {job.tracking_key}" + (f" on {job.node_name}" if job.node_name else ""),
        "nodeName": job.node_name,
        "phase": job.state,
        "currentBytes": job.bytes_sent,
        "totalBytes": job.total_bytes,
    }
    if job.node_id:
        entry["nodeID"] = job.node_id
    return entry


def history_record(row: asyncpg.Record) -> dict[str, Any]:
    """One finished operation (the reference's `OpRecord`), plus its message."""
    record: dict[str, Any] = {
        "id": row["id"],
        "name": row["gallery_element_name"],
        "jobID": row["id"],
        "isBackend": bool(row["is_backend_op"]),
        "taskType": row["op_type"],
        "outcome": row["status"],
        "startedAt": _iso(row["started_at"] or row["created_at"]),
        "finishedAt": _iso(row["finished_at"]),
        "message": row["message"],
        "nodeName": row["node_name"],
    }
    if row["node_id"]:
        record["nodeID"] = row["node_id"]
    if row["error"]:
        record["error"] = row["error"]
    return record
