"""S3 mode with real processes: frontend and worker share a bucket on a real S3-compatible server (moto's,
on loopback); the model reaches the worker through the bucket and ``nodes.<id>.files.ensure``, not HTTP."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.models.defaults import write_tiny_model_config
from corral.staging.s3 import ObjectStore, StorageConfig
from support.cluster import Cluster, free_port_pair, spawn, wait_http
from support.moto_s3 import ACCESS_KEY, SECRET_KEY, moto_server

pytestmark = pytest.mark.slow
BUCKET = "corral-e2e"


@pytest.fixture(scope="module")
def s3_cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str
) -> Iterator[tuple[Cluster, str]]:
    root = state_root / "e2e-staging-s3"
    with moto_server(root / "moto") as s3_url:
        storage_env = {
            "LOCALAI_STORAGE_URL": s3_url,
            "LOCALAI_STORAGE_BUCKET": BUCKET,
            "LOCALAI_STORAGE_ACCESS_KEY": ACCESS_KEY,
            "LOCALAI_STORAGE_SECRET_KEY": SECRET_KEY,
        }
        c = Cluster(root=root, database_url=make_database(), nats_url=nats_url, frontend_env=storage_env)
        write_tiny_model_config(c.models_dir, "tiny-s3")
        try:
            c.start_frontend()
            base = free_port_pair()
            # The worker's file server is not even advertised correctly: S3 mode must not use it.
            proc = spawn(
                "s3-w1",
                [*c.worker_argv("s3-w1", base), "--advertise-http-addr", "127.0.0.1:9"],
                root / "logs",
                env=storage_env,
            )
            wait_http(f"http://127.0.0.1:{base - 1}/readyz", proc)
            c.workers.append(proc)
            yield c, s3_url
        finally:
            c.stop()


def test_model_travels_through_the_bucket_and_loads_on_the_worker(s3_cluster: tuple[Cluster, str]) -> None:
    cluster, s3_url = s3_cluster
    answer = httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=120,
        json={"model": "tiny-s3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    assert answer.status_code == 200, answer.text
    source = cluster.models_dir / "tiny-s3.gguf"
    fetched = cluster.root / "s3-w1" / "models" / "tiny-s3" / "tiny-s3.gguf"
    assert hashlib.sha256(fetched.read_bytes()).hexdigest() == hashlib.sha256(source.read_bytes()).hexdigest()
    store = ObjectStore(StorageConfig(s3_url, BUCKET, "us-east-1", ACCESS_KEY, SECRET_KEY))
    try:
        stored = store.head("models/tiny-s3/tiny-s3.gguf")
    finally:
        store.close()
    assert stored is not None and stored.size_bytes == source.stat().st_size
    assert stored.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
