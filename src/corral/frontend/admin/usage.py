"""`GET /api/usage` (admin): tokens and requests per API key x model x hour as the engines counted them, summed over
the filters and grouped as asked. Reads what the frontends' ledgers have flushed (tenancy/ledger.py): a frontend's
latest counts appear after its next flush (CORRAL_USAGE_FLUSH_INTERVAL).

Query: `key` (an API key id; empty: requests without a key), `tenant`, `model`, `since` and `until` (RFC 3339 or
unix seconds; hours starting in [since's hour, until); default the last 24 hours), `group_by` (comma-separated of
hour|day, key, tenant, model; default `hour,key,model`), `limit` (groups, default 1000, at most 10000). Anything
else, or a bad value, is a 400 naming the parameter.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral.frontend.bounds import NAME_MAX, NODE_ID_MAX
from corral.frontend.errors import envelope
from corral.frontend.state import FrontendState
from corral.store import usage as usage_store

PARAMS = ("key", "tenant", "model", "since", "until", "group_by", "limit")
GROUPS = ("hour", "day", "key", "tenant", "model")
DEFAULT_GROUP_BY = ("hour", "key", "model")
DEFAULT_WINDOW_S = 86400.0
LIMIT_DEFAULT, LIMIT_MAX = 1000, 10_000
TIME_MIN = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
TIME_MAX = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)
COUNTS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens")


class BadParameter(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class UsageRequest:
    query: usage_store.ReportQuery
    group_by: tuple[str, ...]
    limit: int


def parse_time(param: str, raw: str) -> dt.datetime:
    """RFC 3339 (`2026-12-04T13:00:00Z`, with an offset) or unix seconds, as an aware UTC datetime."""
    text = raw.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    try:
        if not math.isnan(seconds):
            at = dt.datetime.fromtimestamp(seconds, dt.UTC)
        else:
            at = dt.datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        raise BadParameter(
            param, f"{param} {raw[:40]!r} is not a time: give RFC 3339 (2026-12-04T13:00:00Z) or unix seconds"
        ) from None
    if at.tzinfo is None:
        raise BadParameter(param, f"{param} {raw[:40]!r} has no time zone: add Z or an offset such as +02:00")
    if not TIME_MIN <= at < TIME_MAX:
        raise BadParameter(param, f"{param} {raw[:40]!r} is out of range (1970 to 9998)")
    return at.astimezone(dt.UTC)


def parse_group_by(raw: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in raw.split(",") if p.strip())
    for part in parts:
        if part not in GROUPS:
            raise BadParameter(
                "group_by",
                f"group_by {part[:40]!r} is unknown: give a comma-separated list of {', '.join(GROUPS)}",
            )
    if "hour" in parts and "day" in parts:
        raise BadParameter("group_by", "group_by takes hour or day, not both")
    return tuple(dict.fromkeys(parts))


def _text(params: Mapping[str, str], name: str, max_length: int) -> str | None:
    value = params.get(name)
    if value is not None and len(value) > max_length:
        raise BadParameter(name, f"{name} is longer than {max_length} characters")
    return value


def parse_request(params: Mapping[str, str], multi: Mapping[str, int], now_s: float) -> UsageRequest:
    """The validated request; `multi`: how many times each parameter was given."""
    for name, times in multi.items():
        if name not in PARAMS:
            raise BadParameter(name, f"unknown parameter {name[:40]!r}; known: {', '.join(PARAMS)}")
        if times > 1:
            raise BadParameter(name, f"{name} is given {times} times; give it once")
    until = parse_time("until", params["until"]) if "until" in params else None
    since = parse_time("since", params["since"]) if "since" in params else None
    if since is None:
        since = (until or dt.datetime.fromtimestamp(now_s, dt.UTC)) - dt.timedelta(seconds=DEFAULT_WINDOW_S)
    since = since.replace(minute=0, second=0, microsecond=0)  # the hour holding `since` counts
    if until is None:
        until = TIME_MAX
    if until <= since:
        raise BadParameter("until", "until must be after since")
    group_by = parse_group_by(params["group_by"]) if "group_by" in params else DEFAULT_GROUP_BY
    limit = LIMIT_DEFAULT
    if "limit" in params:
        try:
            limit = int(params["limit"])
        except ValueError:
            raise BadParameter("limit", f"limit must be an integer from 1 to {LIMIT_MAX}") from None
        if not 1 <= limit <= LIMIT_MAX:
            raise BadParameter("limit", f"limit must be an integer from 1 to {LIMIT_MAX}")
    query = usage_store.ReportQuery(
        since=since,
        until=until,
        key_id=_text(params, "key", NODE_ID_MAX),
        tenant=_text(params, "tenant", NAME_MAX),
        model=_text(params, "model", NAME_MAX),
        by_key="key" in group_by,
        by_tenant="tenant" in group_by,
        by_model="model" in group_by,
        period="hour" if "hour" in group_by else "day" if "day" in group_by else None,
    )
    return UsageRequest(query, group_by, limit)


def _entry(row: Any, req: UsageRequest) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    query = req.query
    if query.period is not None:
        entry[query.period] = row["period"].isoformat()
    if query.by_key:
        entry["key_id"], entry["key_name"] = row["key_id"], row["key_name"]
    if query.by_tenant:
        entry["tenant"] = row["tenant"]
    if query.by_model:
        entry["model"] = row["model"]
    for name in COUNTS:
        entry[name] = int(row[name])
    entry["total_tokens"] = entry["prompt_tokens"] + entry["completion_tokens"]
    return entry


def build_usage_router(state: FrontendState) -> APIRouter:
    router = APIRouter()

    @router.get("/api/usage")
    async def usage(request: Request) -> JSONResponse:
        multi: dict[str, int] = {}
        for name, _value in request.query_params.multi_items():
            multi[name] = multi.get(name, 0) + 1
        try:
            req = parse_request(request.query_params, multi, dt.datetime.now(dt.UTC).timestamp())
        except BadParameter as exc:
            return JSONResponse(
                envelope(str(exc), "invalid_request_error", "invalid_value", exc.param), status_code=400
            )
        rows = await usage_store.report(state.pool, req.query, req.limit + 1)
        ledger = state.usage
        return JSONResponse(
            {
                "since": req.query.since.isoformat(),
                "until": None if req.query.until == TIME_MAX else req.query.until.isoformat(),
                "group_by": list(req.group_by),
                "usage": [_entry(row, req) for row in rows[: req.limit]],
                "truncated": len(rows) > req.limit,
                "flush_interval_s": None if ledger is None else ledger.flush_interval_s,
            }
        )

    return router
