"""Drive durable backend intents (`pending_backend_ops`) to their end, on any frontend.

Each pass prunes intents that can no longer run (node draining, or offline/unhealthy for
`PRUNE_STALE_S`), then claims due intents one by one (`FOR UPDATE SKIP LOCKED` plus a lease of
`LEASE_S`, renewed every `LEASE_S / 3` while the request is in flight) and carries each out in a
task of its own, up to `CONCURRENCY` at once: an install to five nodes runs on five nodes at
once. A frontend that dies stops renewing; its leases run out and another frontend (or itself,
restarted) resumes the intents.

Outcomes (reference §2.8): success deletes the intent and completes its activity row; a failed
attempt waits 30 s × 2^(n-1) (capped at 15 min) and is dropped after 10 attempts; no reply within
the timeout means the worker is still busy — the row shows "worker busy" and the intent waits
one more timeout without counting an attempt. Worker progress events are shown on the row and
never end an operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import (
    BackendInstallProgressEvent,
    BackendInstallReply,
    BackendInstallRequest,
    BackendUpgradeReply,
    BackendUpgradeRequest,
    ValidationError,
)
from corral.routing import events
from corral.runtime.loops import backoff_s, run_periodic
from corral.store import backend_ops, operations
from corral.store import nodes as node_store

log = logging.getLogger(__name__)

TICK_S = 2.0  # new intents kick the loop at once; the tick paces retries and resumes
LEASE_S = 15.0
CONCURRENCY = 16
RETRY_FIRST_S, RETRY_CAP_S = 30.0, 15 * 60.0
DEAD_LETTER_ATTEMPTS = 10
PRUNE_STALE_S = 15 * 60.0
SWEEP_EVERY_S = 60.0  # prune dead intents and reap abandoned rows at most this often (not every tick)
STALE_OPERATION_S = 30 * 60.0  # a live row nothing drives (its frontend died mid synchronous op)
PROGRESS_WRITE_S = 0.25  # at most this often per operation: the worker debounces too
INSTALL_KNOB = "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT (--backend-install-timeout)"
UPGRADE_KNOB = "LOCALAI_NATS_BACKEND_UPGRADE_TIMEOUT (--backend-upgrade-timeout)"
DELETE_KNOB = "CORRAL_BACKEND_DELETE_TIMEOUT (--backend-delete-timeout)"
NODE_OP_KNOB = "CORRAL_NODE_OP_TIMEOUT (--node-op-timeout)"


@dataclass(frozen=True)
class BackendOpSettings:
    install_timeout_s: float
    upgrade_timeout_s: float
    delete_timeout_s: float = 120.0  # backend.delete (synchronous admin call)
    node_op_timeout_s: float = 30.0  # backend.list, model.unload, model.delete, backend logs
    lease_s: float = LEASE_S
    concurrency: int = CONCURRENCY


class Outcome(Exception):
    """How an attempt ended when it did not succeed: `busy` (timeout) or a counted failure."""

    def __init__(self, message: str, *, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy


def retry_delay_s(attempts: int) -> float:
    return backoff_s(attempts, RETRY_FIRST_S, RETRY_CAP_S)


async def forget_processes(pool: asyncpg.Pool, nc: Client, node: asyncpg.Record, keys: list[str]) -> int:
    """Delete the replica rows of the processes a worker reports stopped (`model#replica`) and tell every
    frontend: a recycled port must never be routed to as the old replica."""
    forgotten = 0
    for key in keys:
        model, _, replica = key.rpartition("#")
        if not model or not replica.isdigit():
            continue
        rows = await pool.fetch(
            "DELETE FROM node_models WHERE node_id = $1 AND model_name = $2 "
            "AND replica_index = $3 RETURNING address",
            node["id"],
            model,
            int(replica),
        )
        for row in rows:
            forgotten += 1
            await events.publish(
                nc,
                events.ReplicaEvent(
                    events.REMOVED, model, node["id"], node["name"], int(replica), row["address"]
                ),
            )
    return forgotten


class ProgressRelay:
    """Writes a worker's progress hints for one operation to its row, at most every PROGRESS_WRITE_S."""

    def __init__(self, pool: asyncpg.Pool, op_id: str, node_id: str) -> None:
        self.pool, self.op_id, self.node_id = pool, op_id, node_id
        self._last = 0.0

    async def on_msg(self, msg: Msg) -> None:
        try:
            event = BackendInstallProgressEvent.from_json(msg.data)
        except (ValidationError, ValueError):
            return
        if event.op_id != self.op_id or (event.node_id and event.node_id != self.node_id):
            return  # a hint about another operation, or from another node: not this row's
        now = time.monotonic()
        if now - self._last < PROGRESS_WRITE_S and event.percentage < 100:
            return
        self._last = now
        fraction = (
            min(max(event.percentage / 100.0, 0.0), 1.0) if event.percentage == event.percentage else 0.0
        )
        await operations.progress(
            self.pool,
            self.op_id,
            phase=(event.phase or "downloading")[:32],
            fraction=fraction,
            file_name=(event.file_name or "")[:1024],
            current=(event.current or "")[:64],
            total=(event.total or "")[:64],
        )


class BackendOpsDriver:
    def __init__(self, pool: asyncpg.Pool, nc: Client, frontend_id: str, settings: BackendOpSettings) -> None:
        self.pool, self.nc, self.frontend_id, self.settings = pool, nc, frontend_id, settings
        self._wake = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._last_sweep = -SWEEP_EVERY_S

    def kick(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await run_periodic("backend ops", self.pass_once, TICK_S, stop, wake=self._wake)
        finally:
            for task in list(self._running):
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)

    async def pass_once(self) -> None:
        if time.monotonic() - self._last_sweep >= SWEEP_EVERY_S:
            await self._sweep()
            self._last_sweep = time.monotonic()
        while len(self._running) < self.settings.concurrency:
            intent = await backend_ops.claim(self.pool, self.frontend_id, self.settings.lease_s)
            if intent is None:
                return
            task = asyncio.create_task(self._drive(intent), name=f"backend-op:{intent.op}:{intent.backend}")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _sweep(self) -> None:
        """Drop intents of draining or long-dead nodes, and fail rows nothing drives any more."""
        for row in await backend_ops.prune(self.pool, PRUNE_STALE_S):
            if row["operation_id"]:
                await operations.finish(
                    self.pool,
                    row["operation_id"],
                    operations.FAILED,
                    f"node {row['node_id']} is {row['status']}: the intent was dropped",
                )
        await operations.reap_stale(
            self.pool, STALE_OPERATION_S, "abandoned: no frontend drove this operation for 30 minutes"
        )

    async def _drive(self, intent: backend_ops.Intent) -> None:
        try:
            await self._drive_leased(intent)
        except asyncio.CancelledError:
            # This frontend stops: hand the intent back at once instead of letting its lease run out.
            with contextlib.suppress(Exception):
                await asyncio.shield(backend_ops.later(self.pool, intent.id, "frontend stopped", 0))
            raise
        except Exception:
            log.exception(
                "backend %s of %s on node %s failed unexpectedly", intent.op, intent.backend, intent.node_id
            )
            with contextlib.suppress(Exception):  # else its lease runs out and the next pass retries
                await backend_ops.retry(
                    self.pool,
                    intent.id,
                    intent.attempts + 1,
                    "internal error",
                    retry_delay_s(intent.attempts + 1),
                )

    async def _drive_leased(self, intent: backend_ops.Intent) -> None:
        op_id = intent.operation_id or ""
        node = await node_store.get(self.pool, intent.node_id)
        if node is None or node["status"] == node_store.DRAINING:
            await backend_ops.done(self.pool, intent.id)
            if op_id:
                why = "was removed" if node is None else "is draining"
                await operations.finish(self.pool, op_id, operations.FAILED, f"node {intent.node_id} {why}")
            return
        if op_id:
            await operations.start(
                self.pool,
                op_id,
                self.frontend_id,
                f"{intent.op} of {intent.backend} on {node['name']} "
                f"(attempt {intent.attempts + 1} of {DEAD_LETTER_ATTEMPTS})",
            )
        renewer = asyncio.create_task(self._renew(intent.id), name=f"lease:{intent.id}")
        try:
            message = await self._attempt(intent, node, op_id)
        except Outcome as outcome:
            await self._after_failure(intent, node, op_id, outcome)
        else:
            await backend_ops.done(self.pool, intent.id)
            if op_id:
                await operations.finish(self.pool, op_id, operations.COMPLETED, message=message)
            log.info("backend %s of %s on %s: %s", intent.op, intent.backend, node["name"], message)
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew(self, intent_id: int) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_s / 3)
            try:
                await backend_ops.renew(self.pool, intent_id, self.frontend_id, self.settings.lease_s)
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("could not renew the lease of backend intent %d: %s", intent_id, exc)

    async def _after_failure(
        self, intent: backend_ops.Intent, node: asyncpg.Record, op_id: str, outcome: Outcome
    ) -> None:
        if outcome.busy:
            delay_s = self._timeout(intent)
            await backend_ops.later(self.pool, intent.id, str(outcome), delay_s)
            if op_id:
                await operations.busy(self.pool, op_id, f"worker busy: {outcome}")
            log.warning(
                "backend %s of %s on %s: worker busy (%s)", intent.op, intent.backend, node["name"], outcome
            )
            return
        attempts = intent.attempts + 1
        if attempts >= DEAD_LETTER_ATTEMPTS:
            await backend_ops.done(self.pool, intent.id)
            if op_id:
                await operations.finish(
                    self.pool, op_id, operations.FAILED, str(outcome), f"gave up after {attempts} attempts"
                )
            log.warning(
                "backend %s of %s on %s dropped after %d attempts: %s",
                intent.op,
                intent.backend,
                node["name"],
                attempts,
                outcome,
            )
            return
        delay_s = retry_delay_s(attempts)
        await backend_ops.retry(self.pool, intent.id, attempts, str(outcome), delay_s)
        if op_id:
            await operations.retrying(
                self.pool,
                op_id,
                str(outcome),
                attempts,
                f"attempt {attempts} of {DEAD_LETTER_ATTEMPTS} failed; next in {delay_s:.0f}s",
            )
        log.warning(
            "backend %s of %s on %s failed (attempt %d, next in %.0fs): %s",
            intent.op,
            intent.backend,
            node["name"],
            attempts,
            delay_s,
            outcome,
        )

    def _timeout(self, intent: backend_ops.Intent) -> float:
        return (
            self.settings.upgrade_timeout_s
            if intent.op == backend_ops.UPGRADE
            else self.settings.install_timeout_s
        )

    async def _attempt(self, intent: backend_ops.Intent, node: asyncpg.Record, op_id: str) -> str:
        relay = ProgressRelay(self.pool, op_id, node["id"])
        sub = (
            await self.nc.subscribe(subjects.backend_install_progress(node["id"], op_id), cb=relay.on_msg)
            if op_id
            else None
        )
        try:
            if intent.op == backend_ops.UPGRADE:
                return await self._upgrade(intent, node, op_id)
            return await self._install(intent, node, op_id, force=False)
        finally:
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    async def _request(self, call: Callable[[], Awaitable[BackendInstallReply]]) -> BackendInstallReply:
        try:
            return await call()
        except bus.RequestTimeout as exc:
            raise Outcome(str(exc), busy=True) from None
        except bus.BusError as exc:
            raise Outcome(str(exc)) from None

    async def _install(
        self, intent: backend_ops.Intent, node: asyncpg.Record, op_id: str, *, force: bool
    ) -> str:
        req = BackendInstallRequest(
            backend=intent.backend,
            backend_galleries=intent.galleries,
            uri=intent.request.get("uri"),
            name=intent.request.get("name"),
            alias=intent.request.get("alias"),
            op_id=op_id or None,
            force=force or None,
        )
        reply = await self._request(
            lambda: bus.request(
                self.nc,
                subjects.backend_install(node["id"]),
                req,
                BackendInstallReply,
                self.settings.install_timeout_s,
                INSTALL_KNOB,
            )
        )
        if not reply.success:
            raise Outcome(reply.error or "the worker refused the install without saying why")
        return f"{intent.backend} installed on {node['name']}"

    async def _upgrade(self, intent: backend_ops.Intent, node: asyncpg.Record, op_id: str) -> str:
        req = BackendUpgradeRequest(
            backend=intent.backend,
            backend_galleries=intent.galleries,
            uri=intent.request.get("uri"),
            name=intent.request.get("name"),
            alias=intent.request.get("alias"),
            op_id=op_id or None,
        )
        try:
            reply = await bus.request(
                self.nc,
                subjects.backend_upgrade(node["id"]),
                req,
                BackendUpgradeReply,
                self.settings.upgrade_timeout_s,
                UPGRADE_KNOB,
            )
        except bus.NoResponders:
            # Reference behaviour for workers without backend.upgrade: a forced install.
            return await self._install(intent, node, op_id, force=True)
        except bus.RequestTimeout as exc:
            raise Outcome(str(exc), busy=True) from None
        except bus.BusError as exc:
            raise Outcome(str(exc)) from None
        if not reply.success:
            raise Outcome(reply.error or "the worker refused the upgrade without saying why")
        stopped = reply.stopped_process_keys or []
        forgotten = await forget_processes(self.pool, self.nc, node, stopped)
        return (
            f"{intent.backend} upgraded on {node['name']}; stopped {len(stopped)} process(es)"
            f"{': ' + ', '.join(stopped) if stopped else ''}; {forgotten} replica row(s) removed"
        )
