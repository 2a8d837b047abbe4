"""Warm-path cost of the request figures: what one warm request adds to the frontend's CPU, in µs.

Exactly the work the instrumentation adds per warm unary request (two clock reads, reading the model
name, the request count and latency histogram of its (model, status) pair, the warm routing decision,
and the OpenTelemetry checks that find tracing off), timed in a loop against the same loop without it
(the baseline of this run). `benchmarks/routing_overhead.py` measures the whole request (~400 µs on 2
shared cores, noise ±40 µs): too coarse to see this, hence this one. Target: ≤ 10 µs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from corral.frontend.inference.fast_path import _model_of
from corral.telemetry import tracing
from corral.telemetry.families import ROUTING_DECISIONS
from corral.telemetry.labels import PerModel, RequestFigures

ROUNDS, PER_ROUND = 7, 100_000
TARGET_US = 10.0
BASE: tuple[tuple[str, str], ...] = (("authorization", "Bearer t"),)


def baseline(data: dict[str, Any], figures: RequestFigures, warm: PerModel) -> None:
    _ = data


def instrumented(data: dict[str, Any], figures: RequestFigures, warm: PerModel) -> None:
    started_s = time.perf_counter()
    model = _model_of(data)  # fast_path: the model label
    warm(model).inc()  # router: a warm decision
    span = None if tracing.tracer is None else tracing.start_client_span("x", {})  # calls: backend span
    metadata = BASE if span is None else tracing.metadata_for(span, BASE)
    tracing.finish(span)
    if tracing.tracer is not None:  # fast_path: no server span
        raise AssertionError(metadata)
    figures.observe(model, 200, time.perf_counter() - started_s)  # fast_path: count + latency


def per_call_us(fn: Any) -> float:
    data = {"model": "sim", "messages": [{"role": "user", "content": "hello"}]}
    figures, warm = RequestFigures(lambda m: m if m == "sim" else None), PerModel(ROUTING_DECISIONS, "warm")
    rounds = []
    for _ in range(ROUNDS):
        start = time.thread_time()
        for _ in range(PER_ROUND):
            fn(data, figures, warm)
        rounds.append((time.thread_time() - start) / PER_ROUND * 1e6)
    return statistics.median(rounds)


def main() -> None:
    base_us, with_us = per_call_us(baseline), per_call_us(instrumented)
    added_us = with_us - base_us
    print(f"baseline loop: {base_us:.2f} µs/call; instrumented: {with_us:.2f} µs/call")
    print(
        f"metrics + tracing-off checks add {added_us:.2f} µs of CPU per warm request (target <= {TARGET_US:g} µs)"
    )


if __name__ == "__main__":
    main()
