"""Recovery sweep of ephemeral request inputs: what crashed or cut-off requests left behind.

At worker start and every :data:`SWEEP_INTERVAL_S` the sweep looks at each request directory
``<root>/<category>/<request id>/`` below each ephemeral root and removes it when the NEWEST file in it
(any depth; a directory without files: the directory itself) is older than :data:`ABANDONED_AFTER_S`,
unless the request still holds a reservation in the ledger. It never follows a symlink and never touches
anything but request directories below the roots (a root that is itself a symlink is skipped entirely).
What it keeps without a reservation is counted against the byte limit until released or swept.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corral.runtime.loops import run_periodic
from corral.staging.ephemeral_ledger import EphemeralLedger

log = logging.getLogger(__name__)

ABANDONED_AFTER_S = 3600.0
SWEEP_INTERVAL_S = 15 * 60.0


@dataclass
class SweepReport:
    removed: list[str] = field(default_factory=list)  # "<category>/<request id>" per root, in order
    removed_bytes: int = 0
    kept_bytes: dict[str, int] = field(default_factory=dict)  # request dirs kept, by their bytes on disk


def sweep_ephemeral(
    roots: Sequence[Path],
    ledger: EphemeralLedger,
    *,
    max_age_s: float = ABANDONED_AFTER_S,
    now: Callable[[], float] = time.time,
) -> SweepReport:
    """Remove abandoned request directories below ``roots`` (blocking: run it in a thread)."""
    for key in ledger.drop_abandoned():
        log.warning(
            "ephemeral input %s was reserved but never released for hours; its frontend is gone, so "
            "its reservation no longer protects it from the sweep",
            key,
        )
    active = ledger.active_request_dirs()
    report = SweepReport()
    cutoff = now() - max_age_s
    for root in dict.fromkeys(roots):  # the same directory named twice is swept once
        if root.is_symlink() or not root.is_dir():
            if root.is_symlink():
                log.warning("ephemeral root %s is a symlink; the sweep never follows one and skips it", root)
            continue
        for category in _subdirectories(root):
            for request in _subdirectories(category):
                name = f"{category.name}/{request.name}"
                newest_s, size_bytes = _newest_mtime_and_bytes(request)
                if name in active or newest_s >= cutoff:
                    report.kept_bytes[name] = report.kept_bytes.get(name, 0) + size_bytes
                    continue
                shutil.rmtree(request, ignore_errors=True)
                report.removed.append(name)
                report.removed_bytes += size_bytes
                log.info(
                    "ephemeral sweep: removed %s (%d bytes; newest file %.0f min old, no active request)",
                    request,
                    size_bytes,
                    (now() - newest_s) / 60,
                )
    ledger.count_unreserved(report.kept_bytes)
    return report


async def sweep_once(roots: Sequence[Path], ledger: EphemeralLedger) -> SweepReport:
    """One pass off the event loop, with a summary line when it removed anything."""
    report = await asyncio.to_thread(sweep_ephemeral, roots, ledger)
    if report.removed:
        log.info(
            "ephemeral sweep: removed %d abandoned request director%s (%d bytes)",
            len(report.removed),
            "y" if len(report.removed) == 1 else "ies",
            report.removed_bytes,
        )
    return report


async def run_sweeps(
    roots: Sequence[Path],
    ledger: EphemeralLedger,
    stop: asyncio.Event,
    *,
    interval_s: float = SWEEP_INTERVAL_S,
    delay_first: bool = False,
) -> None:
    """The worker's sweep loop: a pass every ``interval_s`` until ``stop`` (the first at once unless
    ``delay_first``: the worker runs its start-up pass itself, before its file server accepts inputs)."""
    await run_periodic(
        "ephemeral-sweep", lambda: sweep_once(roots, ledger), interval_s, stop, delay_first=delay_first
    )


def _subdirectories(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            return [Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError as exc:
        log.warning("ephemeral sweep: cannot list %s: %s", directory, exc)
        return []


def _newest_mtime_and_bytes(request_dir: Path) -> tuple[float, int]:
    """The newest mtime of the files below ``request_dir`` (its own when it holds none) and their bytes."""
    newest_s: float | None = None
    size_bytes = 0
    for current, _dirs, files in os.walk(request_dir):  # os.walk does not descend into symlinked directories
        for name in files:
            try:
                info = os.lstat(os.path.join(current, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                size_bytes += info.st_size
            newest_s = info.st_mtime if newest_s is None else max(newest_s, info.st_mtime)
    if newest_s is None:
        try:
            newest_s = os.lstat(request_dir).st_mtime
        except OSError:
            newest_s = 0.0
    return newest_s, size_bytes
