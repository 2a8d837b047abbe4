"""Ephemeral request inputs on a real worker process: its start-up sweep, its capacity settings, release."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.staging.errors import InputStorageFull
from corral.staging.request_inputs import RequestInputs
from support.cluster import Cluster

pytestmark = pytest.mark.slow

KiB = 1 << 10
HOUR_S = 3600.0


def _aged(path: Path, data: bytes, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-ephemeral", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    inputs = c.root / "w1" / "staging" / "ephemeral"  # what an earlier run of w1 left behind
    _aged(inputs / "audio" / "dead0000" / "clip.wav", b"x" * 100, 2 * HOUR_S)
    _aged(inputs / "audio" / "young000" / "clip.wav", b"y" * (100 * KiB), 10 * 60)
    _aged(c.root / "w1" / "models" / "old-model" / "model.gguf", b"weights", 5 * HOUR_S)
    try:
        c.start_frontend()
        c.start_worker(
            "w1", "--ephemeral-staging-byte-limit", "1MiB", "--ephemeral-staging-min-free-bytes", "1"
        )
        yield c
    finally:
        c.stop()


def _inputs(cluster: Cluster, http: httpx.AsyncClient) -> RequestInputs:
    return RequestInputs(http, f"127.0.0.1:{cluster.worker_ports[0] - 1}", cluster.token)


def test_the_worker_sweeps_abandoned_inputs_at_start_and_keeps_young_ones_and_models(
    cluster: Cluster,
) -> None:
    inputs = cluster.root / "w1" / "staging" / "ephemeral" / "audio"
    assert not (inputs / "dead0000").exists()
    assert (inputs / "young000" / "clip.wav").exists()
    assert (cluster.root / "w1" / "models" / "old-model" / "model.gguf").read_bytes() == b"weights"
    log = cluster.workers[0].log()
    assert "ephemeral sweep: removed" in log and "dead0000" in log
    assert (
        "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT=1048576 (1.0 MB), LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES=1 (1 B)"
        in log
    )


async def test_a_full_budget_refuses_an_input_until_another_request_releases_its_own(
    cluster: Cluster,
) -> None:
    async with httpx.AsyncClient() as http:
        async with _inputs(cluster, http) as first:
            path = Path(await first.stage("audio", "long.wav", os.urandom(700 * KiB)))
            with pytest.raises(
                InputStorageFull, match=r"over LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT=1048576"
            ) as full:
                async with _inputs(cluster, http) as second:
                    await second.stage(
                        "audio", "more.wav", os.urandom(300 * KiB)
                    )  # + the young leftover's 100 KiB
            assert "held by 2 request(s)" in full.value.message
        assert not path.exists()
        async with _inputs(cluster, http) as third:
            assert Path(await third.stage("audio", "more.wav", os.urandom(300 * KiB))).exists()


async def test_a_request_cancelled_mid_inference_has_its_inputs_removed_on_the_worker(
    cluster: Cluster,
) -> None:
    staged: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def handle_request(http: httpx.AsyncClient) -> None:
        async with _inputs(cluster, http) as inputs:
            staged.set_result(await inputs.stage("image", "cat.png", os.urandom(50 * KiB)))
            await asyncio.Event().wait()  # the backend call, until the client goes away

    async with httpx.AsyncClient() as http:
        request = asyncio.create_task(handle_request(http))
        path = Path(await staged)
        assert path.exists()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    assert not path.exists() and not path.parent.exists()
