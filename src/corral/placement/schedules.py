"""Schedule windows of a scheduling rule: a higher minimum of replicas during a time of the week (issue 25).

A window is `{"days": ["mon", …], "from": "HH:MM", "to": "HH:MM", "tz": "Europe/Paris", "min_replicas": 3}`:
  * `days` (default: every day) are the days the window *starts* on, in its own time zone;
  * `to` at or before `from` wraps past midnight: `fri 22:00 → 06:00` holds from Friday 22:00 to Saturday 06:00
    (`from` == `to` is a whole day from `from`);
  * `tz` is an IANA zone (default UTC), so a window follows daylight saving time.
While several windows hold, the highest `min_replicas` wins; outside every window the rule's own minimum holds.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
SCHEDULES_MAX = 32
MIN_REPLICAS_MAX = 10_000
_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
FIELDS = ("days", "from", "to", "tz", "min_replicas")
DAY_MINUTES = 24 * 60


class ScheduleInvalid(ValueError):
    """A schedule window is wrong; `field` names it (`schedules[1].tz`) and the message says what to send."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field '{field}': {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class ScheduleWindow:
    days: tuple[str, ...]  # the days it starts on; all seven when none was given
    start: str  # "HH:MM"
    end: str  # "HH:MM"; at or before `start`: the window wraps past midnight
    tz: str
    min_replicas: int

    @property
    def _start_min(self) -> int:
        return int(self.start[:2]) * 60 + int(self.start[3:])

    @property
    def _end_min(self) -> int:
        return int(self.end[:2]) * 60 + int(self.end[3:])

    def active(self, now_s: float) -> bool:
        local = dt.datetime.fromtimestamp(now_s, zoneinfo.ZoneInfo(self.tz))
        minute = local.hour * 60 + local.minute
        today, yesterday = DAYS[local.weekday()], DAYS[(local.weekday() - 1) % 7]
        start, end = self._start_min, self._end_min
        if start < end:
            return today in self.days and start <= minute < end
        # wraps past midnight: the part after `from` belongs to today, the part before `to` to yesterday's window
        return (today in self.days and minute >= start) or (yesterday in self.days and minute < end)

    def label(self) -> str:
        days = "every day" if len(self.days) == len(DAYS) else ",".join(self.days)
        return f"{days} {self.start}-{self.end} {self.tz}"

    def to_json(self) -> dict[str, Any]:
        return {
            "days": list(self.days),
            "from": self.start,
            "to": self.end,
            "tz": self.tz,
            "min_replicas": self.min_replicas,
        }


def scheduled_min(windows: Sequence[ScheduleWindow], now_s: float) -> tuple[int, ScheduleWindow | None]:
    """The highest minimum among the windows that hold now, and that window (0, None when none holds)."""
    best: tuple[int, ScheduleWindow | None] = (0, None)
    for window in windows:
        if window.min_replicas > best[0] and window.active(now_s):
            best = (window.min_replicas, window)
    return best


def _days(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return DAYS
    if not isinstance(raw, list) or not raw:
        raise ScheduleInvalid(f"{where}.days", f'must be a non-empty list like ["mon", "fri"], got {raw!r}')
    days = set()
    for day in raw:
        name = day.strip().lower()[:3] if isinstance(day, str) else None
        if name not in DAYS:
            raise ScheduleInvalid(f"{where}.days", f"unknown day {day!r}; use {', '.join(DAYS)}")
        days.add(name)
    return tuple(d for d in DAYS if d in days)


def _clock(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not _CLOCK.match(raw.strip()):
        raise ScheduleInvalid(where, f'must be a 24-hour time "HH:MM" like "09:00", got {raw!r}')
    return raw.strip()


def _tz(raw: Any, where: str) -> str:
    if raw is None:
        return "UTC"
    if not isinstance(raw, str) or not raw.strip() or len(raw) > 64:
        raise ScheduleInvalid(where, f'must be an IANA time zone like "Europe/Paris", got {raw!r}')
    try:
        zoneinfo.ZoneInfo(raw.strip())
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ScheduleInvalid(
            where, f'unknown time zone {raw!r}; use an IANA name like "America/New_York" or "UTC"'
        ) from None
    return raw.strip()


def _window(raw: Any, where: str) -> ScheduleWindow:
    if not isinstance(raw, dict):
        raise ScheduleInvalid(
            where,
            'must be an object like {"days": ["mon"], "from": "09:00", "to": "17:00", "tz": "UTC", '
            f'"min_replicas": 2}}, got {raw!r}',
        )
    unknown = sorted(str(k) for k in raw if k not in FIELDS)
    if unknown:
        raise ScheduleInvalid(f"{where}.{unknown[0]}", f"unknown field; known fields: {', '.join(FIELDS)}")
    low = raw.get("min_replicas")
    if isinstance(low, bool) or not isinstance(low, int) or not 0 <= low <= MIN_REPLICAS_MAX:
        raise ScheduleInvalid(
            f"{where}.min_replicas", f"is required: a whole number 0-{MIN_REPLICAS_MAX}, got {low!r}"
        )
    return ScheduleWindow(
        days=_days(raw.get("days"), where),
        start=_clock(raw.get("from"), f"{where}.from"),
        end=_clock(raw.get("to"), f"{where}.to"),
        tz=_tz(raw.get("tz"), f"{where}.tz"),
        min_replicas=low,
    )


def parse_schedules(raw: Any, key: str = "schedules") -> tuple[ScheduleWindow, ...]:
    """Validate a list of windows; ScheduleInvalid names the first wrong one (`schedules[2].from`)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ScheduleInvalid(key, f"must be a list of schedule windows, got {raw!r}")
    if len(raw) > SCHEDULES_MAX:
        raise ScheduleInvalid(key, f"at most {SCHEDULES_MAX} windows, got {len(raw)}")
    return tuple(_window(item, f"{key}[{i}]") for i, item in enumerate(raw))
