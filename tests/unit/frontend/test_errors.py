"""A bug that reaches the client is an envelope naming the exception type, never a traceback."""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI, Path
from pydantic import ValidationError

from corral.frontend.errors import install_handlers, validation_message
from corral.frontend.inference.schemas import ChatCompletionRequest


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
    assert response.json() == {
        "error": {"message": "internal error: ValueError", "type": "server_error", "code": 500}
    }
    assert "Traceback" not in response.text and "secret detail" not in response.text


async def test_a_path_parameter_past_its_bound_names_the_parameter_not_its_location() -> None:
    app = FastAPI()
    install_handlers(app)

    @app.get("/models/{name}")
    async def get(name: Annotated[str, Path(max_length=3)]) -> str:
        return name

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://frontend"
    ) as client:
        response = await client.get("/models/abcd")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "invalid request: field 'name': String should have at most 3 characters"
    )


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"tool_choice": "sometimes"}, "tool_choice"),  # was tool_choice.literal['none','auto','required']
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),  # was messages.0.content.str
        ({"stop": 5}, "stop"),
        ({"logit_bias": {"k": "x"}}, "logit_bias.k"),
    ],
)
def test_a_union_field_is_named_without_the_member_pydantic_tried(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
        )
    field, message = validation_message(caught.value)
    assert field == param and message.startswith(f"invalid request: field '{param}': ")
