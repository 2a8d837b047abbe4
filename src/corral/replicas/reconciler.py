"""Replica reconciler: keeps every governing scheduling rule satisfied (reference §5.8).

One frontend at a time (try-lock `replica-reconciler`) runs a pass every interval. For each rule
that governs a model and auto-scales, `placement.replica_plan` decides; this loop carries it out:
  * loads go through the model's durable load job (the same de-duplication, heartbeat and hold
    as a request's cold load), so a request burst and the reconciler never load twice at once;
    the model's YAML is used when this frontend has it, its replay info (`model_load_infos`) otherwise;
  * stops use the evictor's exact, in-flight-safe protocol (mark unloading, every frontend drains,
    stop exactly that process);
  * a rule that cannot be satisfied is counted; after 3 passes it cools down (its status says why)
    until the cooldown ends or the registry changes (node registered/approved, labels, budgets).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from corral.loading.replay import replay_config
from corral.loading.request_wait import JobBusy
from corral.models.aliases import Resolution, resolve
from corral.models.config import ModelConfig
from corral.placement.governance import govern
from corral.placement.replica_plan import Plan, plan_replicas, registry_fingerprint
from corral.placement.rules import SchedulingRule
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.routing.replica import replica_key
from corral.routing.router import Router
from corral.runtime.loops import run_periodic
from corral.store import placement as placement_store
from corral.store import scheduling as scheduling_store
from corral.store.locks import KEY_REPLICA_RECONCILER

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcilerSettings:
    interval_s: float = 30.0
    idle_window_s: float = 300.0  # scale-down delay
    cooldown_s: float = 300.0  # after UNSATISFIABLE_TICKS failed passes


class ReplicaReconciler:
    def __init__(
        self,
        router: Router,
        configs: Mapping[str, ModelConfig],
        aliases: Mapping[str, str],
        settings: ReconcilerSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.router, self.pool = router, router.ctx.pool
        self.configs, self.aliases, self.settings, self._clock = configs, aliases, settings, clock
        self.started_s = clock()  # idleness is only trusted from the moment this frontend watches
        self._registry_changed = False

    def on_node_event(self, _node_id: str, _status: str) -> None:
        """A node registered, was approved or changed status (any frontend): retry cooled-down rules."""
        self._registry_changed = True

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic(
            "replica reconciler", lambda: self._pass_until(stop), self.settings.interval_s, stop
        )

    async def _pass_until(self, stop: asyncio.Event) -> None:
        """One pass, abandoned at once on shutdown (its load job is left to be reclaimed)."""
        pass_task = asyncio.create_task(self.tick(), name="replica-reconciler-pass")
        stopper = asyncio.create_task(stop.wait(), name="replica-reconciler-stop")
        await asyncio.wait({pass_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not pass_task.done():
            pass_task.cancel()
            await asyncio.gather(pass_task, return_exceptions=True)
            return
        pass_task.result()  # a failed pass reaches the loop helper: logged, backed off, retried

    async def tick(self) -> bool:
        """One pass if this frontend wins the lock; False when another frontend is reconciling."""
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", KEY_REPLICA_RECONCILER):
                return False
            try:
                await self._pass()
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", KEY_REPLICA_RECONCILER)
        return True

    def _resolve(self, name: str) -> Resolution:
        return resolve(name, set(self.configs), self.aliases)

    async def _pass(self) -> None:
        if self._registry_changed:
            self._registry_changed = False
            await scheduling_store.clear_cooldowns(self.pool)
        rules = await scheduling_store.all_rules(self.pool)
        governance = govern(rules, self._resolve)
        for rule in rules:
            g = governance[rule.model_name]
            if g.governs and g.target is not None and rule.autoscaling:
                await self.reconcile(rule, g.target)

    def _key(self, node: NodeSnapshot, replica: ReplicaSnapshot) -> str:
        return replica_key(node.id, replica.model, replica.replica_index)

    def _in_flight(self, node: NodeSnapshot, replica: ReplicaSnapshot) -> float:
        return float(self.router.evictor.in_flight(self._key(node, replica)))

    def _idle_s(self, node: NodeSnapshot, replica: ReplicaSnapshot) -> float:
        last_s = max(
            replica.last_used_s, self.router.inflight.last_used_s(self._key(node, replica)), self.started_s
        )
        return max(0.0, self._clock() - last_s)

    async def reconcile(self, rule: SchedulingRule, model: str) -> Plan | None:
        nodes = await placement_store.snapshot(self.pool)
        fingerprint = registry_fingerprint(nodes)
        if rule.cooling_down(self._clock(), fingerprint):
            return None
        cfg = self.configs.get(model) or await replay_config(self.pool, model)
        if cfg is not None and cfg.disabled:  # its replicas are being stopped: never fight the edit
            await scheduling_store.note(
                self.pool, rule.model_name, f"{model} is disabled; enable it to scale it"
            )
            return None
        selector = {**(cfg.node_selector if cfg else {}), **rule.node_selector}
        plan = plan_replicas(
            rule,
            model,
            selector,
            nodes,
            in_flight=self._in_flight,
            idle_s=self._idle_s,
            idle_window_s=self.settings.idle_window_s,
        )
        if plan.unsatisfiable:
            await self._unsatisfied(rule, plan.unsatisfiable, fingerprint)
            return plan
        if plan.load and cfg is None:
            await scheduling_store.satisfied(
                self.pool, rule.model_name
            )  # not a capacity problem: no back-off
            await scheduling_store.note(
                self.pool,
                rule.model_name,
                (
                    f"{model} has no configuration on this frontend and no replay info yet; it is loaded on its "
                    "first request, after which the reconciler can scale it"
                ),
            )
            return plan
        if plan.load and cfg is not None and not await self._scale_up(rule, cfg, plan, fingerprint):
            return plan
        await scheduling_store.satisfied(self.pool, rule.model_name)
        for ref in plan.stop:
            why = f"by the replica reconciler ({ref.why}; rule {rule.model_name!r})"
            if await self.router.evictor.stop_replica(ref.node, ref.replica, why):
                log.info(
                    "replica reconciler: stopped %s#%d on %s (%s) for rule %r",
                    model,
                    ref.replica.replica_index,
                    ref.node.name,
                    ref.why,
                    rule.model_name,
                )
        return plan

    async def _scale_up(self, rule: SchedulingRule, cfg: ModelConfig, plan: Plan, fingerprint: str) -> bool:
        for number in range(1, plan.load + 1):
            try:
                error = await self._load_one(cfg)
            except JobBusy:
                return False
            if error:
                await self._unsatisfied(rule, error, fingerprint)
                return False
            log.info(
                "replica reconciler: loaded a replica of %s for rule %r (%d/%d this pass; %s)",
                cfg.name,
                rule.model_name,
                number,
                plan.load,
                plan.summary(),
            )
        return True

    async def _load_one(self, cfg: ModelConfig) -> str:
        """Load one more replica through the model's load job; "" on success, else the real cause."""
        outcome = await self.router.cold.load_once(cfg)  # JobBusy: another load runs, look again next pass
        return "" if outcome.ok else (outcome.error or f"loading model {cfg.name} failed")

    async def _unsatisfied(self, rule: SchedulingRule, reason: str, fingerprint: str) -> None:
        ticks = await scheduling_store.unsatisfied(
            self.pool, rule.model_name, reason, fingerprint, self.settings.cooldown_s
        )
        cooling = ticks >= scheduling_store.UNSATISFIABLE_TICKS
        log.warning(
            "replica reconciler: rule %r cannot be satisfied (pass %d%s): %s",
            rule.model_name,
            ticks,
            f"; cooling down for {self.settings.cooldown_s:g}s" if cooling else "",
            reason,
        )
