"""Scheduling rules (`model_scheduling_configs`): CRUD and the reconciler's back-off state."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import asyncpg

from corral.placement.rules import Autoscale, AutoscaleRecord, RuleSpec, SchedulingRule
from corral.placement.schedules import ScheduleInvalid, parse_schedules
from corral.store.locks import KEY_SCHEDULING_RULES
from corral.store.queries import q

UNSATISFIABLE_TICKS = 3  # reference: three failed passes, then a cooldown


def _selector(raw: str) -> dict[str, str]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def selector_text(selector: dict[str, str]) -> str:
    """Stored (and answered) as a JSON string, as the reference does; "" when there is none."""
    return json.dumps(selector, sort_keys=True) if selector else ""


def _autoscale(row: asyncpg.Record) -> Autoscale:
    try:  # validated on the way in; a zone the system no longer knows drops the windows rather than the rule
        schedules = parse_schedules(json.loads(row["schedules"]) if row["schedules"] else None)
    except (ScheduleInvalid, ValueError):
        schedules = ()
    return Autoscale(
        target_queue_wait_s=row["target_queue_wait_s"],
        target_ttft_s=row["target_ttft_s"],
        scale_down_idle_s=row["scale_down_idle_s"],
        cooldown_s=row["autoscale_cooldown_s"],
        schedules=schedules,
    )


def _record(row: asyncpg.Record) -> AutoscaleRecord:
    return AutoscaleRecord(
        reason=row["autoscale_reason"],
        checked_s=row["autoscale_checked_s"],
        over_passes=int(row["autoscale_over_passes"]),
        last_action=row["autoscale_last_action"],
        last_action_s=row["autoscale_last_action_s"],
    )


def from_row(row: asyncpg.Record) -> SchedulingRule:
    return SchedulingRule(
        id=row["id"],
        model_name=row["model_name"],
        node_selector=_selector(row["node_selector"]),
        min_replicas=int(row["min_replicas"]),
        max_replicas=int(row["max_replicas"]),
        spread_all=bool(row["spread_all"]),
        route_policy=row["route_policy"],
        balance_abs_threshold=int(row["balance_abs_threshold"]),
        balance_rel_threshold=float(row["balance_rel_threshold"]),
        min_prefix_match=float(row["min_prefix_match"]),
        unsatisfiable_until_s=row["unsatisfiable_until_s"],
        unsatisfiable_ticks=int(row["unsatisfiable_ticks"]),
        unsatisfiable_reason=row["unsatisfiable_reason"],
        unsatisfiable_fingerprint=row["unsatisfiable_fingerprint"],
        declared=bool(row["declared"]),
        created_s=float(row["created_s"]),
        updated_s=float(row["updated_s"]),
        autoscale=_autoscale(row),
        record=_record(row),
    )


async def all_rules(pool: asyncpg.Pool) -> list[SchedulingRule]:
    return [from_row(r) for r in await pool.fetch(q("rules_all"))]


async def get(pool: asyncpg.Pool, name: str) -> SchedulingRule | None:
    row = await pool.fetchrow(q("rule_get"), name)
    return from_row(row) if row else None


async def upsert(
    pool: asyncpg.Pool | asyncpg.Connection, spec: RuleSpec, *, declared: bool = False
) -> SchedulingRule:
    row = await pool.fetchrow(
        q("rule_upsert"),
        str(uuid.uuid4()),
        spec.model_name,
        selector_text(spec.node_selector),
        spec.min_replicas,
        spec.max_replicas,
        spec.spread_all,
        spec.route_policy,
        spec.balance_abs_threshold,
        spec.balance_rel_threshold,
        spec.min_prefix_match,
        declared,
        spec.autoscale.target_queue_wait_s,
        spec.autoscale.target_ttft_s,
        spec.autoscale.scale_down_idle_s,
        spec.autoscale.cooldown_s,
        json.dumps([w.to_json() for w in spec.autoscale.schedules]),
    )
    return from_row(row)


class RuleConflict(Exception):
    """Another rule already governs the model; `rule` names it."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


async def upsert_unless_governed(
    pool: asyncpg.Pool, spec: RuleSpec, conflict: Callable[[list[SchedulingRule]], str | None]
) -> SchedulingRule:
    """Upsert unless `conflict(rules)` names another rule governing the target (RuleConflict).

    Serialised by a transaction-scoped advisory lock, so two admins cannot both take one model.
    """
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", KEY_SCHEDULING_RULES)
        other = conflict([from_row(r) for r in await conn.fetch(q("rules_all"))])
        if other is not None:
            raise RuleConflict(other)
        return await upsert(conn, spec)


async def loaded_counts(pool: asyncpg.Pool) -> dict[str, int]:
    return {r["model_name"]: int(r["loaded"]) for r in await pool.fetch(q("loaded_replica_counts"))}


async def seed(pool: asyncpg.Pool, specs: list[RuleSpec]) -> None:
    """Declarative rules at boot, in one transaction: every listed model's whole row is replaced."""
    async with pool.acquire() as conn, conn.transaction():
        for spec in specs:
            await upsert(conn, spec, declared=True)


async def delete(pool: asyncpg.Pool, name: str) -> bool:
    return await pool.fetchrow(q("rule_delete"), name) is not None


async def unsatisfied(pool: asyncpg.Pool, name: str, reason: str, fingerprint: str, cooldown_s: float) -> int:
    """Count a failed pass; returns the tick count (the cooldown starts at UNSATISFIABLE_TICKS)."""
    ticks = await pool.fetchval(
        q("rule_unsatisfied"), name, reason[:2000], fingerprint, UNSATISFIABLE_TICKS, cooldown_s
    )
    return int(ticks or 0)


async def satisfied(pool: asyncpg.Pool, name: str) -> None:
    await pool.execute(q("rule_satisfied"), name)


async def note(pool: asyncpg.Pool, name: str, reason: str) -> None:
    await pool.execute(q("rule_note"), name, reason[:2000])


async def clear_cooldowns(pool: asyncpg.Pool) -> None:
    await pool.execute(q("rules_clear_cooldowns"))


async def autoscale_record(
    pool: asyncpg.Pool, name: str, reason: str, over_passes: int, action: str | None, now_s: float
) -> None:
    """Store the autoscaler's pass over a rule (its explain); `action` when it scaled, at `now_s`."""
    await pool.execute(
        q("rule_autoscale_record"),
        name,
        reason[:2000],
        over_passes,
        None if action is None else action[:2000],
        now_s,
    )
