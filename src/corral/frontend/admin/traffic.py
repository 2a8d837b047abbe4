"""`GET /api/traffic` (admin): the last hour of traffic, from the ring every frontend keeps alike (traffic_sampler.py).

Query: `window` (seconds, default and at most 3600), `model` (only this model under `models`), `node` (only this
node, by id or name, under `nodes`). Anything else, or a bad value, is a 400 naming the parameter.

    {"interval_s": 5, "now": <unix s>, "cluster": S, "models": {"<model>": S}, "nodes": {"<node id>": N}}

S: `t` (each interval's end, unix seconds) and, aligned with it, requests_per_s, errors_per_s (5xx and 429),
ttft_p50_ms, ttft_p95_ms, latency_p50_ms, latency_p95_ms, tokens_in_per_s, tokens_out_per_s, in_flight, queued,
loads and evictions (counts in the interval); N: `name`, `t`, vram_used_bytes, vram_total_bytes, ram_used_bytes,
ram_total_bytes, disk_free_bytes. `null` where no frontend sampled the interval (or no request had a latency).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import envelope
from corral.frontend.state import FrontendState
from corral.telemetry.traffic_ring import WINDOW_MAX_S

PARAMS = ("window", "model", "node")


class BadParameter(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class TrafficQuery:
    window_s: float = WINDOW_MAX_S
    model: str | None = None
    node: str | None = None


def parse_query(params: Mapping[str, str], multi: Mapping[str, int]) -> TrafficQuery:
    """The validated query; `multi`: how many times each parameter was given."""
    for name, times in multi.items():
        if name not in PARAMS:
            raise BadParameter(name, f"unknown parameter {name[:40]!r}; known: {', '.join(PARAMS)}")
        if times > 1:
            raise BadParameter(name, f"{name} is given {times} times; give it once")
    window_s = WINDOW_MAX_S
    if "window" in params:
        try:
            window_s = float(params["window"])
        except ValueError:
            window_s = math.nan
        if not 0 < window_s <= WINDOW_MAX_S:
            raise BadParameter(
                "window", f"window {params['window'][:40]!r} must be seconds from 1 to {WINDOW_MAX_S:.0f}"
            )
    texts = {}
    for name in ("model", "node"):
        value = params.get(name)
        if value is not None and not 0 < len(value) <= NAME_MAX:
            raise BadParameter(name, f"{name} must be 1 to {NAME_MAX} characters")
        texts[name] = value
    return TrafficQuery(window_s, texts["model"], texts["node"])


def build_traffic_router(state: FrontendState) -> APIRouter:
    router = APIRouter()

    @router.get("/api/traffic")
    async def traffic(request: Request) -> Response:
        multi: dict[str, int] = {}
        for name, _value in request.query_params.multi_items():
            multi[name] = multi.get(name, 0) + 1
        try:
            query = parse_query(request.query_params, multi)
        except BadParameter as exc:
            return JSONResponse(
                envelope(str(exc), "invalid_request_error", "invalid_value", exc.param), status_code=400
            )
        sampler = state.traffic
        if sampler is None:
            return JSONResponse(
                envelope("this frontend keeps no traffic series", "server_error", "unavailable", None),
                status_code=503,
            )
        body = sampler.ring.series(time.time(), query.window_s, query.model, query.node)
        return Response(orjson.dumps(body), media_type="application/json")

    return router
