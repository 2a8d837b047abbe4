"""A bug that reaches the client is an envelope naming the exception type, never a traceback."""

from __future__ import annotations

from typing import Annotated

import httpx
from fastapi import FastAPI, Path

from corral.frontend.errors import install_handlers


async def test_an_unexpected_exception_is_a_500_envelope_without_a_traceback() -> None:
    app = FastAPI()
    install_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise ValueError("secret detail from deep inside")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://frontend") as client:
        response = await client.get("/boom")
    assert response.status_code == 500
    assert response.json() == {"error": {"message": "internal error: ValueError", "type": "server_error", "code": 500}}
    assert "Traceback" not in response.text and "secret detail" not in response.text


async def test_a_path_parameter_past_its_bound_names_the_parameter_not_its_location() -> None:
    app = FastAPI()
    install_handlers(app)

    @app.get("/models/{name}")
    async def get(name: Annotated[str, Path(max_length=3)]) -> str:
        return name

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://frontend") as client:
        response = await client.get("/models/abcd")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "invalid request: field 'name': String should have at most 3 characters")
