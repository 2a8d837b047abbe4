"""Exit when the process that started this backend goes away.

A backend is a child of its worker. If the worker dies without stopping it, the backend gets
reparented (to init or a subreaper) and `os.getppid()` changes; we poll for that.
Env: `LOCALAI_BACKEND_PARENT_WATCH` (default on; `false/0/no/off` disables) and
`LOCALAI_BACKEND_PARENT_WATCH_INTERVAL` (default `2s`; a Go duration like `500ms`/`2s`/`1m`,
or plain seconds like `0.5`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from corral.config.parse import parse_duration_s

log = logging.getLogger(__name__)

__all__ = ["ParentWatchConfig", "parse_duration_s", "watch_parent"]

WATCH_ENV = "LOCALAI_BACKEND_PARENT_WATCH"
INTERVAL_ENV = "LOCALAI_BACKEND_PARENT_WATCH_INTERVAL"
DEFAULT_INTERVAL_S = 2.0


@dataclass(frozen=True)
class ParentWatchConfig:
    enabled: bool = True
    interval_s: float = DEFAULT_INTERVAL_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ParentWatchConfig:
        env = os.environ if env is None else env
        enabled = env.get(WATCH_ENV, "").strip().lower() not in ("false", "0", "no", "off")
        interval_s = DEFAULT_INTERVAL_S
        raw = env.get(INTERVAL_ENV, "").strip()
        if raw:
            try:
                interval_s = parse_duration_s(raw)
            except ValueError as exc:
                log.warning("%s=%r ignored (%s); using %gs", INTERVAL_ENV, raw, exc, DEFAULT_INTERVAL_S)
            if interval_s <= 0:
                log.warning("%s=%r must be > 0; using %gs", INTERVAL_ENV, raw, DEFAULT_INTERVAL_S)
                interval_s = DEFAULT_INTERVAL_S
        return cls(enabled=enabled, interval_s=interval_s)


async def watch_parent(config: ParentWatchConfig, on_parent_gone: Callable[[], None]) -> None:
    """Poll until the parent pid changes, then call `on_parent_gone` once and return."""
    if not config.enabled:
        return
    original_ppid = os.getppid()
    while True:
        await asyncio.sleep(config.interval_s)
        current = os.getppid()
        if current != original_ppid:
            log.warning(
                "parent process %d went away (now child of %d); shutting down", original_ppid, current
            )
            on_parent_gone()
            return
