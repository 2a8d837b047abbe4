"""The activity record over HTTP (admin), read from PostgreSQL: the same answer from every frontend, before
and after restarts.

* `GET /api/operations` — `{"operations": [...]}`: live backend and model operations (fan-out jobs with
  their per-node rows) and, in the reference's `staging:<model>` entry shape, model loads in progress.
* `GET /api/operations/history` — `{"operations": [OpRecord]}`: finished operations, newest first.
* `DELETE /api/operations/history` — clear history (the reference's route): deletes every finished
  operation for all frontends; live ones stay. `{"cleared": n}`; a database error is a 500, never
  a success that did not happen.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from corral.frontend.admin.operation_views import history_record, live_entry, staging_entry
from corral.frontend.state import FrontendState
from corral.store import operations
from corral.store.load_jobs import JobSnapshot
from corral.store.queries import q


def build_operations_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/operations")

    @router.get("")
    async def live() -> Any:
        entries = []
        for row in await operations.live(state.pool):
            kids = (
                await operations.children(state.pool, row["id"])
                if row["op_type"] == operations.FANOUT
                else None
            )
            entries.append(live_entry(row, kids))
        entries += [
            staging_entry(JobSnapshot.from_row(r)) for r in await state.pool.fetch(q("load_jobs_running"))
        ]
        return {"operations": entries}

    @router.get("/history")
    async def history() -> Any:
        return {"operations": [history_record(r) for r in await operations.history(state.pool)]}

    @router.delete("/history")
    async def clear() -> Any:
        return {"cleared": await operations.clear_history(state.pool)}

    return router
