"""Autoscaling on load (issue 25): one rule's decision for one reconciler pass, pure, with its reason in words.

Inputs: the rule (targets, idle window, cooldown, schedules), the cluster's load on the model (the live frontends'
queue reports: the worst wait p95 and TTFT p95, the summed depth), the replica counts, the memory of the last
passes (stored on the rule: consecutive passes over target, the last action's time) and the clock.

The choices, in this order:
  1. the minimum is the rule's `min_replicas`, raised by the schedule windows that hold now (schedules.py);
  2. scale up (+1) when a signal is over its target on UP_PASSES consecutive passes (hysteresis: one slow
     pass is not a trend), and the last scaling action is at least `cooldown_s` old, and a replica slot is
     free, and the model is below `max_replicas`, and no replica is already loading (the load in progress is
     the answer to the load seen);
  3. scale down only when every signal is at most DOWN_FRACTION × its target (the hysteresis band between
     the two keeps a model at the edge of its target from flapping) and the cooldown is over: then the
     replicas idle for the idle window (`scale_down_idle_s`, else CORRAL_SCALE_DOWN_IDLE) above the floor
     are stopped (replica_plan's shrink). The floor is the minimum, or one replica — zero only when the rule
     sets `scale_down_idle_s` with a minimum of 0 (scale to zero: the next request loads it again).
A rule without load targets keeps the reconciler's older burst (one more when every replica is busy).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from corral.placement.rules import AutoscaleRecord, SchedulingRule
from corral.placement.schedules import scheduled_min

UP_PASSES = 2  # consecutive passes over target before a replica is added
DOWN_FRACTION = 0.5  # every signal at most this share of its target before load-added replicas may go


@dataclass(frozen=True)
class LoadSignal:
    """A model's load across the live frontends (replicas/load_reports.py)."""

    wait_p95_s: float = 0.0  # worst queue wait p95 (a still-waiting request's wait counts)
    ttft_p95_s: float = 0.0  # worst time to first token p95
    depth: int = 0  # requests waiting, summed
    frontends: int = 0  # frontends reporting

    def words(self) -> str:
        return (
            f"queue wait p95 {_s(self.wait_p95_s)}, TTFT p95 {_s(self.ttft_p95_s)}, {self.depth} waiting "
            f"({self.frontends} frontend(s) reporting)"
        )


@dataclass(frozen=True)
class Counts:
    current: int  # loaded on matching nodes
    pending: int  # loading on matching nodes
    capacity: int  # free replica slots on matching nodes
    high: int | None  # ceiling (None: no bound)


@dataclass(frozen=True)
class Verdict:
    low: int  # the minimum this pass (schedules included)
    floor: int  # idle replicas are stopped down to this many
    add: int  # replicas to add for load (0 or 1)
    allow_idle_stop: bool  # idle replicas above the floor may be stopped this pass
    busy_burst: bool  # the older rule (+1 when every replica is busy) applies: no load targets
    reason: str  # why, in one sentence: scaled or not
    over_passes: int  # consecutive passes over target, to remember


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"


def _clock(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%H:%M:%S UTC")


def effective_min(rule: SchedulingRule, now_s: float) -> tuple[int, str]:
    """The rule's minimum raised by the schedule window that holds now, and the words for it ("" when none)."""
    scheduled, window = scheduled_min(rule.autoscale.schedules, now_s)
    if window is None or scheduled <= rule.min_replicas:
        return rule.min_replicas, ""
    return scheduled, f"schedule {window.label()} raises the minimum to {scheduled}"


def _breaches(rule: SchedulingRule, load: LoadSignal, factor: float = 1.0) -> list[str]:
    """The signals over `factor` × their targets, in words."""
    scaling, out = rule.autoscale, []
    if scaling.target_queue_wait_s is not None and load.wait_p95_s > scaling.target_queue_wait_s * factor:
        out.append(
            f"queue wait p95 {_s(load.wait_p95_s)} > target {_target(scaling.target_queue_wait_s, factor)}"
        )
    if scaling.target_ttft_s is not None and load.ttft_p95_s > scaling.target_ttft_s * factor:
        out.append(f"TTFT p95 {_s(load.ttft_p95_s)} > target {_target(scaling.target_ttft_s, factor)}")
    return out


def _target(target_s: float, factor: float) -> str:
    return _s(target_s) if factor == 1.0 else f"{_s(target_s)} × {factor:g}"


def _cooldown_until(record: AutoscaleRecord, cooldown_s: float) -> float | None:
    return None if record.last_action_s is None else record.last_action_s + cooldown_s


def decide(
    rule: SchedulingRule,
    load: LoadSignal,
    counts: Counts,
    now_s: float,
    *,
    default_cooldown_s: float,
) -> Verdict:
    """One pass's scaling decision for `rule` (see the module's docstring for the order of the choices)."""
    scaling, record = rule.autoscale, rule.record
    low, why_low = effective_min(rule, now_s)
    if counts.high is not None:
        low = min(low, counts.high)
    scale_to_zero = scaling.scale_down_idle_s is not None and low == 0
    floor = 0 if scale_to_zero else max(low, 1)
    prefix = f"{why_low}; " if why_low else ""
    base = Verdict(low, floor, 0, True, not scaling.on_load, "", 0)
    if not scaling.on_load:
        idle = scaling.scale_down_idle_s
        said = f"idle replicas above {floor} stop after {_s(idle)} idle" if idle is not None else ""
        return replace(base, reason="; ".join(p for p in (why_low, said) if p))
    cooldown_s = scaling.cooldown_s if scaling.cooldown_s is not None else default_cooldown_s
    until = _cooldown_until(record, cooldown_s)
    cooling = until is not None and until > now_s
    over = _breaches(rule, load)
    if over:
        passes = record.over_passes + 1
        held = replace(base, allow_idle_stop=False, over_passes=passes)
        said = prefix + "; ".join(over)
        why_not = _why_not_up(counts, passes, until if cooling else None, cooldown_s)
        if why_not:
            return replace(held, reason=f"{said}: {why_not}")
        return replace(held, add=1, reason=f"{said}: +1 replica ({counts.current} → {counts.current + 1})")
    if _breaches(rule, load, DOWN_FRACTION):
        band = f"between {DOWN_FRACTION:g} × target and target (hysteresis)"
        return replace(base, allow_idle_stop=False, reason=f"{prefix}{load.words()}: {band}: not scaled")
    if cooling and until is not None and counts.current > floor:
        return replace(
            base,
            allow_idle_stop=False,
            reason=f"{prefix}{load.words()}: under target; cooldown until {_clock(until)} before scaling down",
        )
    return replace(
        base,
        reason=f"{prefix}{load.words()}: under target; idle replicas above {floor} stop after their idle window",
    )


def _why_not_up(counts: Counts, passes: int, cooling_until: float | None, cooldown_s: float) -> str:
    """Why a model over its target gets no replica this pass ("" when it gets one)."""
    if counts.high is not None and counts.current + counts.pending >= counts.high:
        return f"at max_replicas {counts.high}: not scaled"
    if counts.pending:
        return f"{counts.pending} replica(s) loading already: not scaled"
    if passes < UP_PASSES:
        return f"pass {passes} of {UP_PASSES} over target: not scaled yet"
    if cooling_until is not None:
        return f"cooldown until {_clock(cooling_until)} (cooldown_s {cooldown_s:g}): not scaled"
    if counts.capacity == 0:
        return (
            "no free replica slot on the matching nodes (raise LOCALAI_MAX_REPLICAS_PER_MODEL or add nodes): "
            "not scaled"
        )
    return ""
