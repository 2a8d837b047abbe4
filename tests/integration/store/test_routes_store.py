"""Model routes in real PostgreSQL: stored and read back whole; two edits racing to close a cycle between
them cannot both pass the check (the advisory lock serialises check + write); a route another leads to
is not deleted."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import asyncpg
import pytest

from corral.models.routes import ModelRoute, RouteInvalid, RouteTarget, check_references
from corral.store import routes as routes_store
from corral.store.routes import RouteInUse

MODELS = {"a", "b"}


def _route(name: str, *targets: str, fallbacks: tuple[str, ...] = ()) -> ModelRoute:
    return ModelRoute(name, tuple(RouteTarget(t, 1.0) for t in targets), fallbacks, "")


async def _store(pool: asyncpg.Pool, route: ModelRoute) -> ModelRoute:
    def check(others: Mapping[str, ModelRoute]) -> None:
        check_references(route, others, MODELS)

    return await routes_store.upsert_checked(pool, route, check)


async def test_a_route_is_stored_and_read_back_whole(pool: asyncpg.Pool) -> None:
    route = ModelRoute("chat", (RouteTarget("a", 90.0), RouteTarget("b", 10.5)), ("b",), "canary")
    stored = await routes_store.upsert_checked(pool, route, lambda _others: None)
    assert stored == route
    assert stored.updated_s > 0
    assert await routes_store.all_routes(pool) == {"chat": route}


async def test_two_edits_racing_to_close_a_cycle_cannot_both_pass(pool: asyncpg.Pool) -> None:
    """Each alone is fine (x -> y, or y -> x); together a cycle. Unlocked, both checks could see the other
    absent; locked, the second sees the first and is refused."""
    # each names the other, so both must exist first: plain routes to models
    await routes_store.upsert_checked(pool, _route("x", "a"), lambda _others: None)
    await routes_store.upsert_checked(pool, _route("y", "b"), lambda _others: None)

    async def edit(route: ModelRoute) -> ModelRoute | RouteInvalid:
        def check(others: Mapping[str, ModelRoute]) -> None:
            check_references(route, others, MODELS)

        try:
            return await routes_store.upsert_checked(pool, route, check)
        except RouteInvalid as exc:
            return exc

    results = await asyncio.gather(edit(_route("x", "y")), edit(_route("y", "x")))
    refused = [r for r in results if isinstance(r, RouteInvalid)]
    assert len(refused) == 1
    assert "routes would form a cycle" in str(refused[0])


async def test_a_route_another_leads_to_is_not_deleted(pool: asyncpg.Pool) -> None:
    await _store(pool, _route("inner", "a"))
    await _store(pool, _route("outer", "b", fallbacks=("inner",)))
    with pytest.raises(RouteInUse) as caught:
        await routes_store.delete_unreferenced(pool, "inner")
    assert caught.value.referrers == ["outer"]
    assert await routes_store.delete_unreferenced(pool, "outer")
    assert await routes_store.delete_unreferenced(pool, "inner")
    assert not await routes_store.delete_unreferenced(pool, "inner")
