"""API keys' rate limits and token quotas (issue 25), checked per request by the access layer from memory.

Rate limits: requests (`rpm`) and tokens (`tpm`) per key over a sliding minute, counted in one-second slots. A
request is admitted while the key's count is below its limit and counted at once; its tokens are charged when
the engine reports them (`Limits.record`, a `UsageSink`), so the tokens of requests already admitted may carry a
key past `tpm` (by at most what they generate), never the next request. Keys without limits pay one attribute
test (`KeyPolicy.metered`) and nothing else; limited keys' responses carry OpenAI's `x-ratelimit-*` headers.

Across frontends: every frontend publishes the requests and tokens it counted per limited key since its last
publish every `sync_interval_s` (CORRAL_KEY_LIMITS_SYNC_INTERVAL) on NATS, and adds the others' into its own
windows as they arrive. A frontend therefore misses at most what the others admitted in their last unpublished
interval plus NATS's delivery time `d`: over any minute the cluster admits at most
`rpm + Σ_other frontends (requests they admitted for the key within sync_interval_s + d)` — with F frontends
each admitting at rate r: `rpm + (F − 1) · r · (sync_interval_s + d)` (tests/e2e/test_key_policy.py
measures it). Never more than F · rpm: each frontend's own count is exact.

Quotas: tokens per UTC day and per UTC calendar month, read from the usage ledger (`TokensUsed.tokens_used`: no
I/O, PostgreSQL totals refreshed in the background plus what is pending), so a quota holds across frontends
within the ledger's refresh interval and across restarts.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.bus.subjects import key_limit_counts
from corral.telemetry.families import KEY_REFUSALS
from corral.tenancy.caller import Caller
from corral.tenancy.policy import KeyPolicy
from corral.tenancy.usage import Counts

log = logging.getLogger(__name__)

WINDOW_S = 60  # "per minute": a sliding window of 60 one-second slots
RATE_LIMITED, OVER_QUOTA = "rate_limit_exceeded", "insufficient_quota"
SYNC_INTERVAL_SETTING = "CORRAL_KEY_LIMITS_SYNC_INTERVAL"

Header = tuple[bytes, bytes]


class TokensUsed(Protocol):
    """The usage ledger as the quotas read it (tenancy/ledger.py)."""

    def tokens_used(self, key_id: str, since_s: float) -> int:
        """Tokens (prompt + completion) `key_id` used since epoch second `since_s`; no I/O."""


class MinuteWindow:
    """Counts over the last WINDOW_S seconds in one-second slots, with a running total (amortised O(1))."""

    __slots__ = ("slots", "total")

    def __init__(self) -> None:
        self.slots: deque[list[int]] = deque()  # [second, count], oldest first
        self.total = 0

    def count(self, now_s: float) -> int:
        horizon = int(now_s) - WINDOW_S
        slots = self.slots
        while slots and slots[0][0] <= horizon:
            self.total -= slots.popleft()[1]
        return self.total

    def add(self, now_s: float, n: int) -> None:
        second = int(now_s)
        self.count(now_s)
        if self.slots and self.slots[-1][0] == second:
            self.slots[-1][1] += n
        else:
            self.slots.append([second, n])
        self.total += n

    def below_in_s(self, now_s: float, limit: int) -> float:
        """Seconds until the count falls below `limit` as slots leave the window (0: it is below already)."""
        over = self.count(now_s) - limit + 1
        for second, n in self.slots:
            over -= n
            if over <= 0:
                return max(second + WINDOW_S - now_s, 0.0)
        return 0.0

    def next_free_in_s(self, now_s: float) -> float:
        """Seconds until the oldest counted slot leaves the window (0: nothing counted)."""
        self.count(now_s)
        return max(self.slots[0][0] + WINDOW_S - now_s, 0.0) if self.slots else 0.0


@dataclass(slots=True)
class KeyWindows:
    requests: MinuteWindow
    tokens: MinuteWindow


@dataclass(frozen=True, slots=True)
class Refusal:
    """429 for a key past a limit or quota: OpenAI's body, Retry-After and, for rate limits, x-ratelimit-*."""

    code: str  # rate_limit_exceeded | insufficient_quota
    type: str  # OpenAI's: `requests` or `tokens` for a rate limit, insufficient_quota for a quota
    message: str
    retry_after_s: int
    headers: tuple[Header, ...] = ()

    @property
    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": None, "code": self.code}}


def reset_text(seconds: float) -> str:
    """OpenAI's x-ratelimit-reset-* format: `20ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return f"{max(int(seconds * 1000), 0)}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    minutes, rest = divmod(int(math.ceil(seconds)), 60)
    return f"{minutes}m{rest}s"


def day_start_s(now_s: float) -> float:
    day = datetime.fromtimestamp(now_s, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


def month_start_s(now_s: float) -> float:
    month = datetime.fromtimestamp(now_s, UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return month.timestamp()


def next_month_s(now_s: float) -> float:
    start = datetime.fromtimestamp(month_start_s(now_s), UTC)
    return start.timestamp() + calendar.monthrange(start.year, start.month)[1] * 86400


class Limits:
    """Every limited key's minute windows on this frontend, shared with the others over NATS (`run`).

    `ledger`: where quotas read the tokens used (build_frontend passes the usage ledger; None only where no
    quota can be set). `clock`: monotonic seconds of the windows; `wall_clock`: epoch seconds of the quota
    periods (UTC)."""

    def __init__(
        self,
        ledger: TokensUsed | None = None,
        *,
        sync_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        frontend_id: str | None = None,
    ) -> None:
        self.ledger, self.sync_interval_s = ledger, sync_interval_s
        self._clock, self._wall_clock = clock, wall_clock
        self.frontend_id = frontend_id or str(uuid.uuid4())
        self.windows: dict[str, KeyWindows] = {}  # key id → its windows (limited keys only)
        self._pending: dict[str, list[int]] = {}  # key id → [requests, tokens] not yet published

    # --- per request (the access layer) ---

    def admit(self, policy: KeyPolicy) -> tuple[Refusal | None, tuple[Header, ...]]:
        """(a refusal, or None and the request is counted; the x-ratelimit-* headers of its response)."""
        if policy.tokens_per_day or policy.tokens_per_month:
            refusal = self._quota_refusal(policy)
            if refusal is not None:
                KEY_REFUSALS.labels(OVER_QUOTA).inc()
                return refusal, ()
        if not policy.limited:
            return None, ()
        now = self._clock()
        windows = self._windows(policy.key_id)
        used_requests = windows.requests.count(now) if policy.rpm else 0
        used_tokens = windows.tokens.count(now) if policy.tpm else 0
        refusal = self._rate_refusal(policy, windows, now, used_requests, used_tokens)
        if refusal is not None:
            KEY_REFUSALS.labels(RATE_LIMITED).inc()
            return refusal, refusal.headers
        windows.requests.add(now, 1)
        self._pending_of(policy.key_id)[0] += 1
        return None, self._headers(policy, windows, now, used_requests + 1, used_tokens)

    def record(self, caller: Caller, model: str, counts: Counts) -> None:
        """UsageSink: the engine's counts of one call, charged to the caller's key's token window."""
        if caller.key_id:
            self.charge(caller.key_id, counts.total)

    def charge(self, key_id: str, tokens: int) -> None:
        """`tokens` served to `key_id` now (only keys with a window: keys without limits are not counted)."""
        windows = self.windows.get(key_id)
        if windows is None or tokens <= 0:
            return
        windows.tokens.add(self._clock(), tokens)
        self._pending_of(key_id)[1] += tokens

    def _windows(self, key_id: str) -> KeyWindows:
        windows = self.windows.get(key_id)
        if windows is None:
            windows = self.windows[key_id] = KeyWindows(MinuteWindow(), MinuteWindow())
        return windows

    def _pending_of(self, key_id: str) -> list[int]:
        pending = self._pending.get(key_id)
        if pending is None:
            pending = self._pending[key_id] = [0, 0]
        return pending

    def _rate_refusal(
        self, policy: KeyPolicy, windows: KeyWindows, now: float, used_requests: int, used_tokens: int
    ) -> Refusal | None:
        name = policy.name or policy.key_id
        if policy.rpm and used_requests >= policy.rpm:
            kind = "requests"
            wait_s = windows.requests.below_in_s(now, policy.rpm)
            message = (
                f"rate limit reached for API key {name!r}: {policy.rpm} requests per minute (its `rpm`), "
                f"{used_requests} used in the last minute; retry in {reset_text(wait_s)}"
            )
        elif policy.tpm and used_tokens >= policy.tpm:
            kind = "tokens"
            wait_s = windows.tokens.below_in_s(now, policy.tpm)
            message = (
                f"rate limit reached for API key {name!r}: {policy.tpm} tokens per minute (its `tpm`), "
                f"{used_tokens} used in the last minute; retry in {reset_text(wait_s)}"
            )
        else:
            return None
        retry_after = max(1, math.ceil(wait_s))
        headers = (
            (b"retry-after", str(retry_after).encode()),
            *self._headers(policy, windows, now, used_requests, used_tokens),
        )
        return Refusal(RATE_LIMITED, kind, message, retry_after, headers)

    def _headers(
        self, policy: KeyPolicy, windows: KeyWindows, now: float, used_requests: int, used_tokens: int
    ) -> tuple[Header, ...]:
        headers: list[Header] = []
        if policy.rpm:
            headers += [
                (b"x-ratelimit-limit-requests", str(policy.rpm).encode()),
                (b"x-ratelimit-remaining-requests", str(max(policy.rpm - used_requests, 0)).encode()),
                (b"x-ratelimit-reset-requests", reset_text(windows.requests.next_free_in_s(now)).encode()),
            ]
        if policy.tpm:
            headers += [
                (b"x-ratelimit-limit-tokens", str(policy.tpm).encode()),
                (b"x-ratelimit-remaining-tokens", str(max(policy.tpm - used_tokens, 0)).encode()),
                (b"x-ratelimit-reset-tokens", reset_text(windows.tokens.next_free_in_s(now)).encode()),
            ]
        return tuple(headers)

    def _quota_refusal(self, policy: KeyPolicy) -> Refusal | None:
        if self.ledger is None:
            return None
        now = self._wall_clock()
        name = policy.name or policy.key_id
        for quota, field, start, end, period in (
            (policy.tokens_per_day, "tokens_per_day", day_start_s(now), day_start_s(now) + 86400, "UTC day"),
            (policy.tokens_per_month, "tokens_per_month", month_start_s(now), next_month_s(now), "UTC month"),
        ):
            if not quota:
                continue
            used = self.ledger.tokens_used(policy.key_id, start)
            if used < quota:
                continue
            resets = datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            retry_after = max(1, math.ceil(end - now))
            message = (
                f"API key {name!r} used its quota of {quota} tokens per {period} (its `{field}`): {used} used; "
                f"it resets at {resets} (in {reset_text(end - now)}); raise it with PATCH "
                f"/api/keys/{policy.key_id}"
            )
            return Refusal(
                OVER_QUOTA, OVER_QUOTA, message, retry_after, ((b"retry-after", str(retry_after).encode()),)
            )
        return None

    # --- across frontends ---

    def prune(self) -> None:
        """Forget the windows of keys that counted nothing in the last minute (memory stays bounded by the keys
        in use, whatever arrives from NATS)."""
        now = self._clock()
        idle = [k for k, w in self.windows.items() if not w.requests.count(now) and not w.tokens.count(now)]
        for key_id in idle:
            del self.windows[key_id]

    def publishable(self) -> bytes | None:
        """What this frontend counted since the last call, as one NATS message (None: nothing)."""
        if not self._pending:
            return None
        pending, self._pending = self._pending, {}
        return orjson.dumps({"from": self.frontend_id, "keys": pending})

    def absorb(self, data: bytes) -> None:
        """Another frontend's counts, added to this one's windows now."""
        try:
            message = orjson.loads(data)
            if message["from"] == self.frontend_id:
                return
            now = self._clock()
            for key_id, (requests, tokens) in message["keys"].items():
                windows = self._windows(str(key_id))
                if requests > 0:
                    windows.requests.add(now, int(requests))
                if tokens > 0:
                    windows.tokens.add(now, int(tokens))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("ignoring malformed key limit counts on %s", key_limit_counts())

    async def run(self, nc: Client, stop: asyncio.Event) -> None:
        """Publish this frontend's counts every sync interval and add the others' until `stop`."""

        async def on_counts(msg: Msg) -> None:
            self.absorb(msg.data)

        subscription = await nc.subscribe(key_limit_counts(), cb=on_counts)
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.sync_interval_s)
                self.prune()
                data = self.publishable()
                if data is not None and nc.is_connected:
                    try:
                        await nc.publish(key_limit_counts(), data)
                    except Exception:  # NATS reconnecting: these counts are lost to the others, not to us
                        log.warning("could not publish key limit counts", exc_info=True)
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
