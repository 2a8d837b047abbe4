"""Admin: model routes — `GET /api/routes`, `GET/PUT/DELETE /api/routes/<name>` (issue 25 item 4).

A route is a name clients send as `model`, served by weighted targets with ordered fallbacks
(models/routes.py). An edit is stored in PostgreSQL, applied to this frontend at once and announced
on NATS so every other frontend re-reads the table (frontend/route_sync.py). Admin auth is enforced
for the whole prefix by `access.AccessControl`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from corral.frontend.bounds import NAME_MAX
from corral.frontend.json_body import documented_body, json_body
from corral.frontend.route_sync import publish_routes_changed
from corral.frontend.state import FrontendState
from corral.models.routes import (
    DESCRIPTION_MAX,
    FALLBACKS_MAX,
    TARGETS_MAX,
    WEIGHT_MAX,
    ModelRoute,
    RouteInvalid,
    check_references,
    parse_route,
)
from corral.store import routes as routes_store
from corral.store.routes import RouteInUse

_NAME = {"type": "string", "minLength": 1, "maxLength": NAME_MAX}
ROUTE_BODY = documented_body(
    {
        "type": "object",
        "required": ["targets"],
        "properties": {
            "name": _NAME,
            "targets": {
                "type": "array",
                "minItems": 1,
                "maxItems": TARGETS_MAX,
                "items": {
                    "type": "object",
                    "required": ["model"],
                    "properties": {
                        "model": _NAME,
                        "weight": {"type": "number", "minimum": 0, "maximum": WEIGHT_MAX},
                    },
                },
            },
            "fallbacks": {"type": "array", "maxItems": FALLBACKS_MAX, "items": _NAME},
            "description": {"type": "string", "maxLength": DESCRIPTION_MAX},
        },
    }
)
RouteName = Annotated[str, Path(max_length=NAME_MAX)]  # model_routes.name varchar(255)


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": status, "message": message, "type": "invalid_request_error"}
    if param is not None:
        error["param"] = param
    return JSONResponse({"error": error}, status_code=status)


def _known_models(state: FrontendState) -> set[str]:
    return set(state.configs) | set(state.aliases)


def route_problems(route: ModelRoute, routes: Mapping[str, ModelRoute], models: set[str]) -> list[str]:
    """What keeps the route from working as written (a model deleted since, a model taking its name)."""
    problems = []
    if route.name in models:
        problems.append(f"a model or alias named {route.name!r} exists: requests for that name go to it")
    problems += [
        f"{name!r} is no longer a model, alias or route; requests skip it"
        for name in dict.fromkeys(route.references())
        if name not in models and name not in routes
    ]
    return problems


def route_view(route: ModelRoute, routes: Mapping[str, ModelRoute], models: set[str]) -> dict[str, Any]:
    total = route.total_weight
    return {
        "name": route.name,
        "targets": [
            {
                "model": t.model,
                "weight": t.weight,
                "share": round(100 * t.weight / total, 3) if total else 0.0,
            }
            for t in route.targets
        ],
        "fallbacks": list(route.fallbacks),
        "description": route.description,
        "updated_at": dt.datetime.fromtimestamp(route.updated_s, dt.UTC).isoformat(),
        "problems": route_problems(route, routes, models),
    }


async def _changed(state: FrontendState, name: str) -> dict[str, ModelRoute]:
    """This frontend at once; the others on the NATS event (or their next periodic re-read)."""
    routes = await routes_store.all_routes(state.pool)
    state.routes.replace(routes)
    await publish_routes_changed(state.nc, name)
    return routes


async def _put_route(state: FrontendState, name: str, request: Request) -> Any:
    try:
        body = await json_body(request)
    except ValueError:
        return _error(
            400, 'request body is not valid JSON; send {"targets": [{"model": "...", "weight": 1}]}', "body"
        )
    try:
        route = parse_route(name, body)
    except RouteInvalid as exc:
        return _error(400, f"invalid route: {exc}", exc.field)
    models = _known_models(state)
    try:
        await routes_store.upsert_checked(
            state.pool, route, lambda others: check_references(route, others, models)
        )
    except RouteInvalid as exc:
        return _error(400, f"invalid route: {exc}", exc.field)
    routes = await _changed(state, route.name)
    return route_view(routes[route.name], routes, models)


def build_routes_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/routes")

    @router.get("")
    async def list_routes() -> Any:
        routes = await routes_store.all_routes(state.pool)
        models = _known_models(state)
        return [route_view(r, routes, models) for r in routes.values()]

    @router.get("/{name:path}")
    async def get_route(name: RouteName) -> Any:
        routes = await routes_store.all_routes(state.pool)
        if name not in routes:
            return _error(404, f"no route {name!r}; create one with PUT /api/routes/{name}")
        return route_view(routes[name], routes, _known_models(state))

    @router.put("/{name:path}", openapi_extra=ROUTE_BODY)
    async def put_route(name: RouteName, request: Request) -> Any:
        return await _put_route(state, name, request)

    @router.delete("/{name:path}")
    async def delete_route(name: RouteName) -> Any:
        try:
            deleted = await routes_store.delete_unreferenced(state.pool, name)
        except RouteInUse as exc:
            return _error(
                409,
                f"route {name!r} is a target or fallback of route(s) {', '.join(exc.referrers)}; "
                "edit or delete them first",
                "name",
            )
        if not deleted:
            return _error(404, f"no route {name!r}")
        await _changed(state, name)
        return Response(status_code=204)

    return router
