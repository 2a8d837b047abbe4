"""The Responses API: `POST /v1/responses` (unary and streamed), `GET` and `DELETE /v1/responses/{id}`,
`GET /v1/responses/{id}/input_items`.

A request runs as the chat completion it maps to (`responses_request`): the same PredictOptions
(`chat_wire.chat_options`), so tool calls, grammars and every other chat feature apply; its output is
reshaped into a response (`responses_events`). A response with `store` (the default) is kept in PostgreSQL
with the whole conversation up to it for CORRAL_RESPONSES_TTL, so a later `previous_response_id` continues
it; only the API key that created it sees it (another key, or none, gets a 404), and `store: false` keeps
nothing. Storing is one INSERT per response, after generation and before the answer (a streamed one: before
its `response.completed` event), so a follow-up sent the moment the answer arrives finds it. These routes are
served by FastAPI, not by the fast path: a Responses request pays routing and that INSERT, chat pays neither.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from corral.frontend.access import bearer
from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import (
    APIError,
    api_error_response,
    dependency_or_unexpected_response,
    validation_message,
)
from corral.frontend.inference.call_errors import http_errors
from corral.frontend.inference.chat_wire import chat_options
from corral.frontend.inference.disconnect import respond_until_disconnect
from corral.frontend.inference.openai import _RelayResponse, _unary, config_for
from corral.frontend.inference.responses_events import (
    Draft,
    EventWriter,
    input_items,
    items_page,
    unary_output,
)
from corral.frontend.inference.responses_request import (
    Message,
    ResponsesRequest,
    chat_body,
    check_metadata,
    check_nesting,
    input_messages,
)
from corral.frontend.inference.routes import route_plan, serve_route
from corral.frontend.inference.schemas import ChatCompletionRequest
from corral.frontend.inference.tool_calls import reply_tool_calls
from corral.frontend.json_body import InvalidText, documented_body, json_body
from corral.frontend.state import FrontendState
from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.routing import calls
from corral.routing.errors import BackendCallError, BackendTimeout
from corral.store import api_keys
from corral.store import responses as store

TTL_KNOB = "CORRAL_RESPONSES_TTL"
ITEMS_PAGE_MAX = 100  # input items per page, as OpenAI
_ID = re.compile(r"[A-Za-z0-9_-]+")
BODY_SCHEMA = documented_body(ResponsesRequest.model_json_schema())


def owner_of(request: Request) -> str:
    """Who may read a stored response: the sha256 of the request's API key ('' without one)."""
    key = bearer(dict(request.scope))
    return api_keys.key_hash(key) if key else ""


def _json(body: bytes | dict[str, Any]) -> Response:
    return Response(body if isinstance(body, bytes) else orjson.dumps(body), media_type="application/json")


def _stored_id(response_id: str) -> bool:
    """Whether an id can name a stored response (ours are `resp_` and hex); any other is answered without a
    lookup (PostgreSQL refuses a NUL, for one)."""
    return _ID.fullmatch(response_id) is not None


async def _request_body(request: Request) -> ResponsesRequest:
    """The body, parsed as the fast path parses chat (orjson: text that is not valid Unicode is a 400 naming
    its field, not a 500 from protobuf later) and validated as ResponsesRequest."""
    try:
        data = await json_body(request)
    except InvalidText as exc:
        raise APIError(400, str(exc), "invalid_request_error", "invalid_value", exc.field) from None
    except ValueError:
        raise APIError(
            400,
            "request body is not valid JSON; send a JSON object",
            "invalid_request_error",
            "invalid_value",
            "body",
        ) from None
    check_nesting(data)
    try:
        return ResponsesRequest.model_validate(data)
    except ValidationError as exc:  # answered as FastAPI answers a refused body
        raise RequestValidationError(exc.errors()) from None


def _not_found(response_id: str) -> APIError:
    return APIError(
        404,
        f"response {response_id!r} not found: unknown, deleted, created with another API key, "
        f"not stored (store: false) or past its retention ({TTL_KNOB})",
        "invalid_request_error",
        "not_found",
        "response_id",
    )


async def _history(state: FrontendState, body: ResponsesRequest, owner: str) -> list[Message]:
    if body.previous_response_id is None:
        return []
    text = (
        await store.messages(state.pool, body.previous_response_id, owner)
        if _stored_id(body.previous_response_id)
        else None
    )
    if text is None:
        raise APIError(
            400,
            f"previous response {body.previous_response_id!r} not found: unknown, deleted, created "
            f"with another API key, not stored (store: false) or past its retention ({TTL_KNOB})",
            "invalid_request_error",
            "previous_response_not_found",
            "previous_response_id",
        )
    return list(orjson.loads(text))


def _chat_request(body: ResponsesRequest, conversation: list[Message]) -> ChatCompletionRequest:
    if not conversation:
        raise APIError(
            400,
            "invalid request: field 'input': is empty; send a string or a list of input items",
            "invalid_request_error",
            "invalid_value",
            "input",
        )
    try:
        return ChatCompletionRequest.model_validate(chat_body(body, conversation))
    except ValidationError as exc:  # what the chat path refuses in what the input became
        field, message = validation_message(exc)
        raise APIError(400, message, "invalid_request_error", "invalid_value", field) from None


class _Keeper:
    """Stores a finished response (when asked to) with the conversation a follow-up continues."""

    def __init__(
        self, state: FrontendState, body: ResponsesRequest, owner: str, conversation: list[Message]
    ) -> None:
        self.state, self.body, self.owner, self.conversation = state, body, owner, conversation

    async def keep(self, draft: Draft) -> None:
        if self.body.store:
            await store.insert(
                self.state.pool,
                draft.id,
                self.owner,
                orjson.dumps(draft.obj()).decode(),
                orjson.dumps(input_items(self.body.input)).decode(),
                orjson.dumps(self.conversation + draft.messages()).decode(),
                self.state.responses_ttl_s,
            )


def build_responses_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.post("/responses", openapi_extra=BODY_SCHEMA)
    async def create(request: Request) -> Response:
        body = await _request_body(request)
        plan = route_plan(state, body.model)  # a model route: its targets, then its fallbacks (routes.py)
        cfg = config_for(state, body.model) if plan is None else None
        check_metadata(body.metadata)
        owner = owner_of(request)
        history = await _history(state, body, owner)
        conversation = history + input_messages(body.input, history)
        run = _stream if body.stream else _whole

        def serve(cfg: ModelConfig) -> Awaitable[Response]:
            opts, max_tokens = chat_options(cfg, _chat_request(body, conversation))
            draft = Draft(body, cfg.name, int(time.time()), body.tools)
            return run(state, cfg, opts, max_tokens, draft, _Keeper(state, body, owner, conversation))

        if cfg is not None:
            return _UntilDisconnect(partial(serve, cfg))
        candidates = plan or []

        async def serve_model(model: str) -> Response:  # before the first byte: a failure tries the next one
            return await serve(config_for(state, model))

        return _UntilDisconnect(lambda: serve_route(state, body.model, candidates, serve_model))

    async def stored(
        read: Callable[[Any, str, str], Awaitable[str | None]], response_id: str, request: Request
    ) -> str:
        """What `read` finds of a response of the request's key; 404 when there is none."""
        text = await read(state.pool, response_id, owner_of(request)) if _stored_id(response_id) else None
        if text is None:
            raise _not_found(response_id)
        return text

    @router.get("/responses/{response_id}")
    async def retrieve(response_id: Annotated[str, Path(max_length=NAME_MAX)], request: Request) -> Response:
        return _json((await stored(store.body, response_id, request)).encode())

    @router.get("/responses/{response_id}/input_items")
    async def list_input_items(
        response_id: Annotated[str, Path(max_length=NAME_MAX)],
        request: Request,
        order: Literal["asc", "desc"] = "desc",
        limit: Annotated[int, Query(ge=1, le=ITEMS_PAGE_MAX)] = 20,
        after: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
    ) -> Response:
        items = orjson.loads(await stored(store.input_items, response_id, request))
        return _json(items_page(items, order, limit, after))

    @router.delete("/responses/{response_id}")
    async def delete(response_id: Annotated[str, Path(max_length=NAME_MAX)], request: Request) -> Response:
        if not (_stored_id(response_id) and await store.delete(state.pool, response_id, owner_of(request))):
            raise _not_found(response_id)
        return _json({"id": response_id, "object": "response", "deleted": True})

    return router


class _UntilDisconnect(Response):
    """The generation, run as the response is sent: a client that leaves (unary or streamed) cancels it, and the
    backend call with it, as the fast path does for chat (`disconnect`). Errors are answered here, where
    FastAPI's handlers no longer reach."""

    def __init__(self, produce: Callable[[], Awaitable[Response]]) -> None:
        self.status_code, self.background, self._produce = 200, None, produce
        self.init_headers({})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def respond(send_: Any) -> None:
            try:
                response = await self._produce()
            except APIError as exc:
                response = api_error_response(exc)
            except Exception as exc:  # PostgreSQL down while storing: a 503 naming it; else a 500, logged
                response = dependency_or_unexpected_response(exc)
            self.status_code = response.status_code
            await response(scope, receive, send_)

        await respond_until_disconnect(receive, send, respond, scope)


async def _whole(
    state: FrontendState,
    cfg: ModelConfig,
    opts: backend_pb2.PredictOptions,
    max_tokens: int,
    draft: Draft,
    keeper: _Keeper,
) -> Response:
    reply, _replica = await _unary(state.router, cfg, "Predict", opts, "input")
    found = reply_tool_calls(reply) if opts.Tools and reply.chat_deltas else []
    unary_output(draft, reply.message.decode(errors="replace"), [(c.id, c.name, c.arguments) for c in found])
    draft.finish(reply.prompt_tokens, reply.tokens, out_of_tokens=reply.tokens >= max_tokens)
    await keeper.keep(draft)
    return _json(draft.obj())


async def _kept(writer: EventWriter, keeper: _Keeper) -> list[bytes]:
    """Store a finished streamed response, then its last event; a failed INSERT fails the response instead."""
    try:
        await keeper.keep(writer.draft)
    except Exception as exc:  # PostgreSQL down: the client learns the response was not kept
        return writer.failed(
            "storage_error",
            f"the response could not be stored: {type(exc).__name__}: {exc}; "
            "send it again with store: false to skip storing",
        )
    return [writer.end()]


async def _stream(
    state: FrontendState,
    cfg: ModelConfig,
    opts: backend_pb2.PredictOptions,
    max_tokens: int,
    draft: Draft,
    keeper: _Keeper,
) -> Response:
    async with http_errors(state.router, cfg, "input"):  # before the first byte: an HTTP error
        first, stream = await calls.open_stream(state.router, cfg, opts)
    writer = EventWriter(draft)

    async def events() -> AsyncIterator[bytes]:
        for event in writer.start():
            yield event
        reply, tools, counts = first, bool(opts.Tools), (0, 0)
        try:
            while reply is not calls.EOF:
                for event in writer.reply(reply, tools):
                    yield event
                if reply.tokens:  # the final reply carries the counts
                    counts = (reply.prompt_tokens, reply.tokens)
                reply = await stream.read()
        except BackendCallError as exc:  # after the first byte, an error can only be an event
            for event in writer.failed(
                "backend_timeout" if isinstance(exc, BackendTimeout) else "backend_error", str(exc)
            ):
                yield event
            return
        finally:
            stream.close()
        for event in writer.close_items():
            yield event
        draft.finish(*counts, out_of_tokens=counts[1] >= max_tokens)
        for event in await _kept(writer, keeper):
            yield event

    return _RelayResponse(events(), stream, {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
