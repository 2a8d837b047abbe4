"""`/metrics`: the process's Prometheus registry (corral's families in `corral.telemetry.families`,
the OpenTelemetry xmin gauge `localai_control_plane_oldest_xmin_age`, the event-loop stall figures).

A scrape first refreshes the figures read at scrape time (`control.cluster_figures`: nodes, load
jobs, pool, in-flight per replica) on the event loop, then renders the text in a thread.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from corral.frontend.cluster_figures import ClusterFigures, activate
from corral.frontend.state import FrontendState


def build_metrics_router(state: FrontendState) -> APIRouter:
    router = APIRouter()
    figures = state.figures or ClusterFigures(state.pool, state.router.replicas.all)
    activate(figures)

    @router.get("/metrics")
    async def metrics() -> Response:
        await figures.refresh()
        return Response(await asyncio.to_thread(generate_latest, REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return router
