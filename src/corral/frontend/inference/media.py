"""The modality endpoints (issue 23): transcription, translation, speech and image generation, each routed like
chat (placement, load jobs, staging of the model, progress) to a replica whose backend serves it.

A request's own files travel through the chosen replica's worker (`staging/request_inputs.py`): the uploaded
audio is staged below the worker's `ephemeral/` root before the backend call and its path handed to the
backend; a backend's output (speech, an image) is written to an ephemeral file of the request and read back;
every one of them is released when the call ends, whatever ends it (answer, error, client disconnect).

* `POST /v1/audio/transcriptions`, `/v1/audio/translations` (multipart, OpenAI's fields and formats).
* `POST /v1/audio/speech` (OpenAI) and `POST /tts` (the reference's: WAV back); `wav` and `pcm` speech is
  streamed as it is made when the backend streams (`speech_stream.py`).
* `POST /v1/images/generations`: `b64_json`, or a `url` served by every frontend at
  `GET /generated-images/<id>.png` for CORRAL_GENERATED_IMAGE_TTL.

A model that cannot serve the endpoint is a 400 naming the model and its capabilities (`models/capabilities.py`).
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request
from fastapi.responses import PlainTextResponse, Response

from corral.frontend.errors import APIError
from corral.frontend.inference import speech_formats, speech_stream, transcripts
from corral.frontend.inference.call_errors import http_errors
from corral.frontend.inference.media_requests import (
    ImageRequest,
    SpeechRequest,
    TranscriptionForm,
    TTSRequest,
    transcription_form,
)
from corral.frontend.inference.openai import config_for
from corral.frontend.inference.routes import ServeModel, route_plan, serve_route
from corral.frontend.state import FrontendState
from corral.models import capabilities
from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.routing import calls
from corral.routing.replica import Replica
from corral.staging.errors import InputStorageFull, RequestInputFailed
from corral.staging.request_inputs import RequestInputs
from corral.store import generated_images, nodes

MEDIA_PATHS = frozenset(
    {
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/audio/speech",
        "/tts",
        "/v1/images/generations",
    }
)  # a client that leaves cancels these (disconnect.py)
SPEECH_MAX_BYTES = 64 << 20  # what one speech or image answer may be when read back from the worker
_IMAGE_ID_BYTES = 24


async def _routed(state: FrontendState, model: str, serve: ServeModel) -> Response:
    """`serve(model)`; for a model route, its candidates in order until one serves (routes.py)."""
    plan = route_plan(state, model)
    return await (serve(model) if plan is None else serve_route(state, model, plan, serve))


def _needs(state: FrontendState, model: str, capability: str, endpoint: str) -> ModelConfig:
    cfg = config_for(state, model)
    have = capabilities.capabilities(cfg)
    if capability not in have:
        listed = ", ".join(capabilities.listed(cfg)) or "none"
        raise APIError(
            400,
            f"model {cfg.name!r} cannot serve {endpoint}: it has no {capability} capability (its "
            f"capabilities: {listed}; backend {cfg.backend}); use a {capability} model, or set "
            "known_usecases in its config",
            "invalid_request_error",
            "model_not_capable",
            "model",
        )
    return cfg


@dataclass
class _Outputs:
    """What the staged block read back from the worker after the call (by output name)."""

    data: dict[str, bytes] = field(default_factory=dict)


def _with_files(
    state: FrontendState,
    inputs: list[tuple[str, str, bytes]],
    outputs: list[tuple[str, str]],
    build: Callable[[dict[str, str]], Any],
    read: _Outputs,
) -> Callable[[Replica], AbstractAsyncContextManager[Any]]:
    """`calls.unary`'s `staged`: put `inputs` (category, name, bytes) and empty `outputs` (category, name) on the
    replica's node, yield `build(paths by name)`, read the outputs back after a successful call, release all."""

    @asynccontextmanager
    async def staged(replica: Replica) -> AsyncIterator[Any]:
        node = await nodes.get(state.pool, replica.node_id)
        if node is None or not node["http_address"]:
            raise APIError(
                503,
                f"node {replica.node_name} has no file server address to stage the request's files "
                "on; try again",
                "server_error",
                "node_unavailable",
                headers={"Retry-After": "5"},
            )
        staging = state.staging
        assert staging is not None, "the frontend sets state.staging at start"
        async with RequestInputs(staging.http, node["http_address"], staging.token) as files:
            paths: dict[str, str] = {}
            try:
                for category, name, data in inputs:
                    paths[name] = await files.stage(category, name, data)
                keys = {}
                for category, name in outputs:
                    paths[name] = await files.stage(category, name, b"")
                    keys[name] = files.keys[-1]
            except InputStorageFull as exc:
                raise APIError(
                    exc.client_status,
                    f"node {replica.node_name}: {exc.message}",
                    "server_error",
                    "input_storage_full",
                    headers={"Retry-After": str(exc.retry_after_s)},
                ) from None
            except RequestInputFailed as exc:
                raise APIError(
                    502,
                    f"node {replica.node_name}: staging the request's files failed: {exc}",
                    "server_error",
                    "input_staging_failed",
                ) from None
            yield build(paths)
            for name, key in keys.items():
                read.data[name] = await _fetch(files, key)

    return staged


async def _fetch(files: RequestInputs, key: str) -> bytes:
    try:
        data = await files.read(key, SPEECH_MAX_BYTES)
    except RequestInputFailed as exc:
        raise APIError(
            502,
            f"reading the backend's output {key} back from the worker failed: {exc}",
            "server_error",
            "output_fetch_failed",
        ) from None
    if not data:
        raise APIError(502, "the backend answered without writing its output", "server_error", "empty_output")
    return data


async def _call(
    state: FrontendState, cfg: ModelConfig, method: str, staged: Any, param: str | None = None
) -> Any:
    async with http_errors(state.router, cfg, param):
        result, _replica = await calls.unary(state.router, cfg, method, None, staged=staged)
        return result
    raise AssertionError("unreachable")  # http_errors re-raises every error it catches


def _ok(result: Any, what: str) -> None:
    if isinstance(result, backend_pb2.Result) and not result.success:
        raise APIError(
            400, f"the backend could not {what}: {result.message}", "invalid_request_error", "backend_refused"
        )


async def _transcribe(state: FrontendState, request: Request, translate: bool) -> Response:
    endpoint = "/v1/audio/translations" if translate else "/v1/audio/transcriptions"
    async with request.form(max_files=1, max_fields=16, max_part_size=1 << 20) as form:
        body = await transcription_form(form, endpoint, state.transcription_max_bytes)
    if len(body.audio) > state.transcription_max_bytes:
        raise APIError(
            413,
            f"the audio file is larger than {state.transcription_max_bytes} bytes "
            "(CORRAL_INFERENCE_MAX_BODY bounds it)",
            "invalid_request_error",
            "file_too_large",
            "file",
        )
    return await _routed(state, body.model, lambda model: _transcribe_with(state, body, model, translate))


async def _transcribe_with(
    state: FrontendState, body: TranscriptionForm, model: str, translate: bool
) -> Response:
    endpoint = "/v1/audio/translations" if translate else "/v1/audio/transcriptions"
    cfg = _needs(state, model, capabilities.TRANSCRIPTION, endpoint)

    def build(paths: dict[str, str]) -> Any:
        return backend_pb2.TranscriptRequest(
            dst=paths[body.filename],
            language=body.language,
            translate=translate,
            prompt=body.prompt,
            temperature=body.temperature,
            ModelIdentity=cfg.model,
        )

    staged = _with_files(state, [("audio", body.filename, body.audio)], [], build, _Outputs())
    result = await _call(state, cfg, "AudioTranscription", staged, "file")
    rendered = transcripts.render(
        result, body.response_format, "translate" if translate else "transcribe", body.temperature
    )
    if isinstance(rendered, dict):
        return Response(orjson.dumps(rendered), media_type="application/json")
    return PlainTextResponse(rendered, media_type=transcripts.MEDIA_TYPES[body.response_format])


def _tts_request(
    cfg: ModelConfig, text: str, voice: str, speed: float, language: str = "", dst: str = ""
) -> backend_pb2.TTSRequest:
    request = backend_pb2.TTSRequest(
        text=text,
        model=cfg.model,
        dst=dst,
        voice=voice,
        speed=speed if speed != 1.0 else 0.0,
        ModelIdentity=cfg.model,
    )
    if language:
        request.language = language
    return request


async def _speak(
    state: FrontendState, cfg: ModelConfig, text: str, voice: str, speed: float, language: str = ""
) -> bytes:
    """The model's speech of `text` as the WAV its backend wrote."""
    read = _Outputs()

    def build(paths: dict[str, str]) -> Any:
        return _tts_request(cfg, text, voice, speed, language, paths["speech.wav"])

    _ok(
        await _call(
            state, cfg, "TTS", _with_files(state, [], [("speech", "speech.wav")], build, read), "input"
        ),
        "speak",
    )
    return read.data["speech.wav"]


async def _image(state: FrontendState, cfg: ModelConfig, body: ImageRequest, seed: int) -> bytes:
    width, height = body.dimensions()
    positive, negative = body.prompts()
    read = _Outputs()

    def build(paths: dict[str, str]) -> Any:
        return backend_pb2.GenerateImageRequest(
            width=width,
            height=height,
            step=body.step or 0,
            seed=seed,
            positive_prompt=positive,
            negative_prompt=negative,
            dst=paths["image.png"],
            ModelIdentity=cfg.model,
        )

    _ok(
        await _call(
            state,
            cfg,
            "GenerateImage",
            _with_files(state, [], [("image", "image.png")], build, read),
            "prompt",
        ),
        "generate the image",
    )
    return read.data["image.png"]


async def _images(state: FrontendState, body: ImageRequest, model: str, base_url: str) -> Response:
    cfg = _needs(state, model, capabilities.IMAGE, "/v1/images/generations")
    if body.n > state.max_n:
        raise APIError(
            400,
            f"n is {body.n}; at most {state.max_n} images per request (CORRAL_MAX_N raises it)",
            "invalid_request_error",
            "invalid_value",
            "n",
        )
    base_seed = body.seed if body.seed is not None else secrets.randbelow(1 << 31)
    data = []
    for index in range(body.n):  # one generation per image, each with its own seed
        png = await _image(state, cfg, body, (base_seed + index) % (1 << 31))
        if body.response_format == "b64_json":
            data.append({"b64_json": base64.b64encode(png).decode("ascii"), "revised_prompt": body.prompt})
            continue
        image_id = secrets.token_urlsafe(_IMAGE_ID_BYTES)
        await generated_images.insert(state.pool, image_id, png, state.generated_image_ttl_s)
        data.append(
            {"url": f"{base_url.rstrip('/')}/generated-images/{image_id}.png", "revised_prompt": body.prompt}
        )
    return Response(orjson.dumps({"created": int(time.time()), "data": data}), media_type="application/json")


async def _speech(state: FrontendState, model: str, body: SpeechRequest) -> Response:
    cfg = _needs(state, model, capabilities.TTS, "/v1/audio/speech")
    if body.response_format in speech_stream.STREAMED_FORMATS:
        streamed = await speech_stream.open_speech(
            state.router,
            cfg,
            _tts_request(cfg, body.input, body.voice_name(), body.speed),
            body.response_format,
        )
        if streamed is not None:
            return streamed
    wav = await _speak(state, cfg, body.input, body.voice_name(), body.speed)
    return Response(
        await asyncio.to_thread(speech_formats.encode, wav, body.response_format),  # CPU work
        media_type=speech_formats.MEDIA_TYPES[body.response_format],
    )


async def _tts(state: FrontendState, model: str, body: TTSRequest) -> Response:
    cfg = _needs(state, model, capabilities.TTS, "/tts")
    if body.backend and body.backend != cfg.backend:
        raise APIError(
            400,
            f"model {cfg.name!r} runs on backend {cfg.backend!r}, not {body.backend!r}; leave backend out",
            "invalid_request_error",
            "invalid_value",
            "backend",
        )
    return Response(
        await _speak(state, cfg, body.input, body.voice, 1.0, body.language), media_type="audio/wav"
    )


def build_media_router(state: FrontendState) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> Response:
        return await _transcribe(state, request, translate=False)

    @router.post("/v1/audio/translations")
    async def translations(request: Request) -> Response:
        return await _transcribe(state, request, translate=True)

    @router.post("/v1/audio/speech")
    async def speech(body: SpeechRequest) -> Response:
        return await _routed(state, body.model, lambda model: _speech(state, model, body))

    @router.post("/tts")
    async def tts(body: TTSRequest) -> Response:
        return await _routed(state, body.model, lambda model: _tts(state, model, body))

    @router.post("/v1/images/generations")
    async def images(body: ImageRequest, request: Request) -> Response:
        return await _routed(
            state, body.model, lambda model: _images(state, body, model, str(request.base_url))
        )

    @router.get("/generated-images/{image_id}.png")
    async def generated_image(
        image_id: Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")],
    ) -> Response:
        png = await generated_images.png(state.pool, image_id)
        if png is None:
            raise APIError(
                404,
                "no such image, or it expired (CORRAL_GENERATED_IMAGE_TTL); generate it again",
                "invalid_request_error",
                "image_not_found",
            )
        return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})

    return router
