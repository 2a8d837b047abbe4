"""OpenAI-compatible `/v1/*` routes: models, chat completions, completions, embeddings; and the
reference's Jina-shaped `/v1/rerank`."""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, cast

import orjson
from fastapi import APIRouter, Path
from fastapi.responses import Response

from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import APIError
from corral.frontend.inference import choices, images
from corral.frontend.inference.call_errors import http_errors
from corral.frontend.inference.chat_wire import (
    DEFAULT_MAX_TOKENS,
    assistant_message,
    chat_completion,
    chat_options,
    node_header,
    predict_options,
    random_id,
)
from corral.frontend.inference.choices import finish_reason as _finish_reason
from corral.frontend.inference.choices import usage as _usage
from corral.frontend.inference.fast_path import InferenceRoute, InferenceTable
from corral.frontend.inference.routes import route_target
from corral.frontend.inference.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    RerankRequest,
)
from corral.frontend.inference.sse import DONE, ChunkEncoder, sse
from corral.frontend.inference.structured_output import request_grammar
from corral.frontend.inference.tool_calls import delta_tool_calls
from corral.frontend.state import FrontendState
from corral.models import capabilities
from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.routing import calls
from corral.routing.errors import BackendCallError
from corral.routing.replica import Replica
from corral.routing.router import Router
from corral.telemetry.families import FIRST_TOKEN_SECONDS, STREAMED_TOKENS
from corral.telemetry.labels import PerModel
from corral.tenancy.policy import REFUSED_MODEL, allowed_names, model_refusal

_FIRST_TOKEN = PerModel(FIRST_TOKEN_SECONDS)
_STREAMED_TOKENS = PerModel(STREAMED_TOKENS)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _model_object(name: str, cfg: ModelConfig) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "corral",
        "capabilities": capabilities.listed(cfg),
    }


def _route_names(state: FrontendState) -> list[str]:
    """The model routes clients may name as `model` (a model or alias keeps its name over a route's)."""
    return [n for n in state.routes.routes if n not in state.configs and n not in state.aliases]


def _route_object(state: FrontendState, name: str) -> dict[str, Any]:
    """A model route as `/v1/models` lists it: a name a client may send, with what it leads to."""
    route = state.routes.routes[name]
    return {
        "id": name,
        "object": "model",
        "created": int(route.updated_s),
        "owned_by": "corral-route",
        "route": route.to_json(),
    }


def _model_not_found(state: FrontendState, model: str) -> APIError:
    known = ", ".join(sorted(state.configs)) or "none configured"
    return APIError(
        404,
        f"model {model!r} not found; available models: {known}",
        "invalid_request_error",
        "model_not_found",
        "model",
    )


def _known_model(state: FrontendState, name: str) -> str:
    """A configured model's name, or an alias of one (as the request named it)."""
    if name not in state.configs and state.aliases.get(name) not in state.configs:
        raise _model_not_found(state, name)
    return name


def _check_allowed(state: FrontendState, model: str) -> None:
    """403 when the request's API key may not use `model` (its `models`: tenancy/policy.py)."""
    if (refused := model_refusal(model, state.aliases.get(model, ""))) is not None:
        raise APIError(403, refused, "invalid_request_error", REFUSED_MODEL, "model")


def configured(state: FrontendState, model: str) -> ModelConfig | None:
    """The config of a model, or of the model an alias names; None when neither is configured."""
    return state.configs.get(model) or state.configs.get(state.aliases.get(model, ""))


def config_for(
    state: FrontendState, model: str, *, embeddings: bool = False, reranking: bool = False
) -> ModelConfig:
    _check_allowed(state, model)
    model = route_target(state, model)  # a model route: its chosen target (fallbacks: inference/routes.py)
    cfg = configured(state, model)
    if cfg is None:
        raise _model_not_found(state, model)
    if cfg.disabled:
        raise APIError(
            404,
            f"model {model!r} is disabled; enable it with POST /api/model-configs/{model}/enable",
            "invalid_request_error",
            "model_not_found",
            "model",
        )
    if embeddings and not cfg.embeddings and cfg.backend != "simulator":
        raise APIError(
            400,
            f"model {model!r} is not an embedding model (set `embeddings: true` in its "
            "config to serve /v1/embeddings)",
            "invalid_request_error",
            "invalid_value",
            "model",
        )
    if reranking and not cfg.reranking:
        raise APIError(
            400,
            f"model {model!r} is not a reranking model (set `reranking: true` in its config, with "
            "a backend that implements Rerank such as sentencetransformers, to serve /v1/rerank)",
            "invalid_request_error",
            "invalid_value",
            "model",
        )
    return cfg


async def _unary(
    router: Router, cfg: ModelConfig, method: str, request: Any, prompt_param: str | None = None
) -> tuple[Any, Replica]:
    """A unary backend call (`Predict`, `Embedding`) to whichever replica the router picks; `prompt_param`:
    the request field named when the prompt is too long for the context."""
    async with http_errors(router, cfg, prompt_param):
        return await calls.unary(router, cfg, method, request)
    raise AssertionError("unreachable")  # http_errors re-raises every error it catches


def build_openai_router(state: FrontendState, table: InferenceTable) -> APIRouter:
    """`/v1/models` and the table's POST routes (the same handlers the fast path calls; these routes give
    them their OpenAPI schema, and answer what the fast path lets through)."""
    router = APIRouter(prefix="/v1")

    @router.get("/models")
    async def list_models() -> Response:
        models = [_model_object(name, state.configs[name]) for name in allowed_names(sorted(state.configs))]
        routes = [_route_object(state, name) for name in allowed_names(sorted(_route_names(state)))]
        return _json({"object": "list", "data": models + routes})

    @router.get("/models/{model_id:path}")  # `:path`: a name with '/' gets the 404 below, not a bare one
    async def retrieve_model(model_id: Annotated[str, Path(max_length=NAME_MAX)]) -> Response:
        _check_allowed(state, model_id)
        if model_id in _route_names(state):
            return _json(_route_object(state, model_id))
        name = _known_model(state, model_id)
        return _json(_model_object(name, state.configs.get(name) or state.configs[state.aliases[name]]))

    for route in table:
        router.add_api_route(route.path.removeprefix("/v1"), route.handler, methods=["POST"])
    return router


def inference_table(state: FrontendState) -> InferenceTable:
    """The inference handlers, declared once: path → (request model, handler). The fast path
    (fast_path.py) answers them; `build_openai_router` gives them their FastAPI routes."""

    async def chat(body: ChatCompletionRequest) -> Response:
        cfg = config_for(state, body.model)
        pictures = await _chat_images(state, cfg, body)
        if (
            cfg.mcp and body.tools is None and state.agents is not None
        ):  # the agent loop (frontend/inference/agent_chat.py)
            return await state.agents.chat(cfg, body)
        opts, max_tokens = chat_options(cfg, body)
        opts.Images.extend(pictures)
        if body.several_or_logprobs():  # several choices, or logprobs: choices.py
            choices.check_n(body.n, state.max_n)
            plan = choices.Plan(
                choices.replicate(opts, body.n, 0), max_tokens, True, "messages", body.logprobs
            )
            return await _choices(state, cfg, plan, body)
        ident = f"chatcmpl-{opts.CorrelationId}"  # one id: the backend's logs name the call the client got
        created = int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return await _stream(state, cfg, opts, ident, created, max_tokens, include_usage, chat=True)
        return await _chat_unary(state, cfg, opts, ident, created, max_tokens)

    async def completions(body: CompletionRequest) -> Response:
        cfg = config_for(state, body.model)
        max_tokens = body.max_tokens or DEFAULT_MAX_TOKENS
        opts = predict_options(cfg, body, max_tokens)
        opts.Grammar = request_grammar(body)
        prompts = body.prompts()
        if _several_or_logprobs(body, prompts):  # several choices, token ids, logprobs: choices.py
            return await _choices(state, cfg, _completion_plan(state, body, opts, prompts, max_tokens), body)
        opts.Prompt = cast(str, prompts[0])  # one text prompt: the lean path
        ident = f"cmpl-{random_id()}"
        created = int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return await _stream(state, cfg, opts, ident, created, max_tokens, include_usage, chat=False)
        return await _completion_unary(state, cfg, opts, ident, created, max_tokens, body.echo)

    async def embeddings(body: EmbeddingRequest) -> Response:
        return await _embeddings(state, config_for(state, body.model, embeddings=True), body)

    async def rerank(body: RerankRequest) -> Response:
        cfg = config_for(state, body.model, reranking=True)
        request = backend_pb2.RerankRequest(
            query=body.query, documents=body.documents, top_n=body.top_n or 0, ModelIdentity=cfg.model
        )
        result, replica = await _unary(state.router, cfg, "Rerank", request, "documents")
        return _json(
            {
                "model": cfg.name,
                "results": _rerank_results(body, result.results),
                "usage": {
                    "total_tokens": result.usage.total_tokens,
                    "prompt_tokens": result.usage.prompt_tokens,
                },
            },
            headers=node_header(state, replica),
        )

    return (
        InferenceRoute("/v1/chat/completions", ChatCompletionRequest, chat),
        InferenceRoute("/v1/completions", CompletionRequest, completions),
        InferenceRoute("/v1/embeddings", EmbeddingRequest, embeddings),
        InferenceRoute("/v1/rerank", RerankRequest, rerank),
    )


async def _chat_images(state: FrontendState, cfg: ModelConfig, body: ChatCompletionRequest) -> list[str]:
    """The request's images (base64) for PredictOptions.Images; none for a text-only request (images.py)."""
    if not images.has_images(body.messages):
        return []
    if cfg.mcp and body.tools is None and state.agents is not None:
        raise images.agent_refusal(cfg, body.messages)
    return await images.request_images(cfg, body.messages, state.images)


def _several_or_logprobs(body: CompletionRequest, prompts: list[str | list[int]]) -> bool:
    """Whether a completions request leaves the lean path (one text prompt, one choice, no logprobs)."""
    return (
        len(prompts) > 1
        or not isinstance(prompts[0], str)
        or body.n != 1
        or body.logprobs is not None
        or (body.echo and body.stream)
    )


async def _embeddings(state: FrontendState, cfg: ModelConfig, body: EmbeddingRequest) -> Response:
    data, prompt_tokens = [], 0
    for index, text in enumerate(body.inputs()):
        result, replica = await _unary(state.router, cfg, "Embedding", _embedding_options(cfg, text), "input")
        vector = _embedding_vector(body, result, cfg)
        data.append({"object": "embedding", "index": index, "embedding": vector})
        prompt_tokens += result.prompt_tokens or result.tokens
    return _json(
        {
            "object": "list",
            "data": data,
            "model": cfg.name,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        },
        headers=node_header(state, replica),
    )


def _embedding_options(cfg: ModelConfig, text: str | list[int]) -> backend_pb2.PredictOptions:
    """One embedding input: a text, or token ids (`EmbeddingTokens`)."""
    if isinstance(text, str):
        return backend_pb2.PredictOptions(Embeddings=text, ModelIdentity=cfg.model)
    return backend_pb2.PredictOptions(EmbeddingTokens=text, ModelIdentity=cfg.model)


def _completion_plan(
    state: FrontendState,
    body: CompletionRequest,
    opts: backend_pb2.PredictOptions,
    prompts: list[str | list[int]],
    max_tokens: int,
) -> choices.Plan:
    """`n` choices per prompt; a prompt of token ids goes as `EmbeddingTokens`."""
    choices.check_n(body.n, state.max_n)
    if body.echo and body.logprobs is not None:
        raise APIError(
            400,
            "echo with logprobs needs the prompt's logprobs, which corral does not compute; send one of them",
            "invalid_request_error",
            "unsupported_parameter",
            "echo",
        )
    if body.echo and not all(isinstance(prompt, str) for prompt in prompts):
        raise APIError(
            400,
            "echo needs the prompt as text; send text prompts, or leave echo out",
            "invalid_request_error",
            "unsupported_parameter",
            "echo",
        )
    if body.logprobs is not None:
        opts.Logprobs, opts.TopLogprobs = 1, body.logprobs
    planned: list[choices.Choice] = []
    for index, prompt in enumerate(prompts):
        one = backend_pb2.PredictOptions()
        one.CopyFrom(opts)
        if isinstance(prompt, str):
            one.Prompt = prompt
        else:
            one.EmbeddingTokens.extend(prompt)
        planned += choices.replicate(
            one, body.n, index, prompt if body.echo and isinstance(prompt, str) else ""
        )
    return choices.Plan(planned, max_tokens, False, "prompt", body.logprobs is not None)


async def _choices(
    state: FrontendState,
    cfg: ModelConfig,
    plan: choices.Plan,
    body: ChatCompletionRequest | CompletionRequest,
) -> Response:
    ident = f"{'chatcmpl' if plan.chat else 'cmpl'}-{random_id()}"
    head = choices.response_head(ident, cfg.name, chat=plan.chat, streamed=body.stream)
    headers_of = lambda replica: node_header(state, replica)  # noqa: E731
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return _RelayResponse(*await choices.stream(state.router, cfg, plan, head, include_usage, headers_of))
    return await choices.unary(state.router, cfg, plan, head, state.max_n, assistant_message, headers_of)


def _embedding_vector(body: EmbeddingRequest, result: Any, cfg: ModelConfig) -> Any:
    """The vector as the request asks: shortened to `dimensions`, base64 or floats."""
    vector = list(result.embeddings)
    if body.dimensions is not None:
        vector = _shortened(vector, body.dimensions, result, cfg)
    if body.encoding_format == "base64":  # little-endian float32, as OpenAI encodes it
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def _shortened(vector: list[float], dimensions: int, result: Any, cfg: ModelConfig) -> list[float]:
    """The first `dimensions` values of a pooled embedding, renormalised to unit length (Matryoshka)."""
    if result.layout == backend_pb2.EMBEDDING_LAYOUT_PER_TOKEN:
        raise APIError(
            400,
            f"model {cfg.name!r} gives one vector per token (no pooling), which dimensions cannot "
            "shorten; leave dimensions out",
            "invalid_request_error",
            "invalid_value",
            "dimensions",
        )
    if dimensions > len(vector):
        raise APIError(
            400,
            f"dimensions is {dimensions} but model {cfg.name!r} gives {len(vector)}; send "
            f"dimensions up to {len(vector)}, or leave it out",
            "invalid_request_error",
            "invalid_value",
            "dimensions",
        )
    head = vector[:dimensions]
    norm = sum(value * value for value in head) ** 0.5 or 1.0
    return [value / norm for value in head]


async def _completion_unary(
    state: FrontendState,
    cfg: ModelConfig,
    opts: backend_pb2.PredictOptions,
    ident: str,
    created: int,
    max_tokens: int,
    echo: bool,
) -> Response:
    reply, replica = await _unary(state.router, cfg, "Predict", opts, "prompt")
    text = reply.message.decode(errors="replace")
    return _json(
        headers=node_header(state, replica),
        body={
            "id": ident,
            "object": "text_completion",
            "created": created,
            "model": cfg.name,
            "choices": [
                {
                    "index": 0,
                    "text": (opts.Prompt + text) if echo else text,
                    "logprobs": None,
                    "finish_reason": _finish_reason(reply.tokens, max_tokens),
                }
            ],
            "usage": _usage(reply.prompt_tokens, reply.tokens),
        },
    )


async def _chat_unary(
    state: FrontendState,
    cfg: ModelConfig,
    opts: backend_pb2.PredictOptions,
    ident: str,
    created: int,
    max_tokens: int,
) -> Response:
    reply, replica = await _unary(state.router, cfg, "Predict", opts, "messages")
    return chat_response(state, cfg, ident, created, max_tokens, reply, replica)


def chat_response(
    state: FrontendState,
    cfg: ModelConfig,
    ident: str,
    created: int,
    max_tokens: int,
    reply: backend_pb2.Reply,
    replica: Replica,
) -> Response:
    return _json(
        chat_completion(cfg.name, ident, created, max_tokens, reply), headers=node_header(state, replica)
    )


def _rerank_results(body: RerankRequest, ranked: Any) -> list[dict[str, Any]]:
    """The backend's ranking in the Jina shape; the document text is the request's own (by index)."""
    results = []
    for item in ranked:
        if not 0 <= item.index < len(body.documents):
            continue  # a backend that names a document we did not send: not the client's concern
        entry: dict[str, Any] = {"index": item.index, "relevance_score": item.relevance_score}
        if body.return_documents:
            entry["document"] = {"text": body.documents[item.index]}
        results.append(entry)
    return results


class _RelayResponse(Response):
    """An SSE relay sent with plain ASGI messages: one `send` per event and nothing else per token.

    Starlette's StreamingResponse adds a task group and a second disconnect listener per stream and a
    type check per chunk; the fast path's `respond_until_disconnect` already cancels the relay when the
    client goes away. The backend stream is always ended, even if the body never started.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncIterator[bytes],
        stream: calls.ReplyStream | choices.Streams,
        headers: dict[str, str],
    ) -> None:
        self.status_code, self.background = 200, None
        self.init_headers(headers)  # no `body`: no Content-Length, as for any stream
        self._content, self._stream = content, stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for event in self._content:
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self._stream.close()


async def _stream(
    state: FrontendState,
    cfg: ModelConfig,
    opts: backend_pb2.PredictOptions,
    ident: str,
    created: int,
    max_tokens: int,
    include_usage: bool,
    *,
    chat: bool,
) -> Response:
    started_s = time.perf_counter()
    async with http_errors(state.router, cfg, "messages" if chat else "prompt"):  # before the first byte
        first, stream = await calls.open_stream(state.router, cfg, opts)
    _FIRST_TOKEN(cfg.name).observe(time.perf_counter() - started_s)
    encoder = ChunkEncoder(ident, created, cfg.name, chat=chat)

    async def events() -> AsyncIterator[bytes]:
        completion_tokens = prompt_tokens = 0
        if chat:  # written with the first token's chunk: the events of a turn go in one write (LeanCycle)
            yield sse(encoder.chunk(None, role=True))
        reply, read, piece, eof = first, stream.read, encoder.piece, calls.EOF
        tools, called = (
            bool(opts.Tools),
            set[int](),
        )  # client-side tools: tool calls go out as `delta.tool_calls`
        try:
            while reply is not eof:
                if reply.message:
                    yield piece(reply.message)
                if tools and reply.chat_deltas and (deltas := delta_tool_calls(reply)):
                    yield sse(encoder.tool_calls(deltas))
                    called.update(d["index"] for d in deltas)
                if (
                    reply.tokens or reply.prompt_tokens
                ):  # the final reply carries the counts (0 tokens: EOS first)
                    completion_tokens, prompt_tokens = reply.tokens, reply.prompt_tokens
                reply = await read()
        except BackendCallError as exc:  # after the first byte, an error can only be an event
            yield choices.error_events(exc)
            return
        finally:
            stream.close()
        _STREAMED_TOKENS(cfg.name).inc(completion_tokens)
        finish = _finish_reason(completion_tokens, max_tokens)
        yield sse(encoder.chunk("tool_calls" if called and finish == "stop" else finish))
        if include_usage:
            yield encoder.usage(_usage(prompt_tokens, completion_tokens))
        yield DONE

    headers = {
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
        **(node_header(state, stream.replica) or {}),
    }
    return _RelayResponse(events(), stream, headers)
