"""The request-limits ASGI layer: body size per route class (413 before the app runs, declared or chunked)
and the concurrency bound (429 + Retry-After; health checks exempt)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from corral.config.errors import ConfigError
from corral.config.frontend import FrontendSettings
from corral.config.settings import load
from corral.frontend.limits import RequestLimits, RequestLimitsMiddleware

REQUIRED = ["--nats-url", "nats://n:4222", "--database-url", "postgresql://p/db"]


class Recorder:
    """The app inside the limits: records what it was given, optionally holds until released."""

    def __init__(self, hold: asyncio.Event | None = None) -> None:
        self.calls: list[bytes] = []
        self.hold = hold

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.calls.append(body)
        if self.hold is not None:
            await self.hold.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def scope(path: str, headers: list[tuple[bytes, bytes]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {"type": "http", "method": "POST", "path": path, "headers": list(headers)}


class Client:
    """Feeds body chunks to the layer and collects what it sends."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.received = list(chunks), 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.received += 1
        chunk = self.chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def message(self) -> str:
        return str(json.loads(self.sent[1]["body"])["error"]["message"])


@pytest.mark.parametrize(
    "path, knob",
    [
        ("/v1/chat/completions", "CORRAL_INFERENCE_MAX_BODY"),
        ("/api/node/register", "CORRAL_NODE_API_MAX_BODY"),
        ("/api/nodes/scheduling", "CORRAL_ADMIN_MAX_BODY"),  # /api/nodes is admin, not the worker node API
        ("/api/model-configs/llama3", "CORRAL_MODEL_CONFIG_MAX_BODY"),
        ("/docs", "CORRAL_ADMIN_MAX_BODY"),
    ],
)
def test_each_route_class_has_its_own_limit_and_knob(path: str, knob: str) -> None:
    assert RequestLimitsMiddleware(Recorder(), RequestLimits()).body_limit(path).knob == knob


async def test_a_declared_length_over_the_limit_is_refused_without_reading_or_calling_the_app() -> None:
    app, client = Recorder(), Client([b"{"])
    layer = RequestLimitsMiddleware(app, RequestLimits(node_api_body_bytes=1000))
    await layer(scope("/api/node/register", [(b"content-length", b"300000000")]), client.receive, client.send)
    assert (client.status, client.received, app.calls) == (413, 0, [])
    assert client.headers[b"connection"] == b"close"
    assert client.message == (
        "request body too large: worker node API requests (/api/node/*) accept at most 1000 "
        "bytes; raise CORRAL_NODE_API_MAX_BODY to allow more"
    )


async def test_a_chunked_body_is_cut_off_once_it_passes_the_limit() -> None:
    app, client = Recorder(), Client([b"x" * 400] * 100)  # 40 kB offered, 1 kB allowed
    layer = RequestLimitsMiddleware(app, RequestLimits(admin_body_bytes=1000))
    await layer(scope("/api/keys", [(b"transfer-encoding", b"chunked")]), client.receive, client.send)
    assert (client.status, client.received) == (
        413,
        3,
    )  # the third chunk passed 1000 bytes: nothing more read
    assert app.calls == [
        b"x" * 800
    ]  # the app never had more than the limit: then it was told the client left
    assert len(client.sent) == 2  # its own answer (a 200 here) was dropped: the client got the 413 alone
    assert client.message.endswith("accept at most 1000 bytes; raise CORRAL_ADMIN_MAX_BODY to allow more")


async def test_a_chunked_body_is_streamed_to_the_app_as_it_arrives_not_held() -> None:
    client = Client([b"a" * 400] * 5)
    seen_at: list[int] = []  # how many chunks the client had sent when the app got each one

    async def app(_scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            seen_at.append(client.received)
        seen_at.append(client.received)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    await RequestLimitsMiddleware(app, RequestLimits())(scope("/v1/files"), client.receive, client.send)
    assert (client.status, seen_at) == (200, [1, 2, 3, 4, 5])


async def test_an_app_failing_on_a_cut_off_body_still_answers_413() -> None:
    client = Client([b"x" * 600] * 3)

    async def app(_scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive())["type"] == "http.request":
            pass
        raise RuntimeError("the client left half way")  # as a parser might

    await RequestLimitsMiddleware(app, RequestLimits(admin_body_bytes=1000))(
        scope("/api/keys"), client.receive, client.send
    )
    assert client.status == 413


async def test_a_chunked_body_within_the_limit_reaches_the_app_whole() -> None:
    app, client = Recorder(), Client([b"ab", b"cd", b"ef"])
    await RequestLimitsMiddleware(app, RequestLimits())(scope("/v1/completions"), client.receive, client.send)
    assert (client.status, app.calls) == (200, [b"abcdef"])


async def test_a_declared_length_within_the_limit_is_passed_through_untouched() -> None:
    app, client = Recorder(), Client([b"abc"])
    layer = RequestLimitsMiddleware(app, RequestLimits())
    await layer(scope("/v1/completions", [(b"content-length", b"3")]), client.receive, client.send)
    assert (client.status, app.calls) == (200, [b"abc"])


async def test_past_the_concurrency_limit_a_request_gets_429_and_health_checks_still_answer() -> None:
    release = asyncio.Event()
    app = Recorder(hold=release)
    layer = RequestLimitsMiddleware(app, RequestLimits(max_concurrent_requests=1))
    first = Client([b""])
    held = asyncio.create_task(layer(scope("/v1/chat/completions"), first.receive, first.send))
    while not app.calls:
        await asyncio.sleep(0)
    refused = Client([b""])
    await layer(scope("/api/nodes"), refused.receive, refused.send)
    assert refused.status == 429 and refused.headers[b"retry-after"] == b"1"
    assert refused.message == (
        "this frontend is serving its limit of 1 concurrent requests; retry after 1 s, "
        "or raise CORRAL_MAX_CONCURRENT_REQUESTS"
    )
    probe = Client([b""])
    health = asyncio.create_task(layer(scope("/healthz"), probe.receive, probe.send))
    while len(app.calls) < 2:
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(held, health)
    assert (first.status, probe.status, layer.in_flight) == (200, 200, 0)
    again = Client([b""])
    await layer(scope("/api/nodes"), again.receive, again.send)
    assert again.status == 200


def test_limits_come_from_their_settings() -> None:
    settings = load(
        FrontendSettings,
        "corral run",
        "",
        REQUIRED,
        {"CORRAL_INFERENCE_MAX_BODY": "32MiB", "CORRAL_MAX_CONCURRENT_REQUESTS": "2"},
    )
    limits = RequestLimits.from_settings(settings)
    assert (limits.inference_body_bytes, limits.node_api_body_bytes, limits.max_concurrent_requests) == (
        32 << 20,
        1 << 20,
        2,
    )


@pytest.mark.parametrize(
    "env, value", [("CORRAL_MAX_CONCURRENT_REQUESTS", "0"), ("CORRAL_ADMIN_MAX_BODY", "0")]
)
def test_a_limit_of_zero_stops_the_start_naming_the_setting(env: str, value: str) -> None:
    with pytest.raises(ConfigError, match=env):
        load(FrontendSettings, "corral run", "", REQUIRED, {env: value})
