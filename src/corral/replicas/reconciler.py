"""Replica reconciler: keeps every governing scheduling rule satisfied (reference §5.8).

One frontend at a time (try-lock `replica-reconciler`) runs a pass every interval. For each rule
that governs a model and auto-scales, `placement.replica_plan` decides; this loop carries it out:
  * loads go through the model's durable load job (the same de-duplication, heartbeat and hold
    as a request's cold load), so a request burst and the reconciler never load twice at once;
    the model's YAML is used when this frontend has it, its replay info (`model_load_infos`) otherwise;
  * stops use the evictor's exact, in-flight-safe protocol (mark unloading, every frontend drains,
    stop exactly that process);
  * a rule that cannot be satisfied is counted; after 3 passes it cools down (its status says why)
    until the cooldown ends or the registry changes (node registered/approved, labels, budgets);
  * a rule with autoscaling fields (issue 25) is decided by `placement.autoscale` over the cluster's load
    (replicas/load_reports.py); every pass stores why it scaled or not on the rule (its explain), and every
    scaling action of the reconciler is written to the activity record (op type "autoscale").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from corral.loading.replay import replay_config
from corral.loading.request_wait import JobBusy
from corral.models.aliases import Resolution, resolve
from corral.models.config import ModelConfig
from corral.placement.autoscale import LoadSignal, Verdict, decide
from corral.placement.governance import govern
from corral.placement.replica_plan import Plan, ReplicaRef, plan_replicas, registry_fingerprint
from corral.placement.rules import SchedulingRule
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.replicas.load_reports import LoadReports
from corral.routing.replica import replica_key
from corral.routing.router import Router
from corral.runtime.loops import run_periodic
from corral.store import operations
from corral.store import placement as placement_store
from corral.store import scheduling as scheduling_store
from corral.store.locks import KEY_REPLICA_RECONCILER

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcilerSettings:
    interval_s: float = 30.0
    idle_window_s: float = 300.0  # scale-down delay
    cooldown_s: float = 300.0  # after UNSATISFIABLE_TICKS failed passes
    autoscale_cooldown_s: float = 60.0  # between scaling actions on load, for a rule that sets none


class ReplicaReconciler:
    def __init__(
        self,
        router: Router,
        configs: Mapping[str, ModelConfig],
        aliases: Mapping[str, str],
        settings: ReconcilerSettings,
        clock: Callable[[], float] = time.time,
        loads: LoadReports | None = None,
    ) -> None:
        """`loads`: the cluster's per-model queue figures (None: no load is known, targets never fire)."""
        self.router, self.pool = router, router.ctx.pool
        self.configs, self.aliases, self.settings, self._clock = configs, aliases, settings, clock
        self.loads = loads
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
        now_s = self._clock()
        plan = plan_replicas(
            rule,
            model,
            selector,
            nodes,
            in_flight=self._in_flight,
            idle_s=self._idle_s,
            idle_window_s=rule.autoscale.scale_down_idle_s or self.settings.idle_window_s,
            autoscaler=self._autoscaler(rule, model, now_s),
        )
        loaded, stopped = await self._carry_out(rule, model, cfg, plan, fingerprint)
        await self._record(rule, model, plan, loaded, stopped, now_s)
        return plan

    def _autoscaler(self, rule: SchedulingRule, model: str, now_s: float) -> partial[Verdict] | None:
        if not rule.autoscale.configured:
            return None  # the reconciler's older behaviour, unchanged
        load = self.loads.signal(model) if self.loads is not None else LoadSignal()
        return partial(decide, rule, load, now_s=now_s, default_cooldown_s=self.settings.autoscale_cooldown_s)

    async def _carry_out(
        self, rule: SchedulingRule, model: str, cfg: ModelConfig | None, plan: Plan, fingerprint: str
    ) -> tuple[int, list[ReplicaRef]]:
        """Load and stop what the plan says; returns the replicas loaded and those stopped."""
        if plan.unsatisfiable:
            await self._unsatisfied(rule, plan.unsatisfiable, fingerprint)
            return 0, []
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
            return 0, []
        loaded = 0
        if plan.load and cfg is not None:
            loaded = await self._scale_up(rule, cfg, plan, fingerprint)
            if loaded < plan.load:
                return loaded, []
        await scheduling_store.satisfied(self.pool, rule.model_name)
        stopped = []
        for ref in plan.stop:
            why = f"by the replica reconciler ({ref.why}; rule {rule.model_name!r})"
            if await self.router.evictor.stop_replica(ref.node, ref.replica, why):
                stopped.append(ref)
                log.info(
                    "replica reconciler: stopped %s#%d on %s (%s) for rule %r",
                    model,
                    ref.replica.replica_index,
                    ref.node.name,
                    ref.why,
                    rule.model_name,
                )
        return loaded, stopped

    async def _record(
        self,
        rule: SchedulingRule,
        model: str,
        plan: Plan,
        loaded: int,
        stopped: list[ReplicaRef],
        now_s: float,
    ) -> None:
        """The pass's explain on the rule (autoscaling rules) and its action in the activity record (any rule)."""
        action = _action(plan, loaded, stopped)
        if plan.verdict is not None:
            reason = plan.unsatisfiable or plan.verdict.reason
            passes = 0 if loaded and plan.verdict.add else plan.verdict.over_passes
            await scheduling_store.autoscale_record(
                self.pool, rule.model_name, action or reason, passes, action or None, now_s
            )
        if action:
            await operations.record_done(
                self.pool,
                operations.NewOperation(
                    model,
                    AUTOSCALE_OP,
                    frontend_id=self.router.replicas.frontend_id,
                    message=f"rule {rule.model_name!r}: {action}",
                ),
            )

    async def _scale_up(self, rule: SchedulingRule, cfg: ModelConfig, plan: Plan, fingerprint: str) -> int:
        """Load the plan's replicas one by one; returns how many loaded (fewer: a failure or another load)."""
        for number in range(1, plan.load + 1):
            try:
                error = await self._load_one(cfg)
            except JobBusy:
                return number - 1
            if error:
                await self._unsatisfied(rule, error, fingerprint)
                return number - 1
            log.info(
                "replica reconciler: loaded a replica of %s for rule %r (%d/%d this pass; %s)",
                cfg.name,
                rule.model_name,
                number,
                plan.load,
                plan.summary(),
            )
        return plan.load

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


AUTOSCALE_OP = "autoscale"  # the activity record's op type of the reconciler's scaling actions


def _action(plan: Plan, loaded: int, stopped: list[ReplicaRef]) -> str:
    """What the pass did, in words ("" when nothing): the reason comes with it."""
    parts = []
    if loaded:
        before = plan.current + plan.pending
        if plan.verdict is not None and plan.verdict.add and before >= plan.low:
            parts.append(plan.verdict.reason)
        else:
            parts.append(
                f"+{loaded} replica(s) ({before} → {before + loaded}) to keep the minimum of {plan.low}"
            )
    if stopped:
        whys = sorted({_stop_words(ref) for ref in stopped})
        left = plan.current - len(stopped)
        load = f" ({plan.verdict.reason})" if plan.verdict is not None and plan.verdict.reason else ""
        parts.append(f"-{len(stopped)} replica(s) ({plan.current} → {left}): {', '.join(whys)}{load}")
    return "; ".join(parts)


def _stop_words(ref: ReplicaRef) -> str:
    return {
        "idle": "idle past the scale-down window",
        "misplaced": "node no longer matches the selector",
        "above max_replicas": "above max_replicas",
    }.get(ref.why, ref.why)
