"""Staging modes with real processes: a managed Hugging Face model (frontend downloads, workers never see
HF_TOKEN), a reload that moves 0 bytes, disk-full refusal, and shared-models mode (nothing staged)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import nats
import pytest

from corral.models.defaults import write_tiny_model_config
from corral.staging.hashing import hash_sidecar_path, read_trusted_hash
from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.cut_proxy import CutProxy
from support.fake_hub import FakeHub
from support.waiting import wait_for

pytestmark = pytest.mark.slow

HF_TOKEN = "hf_e2e_secret_that_workers_must_never_see"
REPO = "acme/sim-model"
HUB_FILES = {"sim.bin": os.urandom(3 << 20), "config.json": b'{"arch": "sim"}', "notes/README.md": b"# sim"}


def _chat(cluster: Cluster, model: str) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=120,
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )


def _start_worker_behind_proxy(cluster: Cluster, name: str, *extra: str) -> tuple[Proc, CutProxy]:
    """A worker whose file server is reached only through a recording proxy (its advertised address)."""
    base = free_port_pair()
    proxy = CutProxy(base - 1).start()
    proc = spawn(
        name,
        [*cluster.worker_argv(name, base), "--advertise-http-addr", f"127.0.0.1:{proxy.port}", *extra],
        cluster.root / "logs",
    )
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", proc)
    cluster.workers.append(proc)
    cluster.worker_ports.append(base)
    return proc, proxy


def _process_tree(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    server = FakeHub(REPO, dict(HUB_FILES), token=HF_TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str, hub: FakeHub
) -> Iterator[Cluster]:
    c = Cluster(
        root=state_root / "e2e-staging-modes",
        database_url=make_database(),
        nats_url=nats_url,
        frontend_env={"HF_TOKEN": HF_TOKEN, "HF_ENDPOINT": hub.url},
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "hf-sim.yaml").write_text(
        f"name: hf-sim\nbackend: simulator\nhuggingface:\n  repo: {REPO}\n  revision: main\n"
        "parameters:\n  model: sim.bin\n"
    )
    (c.models_dir / "big.bin").write_bytes(os.urandom(1 << 20))
    (c.models_dir / "needs-disk.yaml").write_text(
        "name: needs-disk\nbackend: simulator\nnode_selector:\n  disk: tiny\nparameters:\n  model: big.bin\n"
    )
    try:
        c.start_frontend()
        yield c
    finally:
        c.stop()


async def test_managed_hf_model_is_downloaded_by_the_frontend_and_staged_without_the_token(
    cluster: Cluster, hub: FakeHub, nats_url: str
) -> None:
    worker, proxy = _start_worker_behind_proxy(cluster, "hf-w1")
    seen_on_bus: list[bytes] = []
    nc = await nats.connect(nats_url)

    async def record(msg) -> None:  # type: ignore[no-untyped-def]
        seen_on_bus.append(msg.data)

    await nc.subscribe(">", cb=record)
    try:
        answer = await asyncio.to_thread(_chat, cluster, "hf-sim")
        await nc.flush()
    finally:
        await nc.drain()
        proxy.stop()
    assert answer.status_code == 200, answer.text
    # The frontend fetched every file from the hub, with the token.
    assert sorted(r.path.rsplit("/", 1)[-1] for r in hub.file_requests()) == [
        "README.md",
        "config.json",
        "sim.bin",
    ]
    assert all(r.authorization == f"Bearer {HF_TOKEN}" for r in hub.requests)
    # The worker got the whole committed snapshot over the normal stager...
    snapshots = list(
        (cluster.root / "hf-w1" / "models" / "hf-sim").glob(".artifacts/huggingface/*/snapshots/*")
    )
    assert len(snapshots) == 1
    assert (snapshots[0] / "sim.bin").read_bytes() == HUB_FILES["sim.bin"]
    assert (snapshots[0] / "notes" / "README.md").is_file()
    assert proxy.body_bytes_forwarded == sum(len(b) for b in HUB_FILES.values())
    # ...and never saw the token: not in its requests, not on the bus, not in its or its backends' environment.
    token = HF_TOKEN.encode()
    assert len(proxy.client_bytes) > proxy.body_bytes_forwarded
    assert token not in bytes(proxy.client_bytes)
    assert seen_on_bus and not any(token in data for data in seen_on_bus)
    tree = _process_tree(worker.popen.pid)
    assert len(tree) >= 2  # the worker and its backend process
    assert all(b"HF_TOKEN" not in _environ(pid) and token not in _environ(pid) for pid in tree)


async def test_reloading_a_model_on_the_same_worker_transfers_zero_bytes(cluster: Cluster) -> None:
    """The worker restarts (same name, same disk); the next load only HEADs and finds every file in place."""
    first = cluster.workers.pop()
    cluster.worker_ports.pop()
    assert first.stop() == 0
    await asyncio.sleep(0.5)
    _, proxy = _start_worker_behind_proxy(cluster, "hf-w1")
    try:
        answer = await asyncio.to_thread(_chat, cluster, "hf-sim")
    finally:
        proxy.stop()
    assert answer.status_code == 200, answer.text
    heads = [h for h in proxy.heads if h.startswith(b"HEAD ")]
    assert len(heads) == len(HUB_FILES)
    assert not [h for h in proxy.heads if h.startswith(b"PUT ")]
    assert proxy.body_bytes_forwarded == 0


def test_the_frontend_hashes_configured_model_files_at_start_before_any_request(cluster: Cluster) -> None:
    """--prehash-models (on by default): a model's first staging finds its hash recorded, so it does not hash
    while it transfers. Managed (Hugging Face) files are not there yet: hashed at their first load."""
    path = cluster.models_dir / "big.bin"
    wait_for(lambda: read_trusted_hash(path) is not None, "the frontend to record big.bin's hash", 60)
    assert read_trusted_hash(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert cluster.frontend is not None and f"pre-hashed {path}" in cluster.frontend.log()


async def test_worker_without_disk_room_refuses_the_upload_and_the_client_sees_why(cluster: Cluster) -> None:
    _start_worker_behind_proxy(
        cluster, "tiny-disk", "--node-labels", "disk=tiny", "--staging-min-free", "1PiB"
    )
    answer = await asyncio.to_thread(_chat, cluster, "needs-disk")
    assert answer.status_code >= 500
    assert "not enough disk space for key 'models/needs-disk/big.bin'" in answer.text
    assert "HTTP 507" in answer.text, answer.text
    assert not (cluster.root / "tiny-disk" / "models" / "needs-disk" / "big.bin").exists()


@pytest.fixture(scope="module")
def shared_cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-staging-shared", database_url=make_database(), nats_url=nats_url)
    write_tiny_model_config(c.models_dir, "tiny-shared")
    try:
        c.start_frontend("--distributed-shared-models")
        c.start_worker("shared-w1", "--models-path", str(c.models_dir))  # the same mount on every node
        yield c
    finally:
        c.stop()


def test_shared_models_mode_loads_from_the_frontend_path_and_stages_nothing(shared_cluster: Cluster) -> None:
    answer = _chat(shared_cluster, "tiny-shared")
    assert answer.status_code == 200, answer.text
    assert not (
        shared_cluster.models_dir / "tiny-shared"
    ).exists()  # no staged copy under models/<tracking key>
    assert not hash_sidecar_path(shared_cluster.models_dir / "tiny-shared.gguf").exists()  # nor pre-hashed
