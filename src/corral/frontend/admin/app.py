"""Wire admin and API-key access into the app: the access layer and the admin routers."""

from __future__ import annotations

from fastapi import FastAPI

from corral.frontend.access import AccessControl, ASGIApp, KeyCache
from corral.frontend.admin.keys import build_keys_router
from corral.frontend.admin.labels import build_admin_labels_router
from corral.frontend.admin.nodes import build_admin_nodes_router
from corral.frontend.metrics import build_metrics_router
from corral.frontend.state import FrontendState


def access_control(inner: ASGIApp, state: FrontendState, cache: KeyCache) -> AccessControl:
    """The access layer around `inner` (frontend/app.py puts it outside the FastAPI app)."""
    lifecycle = state.lifecycle
    return AccessControl(
        inner,
        cache=cache,
        user_auth=bool(lifecycle and lifecycle.user_auth),
        metrics_token=lifecycle.metrics_token if lifecycle is not None else "",
        throttle=state.admission.throttle,
    )


def install_admin(app: FastAPI, state: FrontendState) -> KeyCache:
    """Include last: `/api/nodes/{uuid}` routes never shadow other `/api/nodes/<word>` routers anyway.
    Returns the key cache for `access_control`."""
    lifecycle = state.lifecycle
    cache = KeyCache(state.pool)
    app.include_router(build_admin_nodes_router(state))
    app.include_router(build_admin_labels_router(state))
    app.include_router(build_keys_router(state, on_revoked=cache.evict))
    app.include_router(build_metrics_router(state))
    if lifecycle is not None:
        lifecycle.events.key_revoked_listeners.append(cache.evict)
        lifecycle.events.listeners.append(lambda node_id, status: _drop_unhealthy(state, node_id, status))
    return cache


def _drop_unhealthy(state: FrontendState, node_id: str, status: str) -> None:
    """A node that left `healthy` (on any frontend) gets no more warm-path work from this one."""
    if status != "healthy":
        state.router.view.remove_node(node_id)
