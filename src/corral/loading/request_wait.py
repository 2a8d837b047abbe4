"""A request's cold path: claim the model's durable load job (or join the running one) and wait for it.

Per request, up to 3 rounds: register as a waiter, claim the job (one statement); the claimer starts
it in the background; everyone waits for its outcome (NATS event, polling fallback) within
LOCALAI_MODEL_LOAD_WAIT, then asks the caller's `find` for a replica. The replica type is the
caller's (routing's): loading only knows that a load finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from corral.loading.errors import LoadError, ModelStillLoading
from corral.loading.job import JobSettings, LoadJobRunner
from corral.loading.request_status import loading_message, loading_object, retry_after_s
from corral.loading.request_waiters import Outcome, Waiters
from corral.models.config import ModelConfig
from corral.placement.errors import PlacementError
from corral.store import load_jobs

MAX_ROUNDS = 3
STATUS_READ_TIMEOUT_S = 5.0

T = TypeVar("T")


class JobBusy(Exception):
    """Another load of the model runs (a request's or a peer's), or its owner vanished: look again later."""


def raise_failure(key: str, error: str, kind: str) -> None:
    if kind == "placement":
        raise PlacementError(error)
    raise LoadError(error or f"loading model {key} failed")


class ColdLoads:
    def __init__(
        self, runner: LoadJobRunner, waiters: Waiters, jobs: JobSettings, *, wait_budget_s: float
    ) -> None:
        self.runner, self.waiters, self.jobs, self.wait_budget_s = runner, waiters, jobs, wait_budget_s
        self.pool = runner.ctx.pool

    async def start(self) -> None:
        await self.waiters.start()

    async def close(self) -> None:
        await self.runner.close()

    async def load(self, cfg: ModelConfig, find: Callable[[], Awaitable[T | None]]) -> T:
        """A replica of `cfg` once its load job finished (`find` looks it up), within the wait budget."""
        key = cfg.name
        loop = asyncio.get_running_loop()
        deadline = None if self.wait_budget_s <= 0 else loop.time() + self.wait_budget_s
        for _round in range(MAX_ROUNDS):
            with self.waiters.register(key) as woken:
                claimed, job = await load_jobs.claim(
                    self.pool,
                    key,
                    self.jobs.owner,
                    orphan_s=self.jobs.orphan_s,
                    failed_grace_s=self.jobs.failed_grace_s,
                )
                if claimed:
                    found = await find()  # it may have loaded meanwhile
                    if found is not None:
                        await load_jobs.delete(self.pool, key, self.jobs.owner)
                        return found
                    self.runner.start(cfg)
                elif job is not None and job.state == "failed":
                    raise_failure(key, job.last_error, job.error_kind)
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                outcome = await self.waiters.wait(woken, key, remaining)
            if outcome is None:
                await self._still_loading(key)
            elif not outcome.ok and not outcome.orphaned:
                raise_failure(key, outcome.error, outcome.kind)
            found = await find()
            if found is not None:
                return found
        raise LoadError(f"loading model {key}: the load finished but the model is not available on any node")

    async def load_once(self, cfg: ModelConfig) -> Outcome:
        """Run one more load of `cfg` through its job and wait for it, unbounded (the replica reconciler).

        JobBusy when another load of the model runs or its owner vanished.
        """
        key = cfg.name
        with self.waiters.register(key) as woken:
            claimed, _job = await load_jobs.claim(
                self.pool,
                key,
                self.jobs.owner,
                orphan_s=self.jobs.orphan_s,
                failed_grace_s=self.jobs.failed_grace_s,
            )
            if not claimed:
                raise JobBusy(key)
            self.runner.start(cfg)
            outcome = await self.waiters.wait(woken, key, None)
        if outcome is None or outcome.orphaned:
            raise JobBusy(key)
        return outcome

    async def _still_loading(self, key: str) -> None:
        try:
            job = await asyncio.wait_for(load_jobs.get(self.pool, key), STATUS_READ_TIMEOUT_S)
        except TimeoutError:
            job = None
        if job is None:
            raise LoadError(
                f"timed out waiting for model {key} to load after {self.wait_budget_s:g}s "
                "(LOCALAI_MODEL_LOAD_WAIT)"
            )
        raise ModelStillLoading(
            loading_message(job), loading_object(job), retry_after_s(job, self.wait_budget_s)
        )
