"""Model routes (`model_routes`): the source of truth every frontend re-reads (issue 25 item 4)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import asyncpg

from corral.models.routes import ModelRoute, RouteTarget
from corral.store.locks import KEY_MODEL_ROUTES
from corral.store.queries import q


class RouteInUse(Exception):
    """Other routes lead to this one; `referrers` names them (edit or delete them first)."""

    def __init__(self, referrers: list[str]) -> None:
        super().__init__(", ".join(referrers))
        self.referrers = referrers


def from_row(row: asyncpg.Record) -> ModelRoute:
    targets = json.loads(row["targets"])
    return ModelRoute(
        name=row["name"],
        targets=tuple(RouteTarget(str(t["model"]), float(t["weight"])) for t in targets),
        fallbacks=tuple(str(name) for name in json.loads(row["fallbacks"])),
        description=row["description"],
        updated_s=float(row["updated_s"]),
    )


async def _all(conn: asyncpg.Pool | asyncpg.Connection) -> dict[str, ModelRoute]:
    return {route.name: route for route in map(from_row, await conn.fetch(q("routes_all")))}


async def all_routes(pool: asyncpg.Pool) -> dict[str, ModelRoute]:
    return await _all(pool)


async def upsert_checked(
    pool: asyncpg.Pool, route: ModelRoute, check: Callable[[Mapping[str, ModelRoute]], None]
) -> ModelRoute:
    """Store `route` after `check(the other routes)` passes (it raises to refuse). Serialised by a
    transaction-scoped advisory lock, so two edits on two frontends cannot close a cycle between them."""
    body = route.to_json()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", KEY_MODEL_ROUTES)
        others = await _all(conn)
        others.pop(route.name, None)
        check(others)
        row = await conn.fetchrow(
            q("route_upsert"),
            route.name,
            json.dumps(body["targets"]),
            json.dumps(body["fallbacks"]),
            route.description,
        )
        return from_row(row)


async def delete_unreferenced(pool: asyncpg.Pool, name: str) -> bool:
    """Delete route `name` (False: there is none); RouteInUse when another route leads to it."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", KEY_MODEL_ROUTES)
        routes = await _all(conn)
        referrers = sorted(r.name for r in routes.values() if r.name != name and name in r.references())
        if referrers:
            raise RouteInUse(referrers)
        return await conn.fetchrow(q("route_delete"), name) is not None
