"""The usage ledger: every backend call's token counts per API key x model x UTC hour, counted in memory and written
to PostgreSQL in one statement per flush interval (CORRAL_USAGE_FLUSH_INTERVAL), never per request.

`record` (the router's `UsageSink`, on the event loop) adds to an in-memory row; a background task takes the rows
and writes them with one `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO UPDATE` (store/usage.py). A flush that
fails (PostgreSQL down) puts its rows back for the next one; past CORRAL_USAGE_MAX_PENDING rows the oldest are
dropped with a warning and `corral_usage_dropped_rows_total`. Closing the ledger flushes what is left.

`tokens_used` is what the quota check reads, without I/O: each key's day and month totals re-read from PostgreSQL
after every flush, plus what this frontend counted and has not seen in a re-read yet. Drift across frontends:
another frontend's counts reach this one's totals after its next flush and this one's next re-read, so a quota can
be overrun by at most about one flush interval of the other frontends' traffic of that key (two intervals when
their flush and this re-read interleave badly), plus the calls already running when the quota was reached.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Self

import asyncpg

from corral.runtime.loops import run_periodic
from corral.store import usage as usage_store
from corral.telemetry import families
from corral.tenancy.caller import ANONYMOUS_TENANT, Caller
from corral.tenancy.usage import Counts

log = logging.getLogger(__name__)

HOUR_S = 3600
DAY_S = 86400
STATEMENT_TIMEOUT_S = 30.0  # one flush or re-read statement; past it the flush counts as failed (rows kept)

RowKey = tuple[str, str, str, int]  # key id, tenant, model, hour (unix seconds of its start)
REQUESTS, PROMPT, COMPLETION, CACHED = range(4)  # the slots of a row's counts


def hour_of(at_s: float) -> int:
    """The start of the UTC hour holding `at_s` (unix seconds)."""
    return int(at_s // HOUR_S) * HOUR_S


def day_of(at_s: float) -> dt.date:
    return dt.datetime.fromtimestamp(at_s, dt.UTC).date()


def day_start_s(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


class PendingUsage:
    """Counts not yet written, per key x tenant x model x hour, in the order rows were first seen (oldest first),
    and each key's tokens per hour for `tokens_since`. Bounded: a row past `max_rows` drops the oldest row."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self.rows: dict[RowKey, list[int]] = {}
        self._key_hours: dict[str, dict[int, int]] = {}  # key id -> hour -> prompt + completion tokens
        self.dropped = 0  # rows dropped to keep the bound, since the last `take_dropped`

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, row_key: RowKey, counts: list[int]) -> None:
        row = self.rows.get(row_key)
        if row is None:
            if len(self.rows) >= self.max_rows:
                self._drop_oldest()
            self.rows[row_key] = list(counts)
        else:
            row[REQUESTS] += counts[REQUESTS]
            row[PROMPT] += counts[PROMPT]
            row[COMPLETION] += counts[COMPLETION]
            row[CACHED] += counts[CACHED]
        hours = self._key_hours.setdefault(row_key[0], {})
        hours[row_key[3]] = hours.get(row_key[3], 0) + counts[PROMPT] + counts[COMPLETION]

    def merge_newer(self, newer: PendingUsage) -> None:
        """Add the rows of `newer` (counted after these) after this one's: the oldest stay first to be dropped."""
        self.dropped += newer.dropped
        for row_key, counts in newer.rows.items():
            self.add(row_key, counts)

    def tokens_since(self, key_id: str, since_s: float) -> int:
        hours = self._key_hours.get(key_id)
        if not hours:
            return 0
        first = hour_of(since_s)
        return sum(tokens for hour, tokens in hours.items() if hour >= first)

    def take_dropped(self) -> int:
        dropped, self.dropped = self.dropped, 0
        return dropped

    def store_rows(self) -> list[usage_store.UsageRow]:
        return [usage_store.UsageRow(*row_key, *counts) for row_key, counts in self.rows.items()]

    def _drop_oldest(self) -> None:
        row_key = next(iter(self.rows))
        counts = self.rows.pop(row_key)
        hours = self._key_hours[row_key[0]]
        left = hours[row_key[3]] - counts[PROMPT] - counts[COMPLETION]
        if left > 0:
            hours[row_key[3]] = left
        else:
            del hours[row_key[3]]
            if not hours:
                del self._key_hours[row_key[0]]
        self.dropped += 1
        families.USAGE_DROPPED_ROWS.inc()


class UsageLedger:
    """The frontend's `UsageSink`; an async context manager: entering starts the flush loop, leaving flushes the
    rest (`build_frontend` enters it before the router, so it closes after the last request was counted)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        flush_interval_s: float,
        max_pending: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pool, self.flush_interval_s, self._clock = pool, flush_interval_s, clock
        self._pending = PendingUsage(max_pending)
        self._flushing: PendingUsage | None = None  # the rows being written
        # written, not yet in the totals (a re-read failed after the write)
        self._unread = PendingUsage(max_pending)
        today = day_of(clock())
        self._totals, self._totals_day_s = usage_store.KeyTotals(today, today.replace(day=1), {}, {}), 0.0
        self.use_totals(self._totals)  # nothing stored is known before the first re-read
        self._metrics: dict[str, list[int]] = {}  # model -> counts since the metrics were last published
        self._lock = asyncio.Lock()  # one flush at a time: the loop's and the closing one
        self._stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    # --- the warm path: no I/O, no await ---

    def record(self, caller: Caller, model: str, counts: Counts) -> None:
        key_id = caller.key_id
        tenant = caller.tenant if key_id else ANONYMOUS_TENANT
        row = [1, counts.prompt, counts.completion, counts.cached]
        self._pending.add((key_id, tenant, model, hour_of(self._clock())), row)
        figures = self._metrics.get(model)
        if figures is None:
            self._metrics[model] = row
        else:
            figures[REQUESTS] += 1
            figures[PROMPT] += counts.prompt
            figures[COMPLETION] += counts.completion
            figures[CACHED] += counts.cached

    def tokens_used(self, key_id: str, since_s: float) -> int:
        """Tokens (prompt + completion) of `key_id` since `since_s`, the start of the current UTC day or month (the
        quota windows): the stored total at the last re-read plus what this frontend counted since. No I/O."""
        counted = self._pending.tokens_since(key_id, since_s) + self._unread.tokens_since(key_id, since_s)
        if self._flushing is not None:
            counted += self._flushing.tokens_since(key_id, since_s)
        return self._stored_since(key_id, since_s) + counted

    def _stored_since(self, key_id: str, since_s: float) -> int:
        totals, day_s = self._totals, self._totals_day_s
        if since_s >= day_s + DAY_S:
            return 0  # a day that began after the last re-read: nothing of it was stored then
        if since_s >= day_s:
            return totals.day_tokens.get(key_id, 0)
        return totals.month_tokens.get(
            key_id, 0
        )  # the month is the longest window kept (quotas have no longer)

    def use_totals(self, totals: usage_store.KeyTotals) -> None:
        """The stored totals as re-read (each flush does; tests give their own)."""
        self._totals, self._totals_day_s = totals, day_start_s(totals.day)

    @property
    def pending_rows(self) -> int:
        return len(self._pending)

    # --- the flush loop ---

    async def flush(self, *, reread: bool = True) -> None:
        """Write the pending rows in one statement, then (`reread`) every key's totals. On a failed write the rows
        are kept for the next flush (and the error raised); the warm path goes on counting meanwhile."""
        async with self._lock:
            self._publish_metrics()
            batch, self._pending = self._pending, PendingUsage(self._pending.max_rows)
            self._flushing = batch
            try:
                await usage_store.add(self.pool, batch.store_rows(), STATEMENT_TIMEOUT_S)
            except BaseException:
                families.USAGE_FLUSH_FAILURES.inc()
                batch.merge_newer(self._pending)  # the failed rows are the oldest: first to go past the bound
                self._pending = batch
                raise
            else:
                self._unread.merge_newer(batch)
            finally:
                self._flushing = None
                self._warn_dropped()
            if not reread:
                return
            self.use_totals(
                await usage_store.key_totals(self.pool, day_of(self._clock()), STATEMENT_TIMEOUT_S)
            )
            self._unread = PendingUsage(self._pending.max_rows)

    def _publish_metrics(self) -> None:
        figures, self._metrics = self._metrics, {}
        for model, counts in figures.items():
            families.USAGE_REQUESTS.labels(model).inc(counts[REQUESTS])
            families.USAGE_TOKENS.labels(model, "prompt").inc(counts[PROMPT])
            families.USAGE_TOKENS.labels(model, "completion").inc(counts[COMPLETION])
            families.USAGE_TOKENS.labels(model, "cached").inc(counts[CACHED])

    def _warn_dropped(self) -> None:
        dropped = self._pending.take_dropped()
        if dropped:
            log.warning(
                "usage accounting dropped the %d oldest key x model x hour row(s): PostgreSQL has not taken them "
                "and %d rows were waiting; raise CORRAL_USAGE_MAX_PENDING to keep more through an outage",
                dropped,
                self._pending.max_rows,
            )

    async def __aenter__(self) -> Self:
        self.tasks = [
            asyncio.create_task(
                run_periodic("usage flush", self.flush, self.flush_interval_s, self._stop, delay_first=True),
                name="usage-flush",
            )
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the loop, then write what is left (one try, bounded by STATEMENT_TIMEOUT_S)."""
        self._stop.set()
        for task in self.tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                log.exception("usage flush loop ended with an error")
        self.tasks = []
        if not self._pending.rows:
            return
        try:
            await self.flush(reread=False)  # nobody reads the totals any more
        except Exception as exc:
            lost = sum(r[REQUESTS] for r in self._pending.rows.values())
            log.error(
                "usage of %d request(s) in %d row(s) could not be written at shutdown and is lost: %s: %s",
                lost,
                len(self._pending),
                type(exc).__name__,
                exc,
            )
