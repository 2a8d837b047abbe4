"""Wire admin and API-key access into the app: the access layer and the admin routers."""

from __future__ import annotations

from fastapi import FastAPI

from corral.frontend.access import AccessControl, ASGIApp, KeyCache
from corral.frontend.admin.keys import build_keys_router
from corral.frontend.admin.labels import build_admin_labels_router
from corral.frontend.admin.model_gallery import build_model_gallery_router
from corral.frontend.admin.nodes import build_admin_nodes_router
from corral.frontend.admin.traffic import build_traffic_router
from corral.frontend.metrics import build_metrics_router
from corral.frontend.state import FrontendState
from corral.nodes.events import NodeListener
from corral.routing.router import Router


def access_control(inner: ASGIApp, state: FrontendState, cache: KeyCache) -> AccessControl:
    """The access layer around `inner` (frontend/app.py puts it outside the FastAPI app)."""
    lifecycle = state.lifecycle
    return AccessControl(
        inner,
        cache=cache,
        user_auth=bool(lifecycle and lifecycle.user_auth),
        metrics_token=lifecycle.metrics_token if lifecycle is not None else "",
        throttle=state.admission.throttle,
        limits=state.key_limits,
    )


def install_admin(app: FastAPI, state: FrontendState, cache: KeyCache) -> None:
    """Include last: `/api/nodes/{uuid}` routes never shadow other `/api/nodes/<word>` routers anyway.
    `cache`: the API-key cache `access_control` reads; its `evict` hears key revocations on every frontend
    (subscribed when the node lifecycle is built) and this one's at once."""
    app.include_router(build_admin_nodes_router(state))
    app.include_router(build_admin_labels_router(state))
    app.include_router(build_keys_router(state, on_revoked=cache.evict))
    app.include_router(build_metrics_router(state))
    app.include_router(build_traffic_router(state))  # issue 26: the Dashboard's series
    if state.model_gallery is not None:  # issue 26: /models/available, /models/apply, /models/jobs
        app.include_router(build_model_gallery_router(state, state.model_gallery))


def unhealthy_dropper(router: Router) -> NodeListener:
    """A node event listener: a node that left `healthy` (on any frontend) gets no more warm-path work
    from this one."""

    def drop_unhealthy(node_id: str, status: str) -> None:
        if status != "healthy":
            router.node_left(node_id)

    return drop_unhealthy
