"""The HTTP server walks the app's routes once, off the event loop, before it listens."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from corral.runtime.httpserver import warm_up


def test_warm_up_matches_every_route_without_calling_a_handler() -> None:
    called: list[str] = []
    app = FastAPI()
    router = APIRouter(prefix="/v1")

    @router.post("/chat")
    async def chat() -> dict[str, str]:
        called.append("chat")
        return {}

    app.include_router(router)

    assert warm_up(app) == 404
    assert called == []


async def test_the_server_builds_the_openapi_schema_before_it_listens() -> None:
    from corral.runtime.httpserver import EmbeddedHTTPServer
    from corral.runtime.processes import free_port

    app = FastAPI()
    server = EmbeddedHTTPServer(app, "127.0.0.1", free_port(), name="test-http")
    await server.start()
    try:
        assert app.openapi_schema is not None
    finally:
        await server.stop()
