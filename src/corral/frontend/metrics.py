"""`/metrics`: the Prometheus registry, which the OpenTelemetry Prometheus reader feeds
(`localai_control_plane_oldest_xmin_age` among others); `corral.loopwatch` registers
`corral_event_loop_stalls_total` and `corral_event_loop_max_stall_seconds` in it."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response


def build_metrics_router() -> APIRouter:
    router = APIRouter()

    @router.get("/metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return router
