"""A cluster for a benchmark: one frontend and one worker on the machine's PostgreSQL and NATS and a throwaway
database (`bench_cluster`); `gemma_cluster` serves the Gemma file shared by every Gemma benchmark (prepared once)."""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.models.defaults import prepare_gemma
from corral.runtime.processes import port_open
from support.cluster import Cluster

MODELS_DIR = Path("/var/tmp/corral-bench-models")  # shared with cold_start.py and prefix_routing.py
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@asynccontextmanager
async def bench_cluster(
    tag: str, models_dir: Path, worker_args: tuple[str, ...] = ()
) -> AsyncIterator[Cluster]:
    """A started cluster (one frontend, worker `<tag>-w1`) serving the configs in `models_dir`, on a throwaway
    database of the machine's PostgreSQL and its NATS; stopped and the database dropped on exit."""
    if not (port_open("127.0.0.1", 5432) and port_open("127.0.0.1", 4222)):
        raise SystemExit("this benchmark needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222")
    name = f"corral_bench_{tag}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    root = Path(tempfile.mkdtemp(prefix=f"corral-bench-{tag}-", dir="/var/tmp"))
    (root / "frontend-models").symlink_to(models_dir)
    cluster = Cluster(
        root=root,
        database_url=f"postgresql://postgres@127.0.0.1:5432/{name}",
        nats_url="nats://127.0.0.1:4222",
        fail_on_loop_stalls=False,
    )
    try:
        cluster.start_frontend("--log-level", "info")
        cluster.start_worker(f"{tag}-w1", "--log-level", "info", *worker_args)
        yield cluster
    finally:
        cluster.stop()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@asynccontextmanager
async def gemma_cluster(tag: str) -> AsyncIterator[Cluster]:
    """A started cluster serving Gemma (worker `<tag>-w1`); stopped and its database dropped on exit."""
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    prepare_gemma(MODELS_DIR)
    async with bench_cluster(tag, MODELS_DIR) as cluster:
        yield cluster
