"""Run one claimed load job in the background: the cold load, its 1 s heartbeat, and its hold watchdog.

The job belongs to the frontend process, not to the request that claimed it: a client that
disconnects ends only its own wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from corral.loading.attempt_deadline import LOAD_BASE_S, load_budget_s
from corral.loading.context import LoadContext, LoadedReplica
from corral.loading.errors import LoadError
from corral.loading.job_hold import LoadHold, base_budget_s
from corral.loading.job_nodes import cold_load
from corral.loading.job_progress import PENDING, STAGING, LoadProgress
from corral.loading.request_waiters import HINT, Outcome, Waiters
from corral.models.config import ModelConfig
from corral.placement.errors import PlacementError
from corral.store import load_jobs, operations
from corral.telemetry import tracing
from corral.telemetry.families import LOAD_SECONDS

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
PLACEMENT = "placement"
LOST = "lost"  # this frontend no longer owns the job: its waiters follow the job row, not this attempt
LOST_JOB = (
    "this frontend no longer owns the load job (another frontend took it over after its heartbeat "
    "went silent, or it was failed or removed elsewhere)"
)
FAILED_GRACE_S = 15.0


@dataclass(frozen=True)
class JobSettings:
    owner: str  # this frontend process's id
    stall_s: float
    orphan_s: float
    failed_grace_s: float = FAILED_GRACE_S
    heartbeat_s: float = HEARTBEAT_S


class LoadJobRunner:
    def __init__(
        self,
        ctx: LoadContext,
        settings: JobSettings,
        waiters: Waiters,
        on_loaded: Callable[[LoadedReplica], Awaitable[None]],
    ) -> None:
        self.ctx, self.settings, self.waiters, self.on_loaded = ctx, settings, waiters, on_loaded
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, cfg: ModelConfig) -> None:
        task = asyncio.create_task(self._run(cfg), name=f"load-job:{cfg.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, cfg: ModelConfig) -> None:
        started_s, outcome = time.monotonic(), "cancelled"
        try:
            with tracing.span("corral.load", {"corral.model": cfg.name}):
                outcome = await self._load(cfg)
        finally:
            LOAD_SECONDS.labels(cfg.name, outcome).observe(time.monotonic() - started_s)
        if outcome not in ("loaded", LOST):  # the failure stays visible, then the next try may run
            await asyncio.sleep(self.settings.failed_grace_s)
            await load_jobs.delete(self.ctx.pool, cfg.name, self.settings.owner)

    async def _load(self, cfg: ModelConfig) -> str:
        """Run the job; its outcome: loaded, failed, placement (no node fits) or lost (no longer ours)."""
        key, owner = cfg.name, self.settings.owner
        progress = LoadProgress()
        load_timeout_s = self.ctx.load_timeout_override_s or LOAD_BASE_S
        hold = LoadHold(base_budget_s(self.ctx.install_timeout_s, load_timeout_s), self.settings.stall_s)
        budget_s = load_budget_s(cfg.checkpoint_bytes(), self.ctx.load_timeout_override_s)

        phase_changed = asyncio.Event()
        install_shown: list[object] = [None]  # the install phase / worker-busy mark last made visible

        def on_work() -> None:
            if progress.state != hold.phase:
                hold.enter(progress.state, budget_s)
                phase_changed.set()  # waiters and the 503 body see a new phase at once, not a beat later
            else:
                hold.worked()
            install = progress.install_json()
            install_key = (install or {}).get("phase"), (install or {}).get("worker_busy")
            if install is not None and install_key != install_shown[0]:
                install_shown[0] = install_key
                phase_changed.set()  # a new install phase or "worker busy" shows at once too

        progress.listeners.append(on_work)
        # the activity record is written beside the load, not before it: a cold start waits on no bookkeeping
        recording = asyncio.create_task(self._activity_start(key), name=f"load-record:{key}")
        load = asyncio.create_task(cold_load(self.ctx, cfg, progress), name=f"cold-load:{key}")
        why_stopped: list[str] = []
        helpers = [
            asyncio.create_task(
                self._heartbeat(key, progress, load, why_stopped, phase_changed), name=f"job-beat:{key}"
            ),
            asyncio.create_task(self._watchdog(hold, progress, load, why_stopped), name=f"job-hold:{key}"),
        ]
        try:
            replica = await load
        except asyncio.CancelledError:
            if not why_stopped:  # the frontend is shutting down: leave the job to be reclaimed
                recording.cancel()
                raise
            activity = await recording
            if (
                why_stopped[0] == LOST_JOB
            ):  # not this attempt's failure to announce: the job goes on elsewhere
                log.warning("loading model %s: %s; its waiters here follow the job", key, LOST_JOB)
                await self._activity_end(activity, operations.FAILED, f"loading model {key}: {LOST_JOB}")
                self.waiters.notify(
                    key, HINT
                )  # they read the job row: still running, failed, or gone (claim anew)
                return LOST
            await self._failed(key, f"loading model {key}: {why_stopped[0]}", activity=activity)
        except PlacementError as exc:  # no node fits: the scheduler's own sentence, retryable
            await self._failed(key, str(exc), PLACEMENT, activity=await recording)
            return PLACEMENT
        except Exception as exc:  # every failure reaches every waiter with its real cause
            message = str(exc) if isinstance(exc, LoadError) else f"loading model {key}: {exc}"
            await self._failed(key, message, activity=await recording)
        else:
            await self.on_loaded(replica)  # routable here from now on
            self.waiters.notify(
                key, Outcome(ok=True)
            )  # this frontend's waiters go first; the bookkeeping follows
            await self._activity_end(
                await recording,
                operations.COMPLETED,
                "",
                f"loaded on {replica.node_name} (replica {replica.replica_index})",
            )
            await load_jobs.delete(self.ctx.pool, key, owner)
            await self.waiters.announce(key, Outcome(ok=True))
            return "loaded"
        finally:
            progress.end_phase()
            for helper in helpers:
                helper.cancel()
        return "failed"

    async def _activity_start(self, key: str) -> str:
        """The activity record's row of this load (best effort: a record that cannot be written never
        holds a load up)."""
        try:
            row = await operations.insert(
                self.ctx.pool,
                operations.NewOperation(
                    key, operations.MODEL_LOAD, frontend_id=self.settings.owner, message=f"loading {key}"
                ),
                status=operations.PROCESSING,
            )
        except Exception as exc:
            log.debug("activity record of the load of %s not written: %s", key, exc)
            return ""
        return str(row["id"])

    async def _activity_end(self, op_id: str, status: str, error: str, message: str = "") -> None:
        if op_id:
            try:
                await operations.finish(self.ctx.pool, op_id, status, error, message)
            except Exception as exc:
                log.debug("activity record of load %s not finished: %s", op_id, exc)

    async def _failed(self, key: str, message: str, kind: str = "load", activity: str = "") -> None:
        log.warning("%s", message)
        await self._activity_end(activity, operations.FAILED, message)
        await load_jobs.fail(self.ctx.pool, key, self.settings.owner, message, kind)
        await self.waiters.announce(key, Outcome(ok=False, error=message, kind=kind))

    async def _heartbeat(
        self,
        key: str,
        progress: LoadProgress,
        load: asyncio.Task[LoadedReplica],
        why_stopped: list[str],
        phase_changed: asyncio.Event,
    ) -> None:
        while not load.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(phase_changed.wait(), self.settings.heartbeat_s)
            phase_changed.clear()
            try:
                owned = await load_jobs.heartbeat(
                    self.ctx.pool,
                    key,
                    self.settings.owner,
                    state=progress.state,
                    node_id=progress.node_id,
                    node_name=progress.node_name,
                    replica_index=progress.replica_index,
                    bytes_sent=progress.bytes_sent,
                    total_bytes=progress.total_bytes,
                    file_index=progress.file_index,
                    total_files=progress.total_files,
                    moving=progress.started_at_s is not None,
                    install=progress.install_json(),
                )
            except Exception as exc:  # a database blip must not kill the load; the next beat retries
                log.warning("load job heartbeat for %s failed: %s", key, exc)
                continue
            if not owned and not load.done():
                why_stopped.append(LOST_JOB)
                load.cancel()

    async def _watchdog(
        self,
        hold: LoadHold,
        progress: LoadProgress,
        load: asyncio.Task[LoadedReplica],
        why_stopped: list[str],
    ) -> None:
        tick_s = max(0.05, min(1.0, hold.stall_s / 20))
        while not load.done():
            await asyncio.sleep(tick_s)
            reason = hold.expired_reason()
            if reason and hold.phase == STAGING and progress.abandon_node(reason):
                hold.enter(PENDING)  # the node stalled, not the load: the next node gets a fresh budget
                continue
            if reason and not load.done():
                why_stopped.append(reason)
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await load
