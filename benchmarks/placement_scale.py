"""Placement decision time against cluster size: 10, 100, 1,000 and 10,000 nodes.

Each decision runs the full pipeline (selector, replica slots, disk headroom, VRAM fit, idle,
least loaded) over a synthetic snapshot whose nodes carry labels and a few replicas. Prints the
median and p99 per decision and the growth factor per 10x nodes (linear scaling = 10x).
"""

from __future__ import annotations

import random
import statistics
import time

from corral.placement.pipeline import decide
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

GIB = 1 << 30
SIZES = (10, 100, 1_000, 10_000)


def snapshot(count: int, rng: random.Random) -> list[NodeSnapshot]:
    nodes = []
    for i in range(count):
        replicas = tuple(ReplicaSnapshot(model=f"m{rng.randrange(50)}", replica_index=0, state="loaded",
                                         in_flight=rng.randrange(4), last_used_s=rng.random())
                         for _ in range(rng.randrange(3)))
        nodes.append(NodeSnapshot(
            id=f"n{i}", name=f"node-{i:05d}", address=f"10.0.{i // 250}.{i % 250}:50051", http_address="",
            total_vram=80 * GIB, available_vram=rng.randrange(1, 80) * GIB, total_disk=1000 * GIB,
            available_disk=rng.randrange(1, 1000) * GIB, labels={"zone": f"z{i % 4}", "gpu.vendor": "nvidia"},
            replicas=replicas,
        ))
    return nodes


def main() -> None:
    rng = random.Random(7)
    request = PlacementRequest("llama", disk_bytes=40 * GIB, vram_bytes=30 * GIB, selector={"zone": "z1"})
    previous = None
    print(f"{'nodes':>7} {'median ms':>10} {'p99 ms':>9} {'growth/10x':>11}")
    for size in SIZES:
        nodes = snapshot(size, rng)
        rounds = max(20, 20_000 // size)
        timings = []
        for _ in range(rounds):
            start = time.perf_counter()
            decide(request, nodes)
            timings.append(time.perf_counter() - start)
        timings.sort()
        median = statistics.median(timings) * 1000
        growth = f"x{median / previous:.1f}" if previous else "-"
        print(f"{size:>7} {median:>10.3f} {timings[int(len(timings) * 0.99)] * 1000:>9.3f} {growth:>11}")
        previous = median


if __name__ == "__main__":
    main()
