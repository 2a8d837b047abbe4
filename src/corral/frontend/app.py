"""The frontend's FastAPI application, behind its plain ASGI layers.

A request meets, in order: `limits` (body size, concurrency), `access` (keys), `fast_path` (the /v1
inference routes, answered here), then Starlette's own stack (error middleware, routing) for every
other route. An inference request all three would pass straight through skips the first two
(`direct_path`: the HTTP server asks it when the request's headers are whole). The three layers sit
outside Starlette's stack rather than in it: its error middleware and app entry cost the inference
path a wrapper per send and two calls for nothing (~10 µs a request with the rest of the lean path,
benchmarks/routing_overhead.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from starlette.applications import Starlette

from corral import __version__
from corral.frontend.access import KeyCache
from corral.frontend.admin.agent_jobs import build_agent_jobs_router
from corral.frontend.admin.app import access_control, install_admin
from corral.frontend.admin.backend_logs import build_backend_logs_router
from corral.frontend.admin.events import EventHub, build_events_router
from corral.frontend.admin.model_configs import build_model_configs_router
from corral.frontend.admin.model_load import build_model_load_router
from corral.frontend.admin.models import build_models_router
from corral.frontend.admin.node_backends import build_node_backends_router
from corral.frontend.admin.node_models import build_node_models_router
from corral.frontend.admin.operations import build_operations_router
from corral.frontend.admin.resources import build_resources_router
from corral.frontend.admin.routes import build_routes_router
from corral.frontend.admin.scheduling import build_scheduling_router
from corral.frontend.admin.scheduling_rules import build_scheduling_rules_router
from corral.frontend.admin.usage import build_usage_router
from corral.frontend.admin.vram_budget import build_vram_budget_router
from corral.frontend.direct_path import DirectPath
from corral.frontend.errors import install_handlers
from corral.frontend.hot_path import HotPath
from corral.frontend.inference.agent_chat import build_mcp_router
from corral.frontend.inference.batches import build_batches_router
from corral.frontend.inference.disconnect import CancelOnDisconnect
from corral.frontend.inference.fast_path import FastPath
from corral.frontend.inference.files import build_files_router
from corral.frontend.inference.media import MEDIA_PATHS, build_media_router
from corral.frontend.inference.openai import build_openai_router, inference_table
from corral.frontend.inference.responses import build_responses_router
from corral.frontend.inference.routes import RouteHeaders, routed_table
from corral.frontend.limits import RequestLimits, RequestLimitsMiddleware
from corral.frontend.node_api.identity import NodeCredentials
from corral.frontend.node_api.routes import install_node_api
from corral.frontend.state import FrontendState
from corral.frontend.ui_routes import build_ui_router, load_assets
from corral.telemetry.labels import RequestFigures


def configured_name(state: FrontendState, model: str) -> str | None:
    """The configured model a requested name (or alias) answers to, else None (metrics label it `other`)."""
    if model in state.configs:
        return model
    target = state.aliases.get(model)
    return target if target in state.configs else None


class FrontendApp(FastAPI):
    """FastAPI whose ASGI entry is `front`: the plain layers, then Starlette's own entry (`inner`)."""

    front: RequestLimitsMiddleware  # the outermost plain layer, set by build_app
    direct: DirectPath  # the inference requests the layers would pass straight through (the HTTP server asks)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.front(scope, receive, send)

    async def inner(self, scope: Any, receive: Any, send: Any) -> None:
        await Starlette.__call__(self, scope, receive, send)


def build_app(
    state: FrontendState,
    limits: RequestLimits | None = None,
    *,
    keys: KeyCache | None = None,
    node_credentials: NodeCredentials | None = None,
) -> FastAPI:
    """`keys` and `node_credentials`: the caches the node lifecycle's events reach (build_frontend makes
    them before the lifecycle, which is given their listeners); fresh ones when not given."""
    keys = keys or KeyCache(state.pool)
    # FastAPI's native OpenTelemetry hooks cost ~10 µs per request even with no provider set; /metrics is ours.
    app = FrontendApp(
        title="corral",
        version=__version__,
        docs_url="/docs",
        redoc_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    install_handlers(app)
    install_node_api(app, state, node_credentials or NodeCredentials(state.pool))
    table = routed_table(state, inference_table(state))  # the fast path's and OpenAPI routes' handlers
    app.include_router(build_openai_router(state, table))
    app.include_router(build_responses_router(state))  # issue 22: the Responses API
    app.include_router(build_media_router(state))  # issue 23: audio, speech and images
    app.include_router(build_files_router(state))  # issue 25: the Files and Batch APIs
    app.include_router(build_batches_router(state))
    app.include_router(build_models_router(state))
    app.include_router(build_scheduling_router(state))  # before the admin routers' /api/nodes/{id}
    app.include_router(build_scheduling_rules_router(state))  # after it: /scheduling/explain keeps its route
    app.include_router(build_routes_router(state))  # issue 25: model routes
    app.include_router(build_usage_router(state))  # issue 25: usage per key x model x hour
    app.include_router(
        build_resources_router(state)
    )  # /api/resources, /api/models, /api/models/variants/<id>
    app.include_router(build_vram_budget_router(state))
    if state.config_revisions is not None:
        app.include_router(build_model_configs_router(state.config_revisions))
    app.include_router(build_model_load_router(state))
    if state.agents is not None:  # issue 13: MCP discovery and agent jobs on the agent workers
        app.include_router(build_mcp_router(state, state.agents))
    if state.agent_jobs is not None:
        app.include_router(build_agent_jobs_router(state, state.agent_jobs, state.mcp_max_iterations))
    app.include_router(build_events_router(EventHub(state.nc)))  # /api/events: the web UI's live hints
    app.include_router(build_ui_router(load_assets()))  # /app: the web UI
    if state.backend_ops is not None:  # issue 11: per-node backend and model operations, activity, logs
        for build in (
            build_node_backends_router,
            build_node_models_router,
            build_operations_router,
            build_backend_logs_router,
        ):
            app.include_router(build(state))
    install_admin(app, state, keys)  # issue 5: /api/nodes/*, /api/keys, /metrics, API-key access control
    # Body size and concurrency are bounded before auth and parsing; auth applies to the fast path too.
    fast = FastPath(
        RouteHeaders(CancelOnDisconnect(app.inner, MEDIA_PATHS), state),
        table,
        figures=RequestFigures(lambda model: configured_name(state, model)),
    )
    access = access_control(fast, state, keys)
    app.front = RequestLimitsMiddleware(access, limits=limits or RequestLimits())
    # their common case without the layers (direct_path.py), a warm chat request without a task (hot_path.py)
    app.direct = DirectPath(app.front, access, fast, HotPath(state, app.front, fast))

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse)
    async def readyz() -> PlainTextResponse:
        if not state.nc.is_connected:
            return PlainTextResponse("not ready: NATS connection is down", status_code=503)
        return PlainTextResponse("ok")

    return app
