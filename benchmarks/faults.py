"""Fault figures: one row per fault, from the same drivers the fault tests use (tests/support/faults.py).

For each fault it builds a fresh cluster (own database, frontend, simulator workers) on a PostgreSQL
and NATS it starts itself, injects the fault under client traffic and prints:

* what the client saw (status codes and the first message of each failure kind),
* recover_s: seconds from the fault (for PostgreSQL/NATS: from their restart) until the affected
  model is served again,
* lost: requests that did not get their answer,
* dup_loads: LoadModel calls beyond the loads the scenario needs (0 is right).

    python benchmarks/faults.py [--only worker-stream,postgresql]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.up.embedded import embedded_nats, embedded_postgres
from support import faults
from support.faults import HEADER, FaultBed, Outcome, write_sim_model

MIB = 1 << 20


def worker_stream(bed: FaultBed) -> Outcome:
    write_sim_model(bed.cluster.models_dir, "streamer", "output_token_time_s:0.1", file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    bed.start_worker("w2")
    return faults.worker_killed_mid_stream(bed, "streamer")


def backend_stop(bed: FaultBed) -> Outcome:
    write_sim_model(bed.cluster.models_dir, "frozen", "output_token_time_s:0.1", file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    bed.start_worker("w2")
    return faults.backend_stopped_mid_stream(bed, "frozen")


def worker_staging(bed: FaultBed) -> Outcome:
    write_sim_model(bed.cluster.models_dir, "bulky", file_bytes=48 * MIB)
    bed.start_frontend()
    bed.start_worker("w1", upload_bytes_per_s=4 * MIB)
    bed.start_worker("w2", upload_bytes_per_s=4 * MIB)
    return faults.worker_killed_mid_staging(bed, "bulky")


def worker_idle(bed: FaultBed) -> Outcome:
    write_sim_model(bed.cluster.models_dir, "idler", file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    bed.start_worker("w2")
    return faults.worker_killed_idle(bed, "idler")


def frontend_load(bed: FaultBed) -> Outcome:
    write_sim_model(bed.cluster.models_dir, "orphaned", "load_time_s:4", file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    return faults.frontend_killed_owning_load(bed, "orphaned")


def _dependency(name: str) -> Callable[[FaultBed], Outcome]:
    def run(bed: FaultBed) -> Outcome:
        for model in ("warm", "cold", "later"):
            write_sim_model(bed.cluster.models_dir, model, file_bytes=MIB)
        bed.start_frontend()
        bed.start_worker("w1")
        return faults.dependency_restarted(bed, name, "warm", "cold", "later")

    return run


# A worker does not heartbeat while its NATS link is down; keep the stale threshold above the outage.
FRONTEND_ENV = {
    "nats": {"LOCALAI_STALE_NODE_THRESHOLD": "60s"},
    "postgresql": {"LOCALAI_STALE_NODE_THRESHOLD": "60s"},
}

SCENARIOS: dict[str, Callable[[FaultBed], Outcome]] = {
    "worker-stream": worker_stream,
    "backend-sigstop": backend_stop,
    "worker-staging": worker_staging,
    "worker-idle": worker_idle,
    "frontend-load": frontend_load,
    "nats": _dependency("nats"),
    "postgresql": _dependency("postgresql"),
}


def host_unplugged(root: Path) -> Outcome | str:
    """The multi-host row: its own network namespaces, PostgreSQL and NATS (skipped where unavailable)."""
    from support.multihost import host_unplugged_mid_stream, start_multihost
    from support.netns import unavailable_reason

    reason = unavailable_reason()
    if reason:
        return f"skipped: {reason}"
    models_dir = root / "multihost" / "frontend-models"
    write_sim_model(models_dir, "everywhere", file_bytes=MIB)
    write_sim_model(models_dir, "talker", "output_token_time_s:0.1")
    cluster = start_multihost(root / "multihost", models_dir)
    try:
        return host_unplugged_mid_stream(cluster, "talker")
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(SCENARIOS)}, netns")
    args = parser.parse_args()
    chosen = [s for s in args.only.split(",") if s] or [*SCENARIOS, "netns"]
    root = Path(tempfile.mkdtemp(prefix="corral-faults-", dir="/var/tmp"))
    os.chmod(root, 0o755)  # PostgreSQL runs as the `postgres` user when we are root
    pg, nats = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats.start()
    print(HEADER, flush=True)
    try:
        for name in chosen:
            if name == "netns":
                _netns_row(root)
                continue
            bed = FaultBed.start(root, pg, nats, name, **FRONTEND_ENV.get(name, {}))
            started = time.monotonic()
            try:
                outcome = SCENARIOS[name](bed)
                print(outcome.row(), flush=True)
            except Exception as exc:
                print(
                    f"{name:<34} {'-':>9} {'-':>5} {'-':>10}  scenario failed after "
                    f"{time.monotonic() - started:.0f}s: {type(exc).__name__}: {str(exc)[:200]}",
                    flush=True,
                )
            finally:
                bed.stop()
    finally:
        nats.stop()
        pg.stop(quiet=True)
        shutil.rmtree(root, ignore_errors=True)


def _netns_row(root: Path) -> None:
    started = time.monotonic()
    try:
        outcome = host_unplugged(root)
        print(
            outcome.row() if isinstance(outcome, Outcome) else f"{'host unplugged (netns)':<34} {outcome}",
            flush=True,
        )
    except Exception as exc:
        print(
            f"{'host unplugged (netns)':<34} scenario failed after {time.monotonic() - started:.0f}s: "
            f"{type(exc).__name__}: {str(exc)[:200]}",
            flush=True,
        )


if __name__ == "__main__":
    main()
