"""The last hour of traffic, one slot per sample interval: every frontend's samples merged, and the nodes' memory.

A slot is keyed by its interval's number (`bucket`: unix seconds // interval); the ring keeps the newest
`capacity` of them (an hour), so memory is bounded whatever the traffic. A slot takes each frontend's sample
once (a repeated message adds nothing); a sample for a bucket the ring already moved past, or from a clock
far ahead, is dropped. `series()` reads the ring as the Dashboard's JSON (`GET /api/traffic`): arrays aligned
with `t` (the end of each interval), `null` where no frontend sampled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.telemetry.traffic_sample import FrontendSample, ModelSample, merged, quantile_s

WINDOW_MAX_S = 3600.0
FRONTENDS_MAX, NODES_MAX = 1000, 10_000  # per snapshot slot: bounds on what a peer's reply may make us keep
FUTURE_BUCKETS = 2  # a sample this many intervals ahead of our clock is from a skewed clock: dropped
MODEL_SERIES = (
    "requests_per_s",
    "errors_per_s",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "latency_p50_ms",
    "latency_p95_ms",
    "tokens_in_per_s",
    "tokens_out_per_s",
    "in_flight",
    "queued",
    "loads",
    "evictions",
)
NODE_SERIES = ("vram_used_bytes", "vram_total_bytes", "ram_used_bytes", "ram_total_bytes", "disk_free_bytes")


@dataclass(frozen=True)
class NodeFigures:
    """One node's memory and disk as its heartbeats last stored them."""

    name: str
    vram_used_bytes: int
    vram_total_bytes: int
    ram_used_bytes: int
    ram_total_bytes: int
    disk_free_bytes: int


@dataclass
class _Slot:
    bucket: int
    frontends: set[str] = field(default_factory=set)
    models: dict[str, ModelSample] = field(default_factory=dict)
    nodes: dict[str, NodeFigures] | None = None  # node id → figures; None: not read for this interval


def _figures(sample: ModelSample, interval_s: float) -> dict[str, float | int | None]:
    def rate(count: int) -> float:
        return round(count / interval_s, 4)

    def ms(q: float, counts: list[int]) -> float | None:
        value = quantile_s(q, counts)
        return None if value is None else round(value * 1000, 3)

    return {
        "requests_per_s": rate(sample.requests),
        "errors_per_s": rate(sample.errors),
        "ttft_p50_ms": ms(0.5, sample.ttft),
        "ttft_p95_ms": ms(0.95, sample.ttft),
        "latency_p50_ms": ms(0.5, sample.latency),
        "latency_p95_ms": ms(0.95, sample.latency),
        "tokens_in_per_s": rate(sample.tokens_in),
        "tokens_out_per_s": rate(sample.tokens_out),
        "in_flight": sample.in_flight,
        "queued": sample.queued,
        "loads": sample.loads,
        "evictions": sample.evictions,
    }


_SnapshotSlot = tuple[int, set[str], dict[str, ModelSample], dict[str, NodeFigures] | None]


def _parse_snapshot(raw: object, interval_s: float, capacity: int) -> list[_SnapshotSlot]:
    if not isinstance(raw, dict) or not isinstance(raw.get("slots"), list):
        raise ValueError("a traffic snapshot is an object with slots")
    if not isinstance(raw.get("interval_s"), int | float) or not math.isclose(raw["interval_s"], interval_s):
        raise ValueError("the snapshot's interval is not this ring's")
    if len(raw["slots"]) > capacity:
        raise ValueError(f"a snapshot holds at most {capacity} slots")
    out = []
    for item in raw["slots"]:
        if not isinstance(item, dict):
            raise ValueError("a snapshot slot is an object")
        frontends, nodes = item.get("frontends"), item.get("nodes")
        if not isinstance(frontends, list) or not frontends or len(frontends) > FRONTENDS_MAX:
            raise ValueError("a snapshot slot names its frontends")
        sample = FrontendSample.from_json(
            {
                "frontend": "snapshot",
                "bucket": item.get("bucket"),
                "interval_s": interval_s,
                "models": item.get("models"),
            }
        )
        out.append((sample.bucket, {str(f) for f in frontends}, sample.models, _parse_nodes(nodes)))
    return out


def _parse_nodes(raw: object) -> dict[str, NodeFigures] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or len(raw) > NODES_MAX:
        raise ValueError(f"a snapshot slot's nodes are an object of at most {NODES_MAX}")
    nodes = {}
    for node_id, figures in raw.items():
        if (
            not isinstance(figures, list)
            or len(figures) != 1 + len(NODE_SERIES)
            or not isinstance(figures[0], str)
        ):
            raise ValueError("a node's figures are [name, 5 numbers of bytes]")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in figures[1:]):
            raise ValueError("a node's figures are integers")
        nodes[str(node_id)] = NodeFigures(figures[0], *figures[1:])
    return nodes


def _one_model(name: str) -> Callable[[_Slot], ModelSample | None]:
    return lambda slot: slot.models.get(name)  # None: sampled, but not this model (its zeros)


class TrafficRing:
    def __init__(self, interval_s: float, window_s: float = WINDOW_MAX_S) -> None:
        self.interval_s = interval_s
        self.capacity = max(1, math.ceil(window_s / interval_s))
        self._slots: list[_Slot | None] = [None] * self.capacity

    def bucket_of(self, unix_s: float) -> int:
        return math.floor(unix_s / self.interval_s)

    def _slot(self, bucket: int, now_s: float) -> _Slot | None:
        """The slot of `bucket`, emptied for it when it held an older one; None when too old or in the future."""
        if bucket > self.bucket_of(now_s) + FUTURE_BUCKETS:
            return None
        index = bucket % self.capacity
        slot = self._slots[index]
        if slot is None or slot.bucket < bucket:
            slot = self._slots[index] = _Slot(bucket)
        return slot if slot.bucket == bucket else None

    def add_sample(self, sample: FrontendSample, now_s: float) -> bool:
        """Merge one frontend's sample; False when dropped (other interval, too old, seen, or from the future)."""
        if not math.isclose(sample.interval_s, self.interval_s):
            return False
        slot = self._slot(sample.bucket, now_s)
        if slot is None or sample.frontend in slot.frontends:
            return False
        slot.frontends.add(sample.frontend)
        for model, figures in sample.models.items():
            mine = slot.models.get(model)
            if mine is None:
                slot.models[model] = merged([figures])  # a copy: the message's lists are not kept
            else:
                mine.add(figures)
        return True

    def add_nodes(self, bucket: int, nodes: dict[str, NodeFigures], now_s: float) -> None:
        slot = self._slot(bucket, now_s)
        if slot is not None:
            slot.nodes = nodes

    def snapshot(self, max_bytes: int) -> dict[str, Any]:
        """The ring's sampled slots, newest first while they fit in `max_bytes` of JSON: what a frontend that
        starts asks its peers for (`restore`), so its Dashboard does not start empty."""
        slots, size = [], 0
        for slot in sorted(
            (s for s in self._slots if s is not None and s.frontends), key=lambda s: -s.bucket
        ):
            item = {
                "bucket": slot.bucket,
                "frontends": sorted(slot.frontends),
                "models": {m: sample.to_json() for m, sample in slot.models.items()},
                "nodes": None
                if slot.nodes is None
                else {i: [f.name, *(getattr(f, n) for n in NODE_SERIES)] for i, f in slot.nodes.items()},
            }
            size += len(json.dumps(item, separators=(",", ":"))) + 1
            if size > max_bytes:
                break
            slots.append(item)
        return {"interval_s": self.interval_s, "slots": slots}

    def restore(self, raw: object, now_s: float) -> int:
        """Take a peer's `snapshot` for the slots this ring has nothing of, or only other frontends' samples of;
        returns how many slots it took. Raises ValueError on a malformed snapshot (nothing of it is kept)."""
        slots = _parse_snapshot(raw, self.interval_s, self.capacity)
        taken = 0
        for bucket, frontends, models, nodes in slots:
            slot = self._slot(bucket, now_s)
            if slot is None or slot.frontends & frontends:
                continue  # too old, or this ring already holds some of the same samples: it keeps its own
            slot.frontends |= frontends
            for model, sample in models.items():
                mine = slot.models.get(model)
                if mine is None:
                    slot.models[model] = sample
                else:
                    mine.add(sample)
            if slot.nodes is None:
                slot.nodes = nodes
            taken += 1
        return taken

    def _newest(self, now_s: float) -> int:
        current = self.bucket_of(now_s)
        held = [s.bucket for s in self._slots if s is not None and s.bucket <= current]
        return max(held, default=current - 1)

    def series(
        self, now_s: float, window_s: float = WINDOW_MAX_S, model: str | None = None, node: str | None = None
    ) -> dict[str, Any]:
        """The Dashboard's JSON over the last `window_s` (at most the ring), newest interval last."""
        end = self._newest(now_s)
        count = min(self.capacity, max(1, math.ceil(window_s / self.interval_s)))
        slots = []
        for bucket in range(end - count + 1, end + 1):
            slot = self._slots[bucket % self.capacity]
            slots.append(slot if slot is not None and slot.bucket == bucket else None)
        t = [round((bucket + 1) * self.interval_s, 3) for bucket in range(end - count + 1, end + 1)]
        sampled = [s for s in slots if s is not None and s.frontends]
        names = [model] if model is not None else sorted({m for s in sampled for m in s.models})
        return {
            "interval_s": self.interval_s,
            "now": round(now_s, 3),
            "cluster": self._model_series(t, slots, lambda s: merged(s.models.values())),
            "models": {name: self._model_series(t, slots, _one_model(name)) for name in names},
            "nodes": self._node_series(t, slots, node),
        }

    def _model_series(
        self, t: list[float], slots: list[_Slot | None], pick: Callable[[_Slot], ModelSample | None]
    ) -> dict[str, list[object]]:
        """Each figure per slot: None where no frontend sampled, zeros where one did without the model (`pick` gives
        None). The columns start as None and only sampled slots are visited: a window of hundreds of intervals
        and many models costs what was sampled, not models x intervals x figures (a Dashboard read of an hour with
        a few hundred models took over 250 ms of the frontend's loop)."""
        size = len(slots)
        columns: dict[str, list[object]] = {name: [None] * size for name in MODEL_SERIES}
        zeros: dict[str, float | int | None] | None = None
        for index, slot in enumerate(slots):
            if slot is None or not slot.frontends:
                continue
            sample = pick(slot)
            if sample is None:
                if zeros is None:
                    zeros = _figures(ModelSample(), self.interval_s)
                figures = zeros
            else:
                figures = _figures(sample, self.interval_s)
            for name, value in figures.items():
                columns[name][index] = value
        return {"t": list(t), **columns}

    def _node_series(self, t: list[float], slots: list[_Slot | None], only: str | None) -> dict[str, object]:
        latest: dict[str, str] = {}  # node id → its newest name
        for slot in slots:
            for node_id, figures in (slot.nodes or {}).items() if slot is not None else ():
                latest[node_id] = figures.name
        if only is not None:
            latest = {i: n for i, n in latest.items() if only in (i, n)}
        out: dict[str, object] = {}
        for node_id, name in sorted(latest.items(), key=lambda item: item[1]):
            series: dict[str, list[object]] = {"t": list(t), **{f: [] for f in NODE_SERIES}}
            for slot in slots:
                held = slot.nodes.get(node_id) if slot is not None and slot.nodes is not None else None
                for f in NODE_SERIES:
                    series[f].append(None if held is None else getattr(held, f))
            out[node_id] = {"name": name, **series}
        return out
