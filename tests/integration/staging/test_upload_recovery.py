"""Interrupted and refused uploads against the real worker file server: resume, finalise, 507."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from corral.staging import hashing
from corral.staging.disk_space import DiskBudget
from corral.staging.errors import StagingFailed
from corral.staging.uploader import RetryPolicy, stage_file
from support.cut_proxy import CutProxy
from support.file_servers import AUTH, TOKEN, running_file_server

MiB = 1 << 20
FAST_RETRIES = RetryPolicy(max_attempts=4, first_backoff_s=0.02, max_backoff_s=0.05)
KEY = "models/m/model.gguf"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as http:
        yield http


def _source(tmp_path: Path, size_bytes: int) -> Path:
    path = tmp_path / "frontend" / "model.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size_bytes))
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leave_unfinished(worker_path: Path, content: bytes, target_sha256: str) -> None:
    """What a crash between the last body byte and the finalize leaves: full bytes + .sha256.target."""
    worker_path.parent.mkdir(parents=True, exist_ok=True)
    worker_path.write_bytes(content)
    hashing.write_sidecar(hashing.target_sidecar_path(worker_path), target_sha256)


async def test_upload_cut_after_n_bytes_resumes_at_n_and_ends_with_the_source_sha256(tmp_path, client):
    source = _source(tmp_path, 8 * MiB + 5)
    cut_at = 3 * MiB + 123
    sent: list[tuple[int, int]] = []
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        proxy = CutProxy(worker.port, cut_after_body_bytes=cut_at).start()
        try:
            remote = await stage_file(client, f"http://127.0.0.1:{proxy.port}", KEY, source, TOKEN,
                                      retry_policy=FAST_RETRIES, on_progress=lambda s, t: sent.append((s, t)))
        finally:
            proxy.stop()
        received = worker.body_bytes
    puts = [h.decode() for h in proxy.heads if h.startswith(b"PUT ")]
    size = source.stat().st_size
    assert proxy.cuts == 1
    assert f"Content-Range: bytes 0-{size - 1}/{size}" in puts[0]
    assert f"Content-Range: bytes {cut_at}-{size - 1}/{size}" in puts[1]  # resumed exactly at N
    assert len(puts) == 2
    assert received == size  # N bytes before the cut + the rest after it, nothing twice
    assert _sha256(Path(remote)) == _sha256(source)
    assert (cut_at, size) in sent  # the resumed attempt reports from the resume offset
    assert sent[-1] == (size, size)


async def test_full_size_unfinished_file_with_correct_content_is_finalised_without_resending(tmp_path, client):
    source = _source(tmp_path, 2 * MiB)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        target = worker.models_dir / "m" / "model.gguf"
        _leave_unfinished(target, source.read_bytes(), _sha256(source))
        inode = target.stat().st_ino
        remote = await stage_file(client, worker.url, KEY, source, TOKEN, retry_policy=FAST_RETRIES)
        received = worker.body_bytes
    assert remote == str(target)
    assert received == 0
    assert target.stat().st_ino == inode
    assert not hashing.target_sidecar_path(target).exists()
    assert hashing.read_trusted_hash(target) == _sha256(source)


async def test_full_size_unfinished_file_with_corrupt_content_is_removed_and_sent_again(tmp_path, client):
    source = _source(tmp_path, 2 * MiB)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        target = worker.models_dir / "m" / "model.gguf"
        _leave_unfinished(target, os.urandom(2 * MiB), _sha256(source))
        remote = await stage_file(client, worker.url, KEY, source, TOKEN, retry_policy=FAST_RETRIES)
        received = worker.body_bytes
    assert received == 2 * MiB
    assert _sha256(Path(remote)) == _sha256(source)
    assert not hashing.target_sidecar_path(target).exists()


@pytest.mark.parametrize("corrupt", [False, True])  # a reference-protocol client re-sends from byte 0
async def test_reference_style_put_from_zero_over_a_full_size_unfinished_file(tmp_path, client, corrupt):
    data = os.urandom(MiB)
    sha = hashlib.sha256(data).hexdigest()
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        target = worker.models_dir / "m" / "model.gguf"
        _leave_unfinished(target, os.urandom(MiB) if corrupt else data, sha)
        answer = await client.put(f"{worker.url}/v1/files/{KEY}", content=data, headers={
            **AUTH, "X-Content-SHA256": sha, "Content-Range": f"bytes 0-{MiB - 1}/{MiB}"})
    assert (answer.status_code, answer.json()) == (200, {"local_path": str(target)})
    assert target.read_bytes() == data
    assert hashing.read_trusted_hash(target) == sha


async def test_status_query_on_a_partial_file_answers_416_with_the_offset_to_resume_from(tmp_path, client):
    data = os.urandom(1000)
    sha = hashlib.sha256(data).hexdigest()
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        target = worker.models_dir / "m" / "model.gguf"
        _leave_unfinished(target, data[:400], sha)
        answer = await client.put(f"{worker.url}/v1/files/{KEY}", content=b"", headers={
            **AUTH, "X-Content-SHA256": sha, "Content-Range": "bytes */1000"})
    assert answer.status_code == 416
    assert answer.headers["X-File-Size"] == "400"
    assert answer.json() == {"error": "file holds 400 of 1000 bytes; continue from byte 400"}


def _tiny_disk(free_bytes: int) -> DiskBudget:
    return DiskBudget(min_free_bytes=1000, free_bytes=lambda _path: free_bytes)


async def test_upload_larger_than_the_free_disk_is_refused_with_507_before_any_byte_is_written(
    tmp_path, client
):
    async with running_file_server(tmp_path / "worker" / "models", disk_budget=_tiny_disk(5000)) as worker:
        full = await client.put(f"{worker.url}/v1/files/models/m/a.bin", content=b"x" * 4001, headers=AUTH)
        ranged = await client.put(f"{worker.url}/v1/files/models/m/b.bin", content=b"x" * 4001, headers={
            **AUTH, "Content-Range": "bytes 0-4000/4001"})
        fits = await client.put(f"{worker.url}/v1/files/models/m/c.bin", content=b"x" * 4000, headers=AUTH)
        leftovers = sorted(p.name for p in (worker.models_dir / "m").iterdir())
    assert full.status_code == 507
    assert full.json()["error"].startswith(
        "not enough disk space for key 'models/m/a.bin': it needs 4001 bytes but the filesystem of ")
    assert "5000 bytes free (0 reserved by uploads in progress, 1000 kept free by CORRAL_STAGING_MIN_FREE_BYTES)" \
        in full.json()["error"]
    assert ranged.status_code == 507
    assert fits.status_code == 200
    assert leftovers == ["c.bin", "c.bin.sha256"]


async def test_stage_file_refused_for_disk_space_fails_at_once_naming_file_node_status_and_fix(tmp_path, client):
    source = _source(tmp_path, 3 * MiB)
    async with running_file_server(tmp_path / "worker" / "models", disk_budget=_tiny_disk(MiB)) as worker:
        with pytest.raises(StagingFailed) as raised:
            await stage_file(client, worker.url, KEY, source, TOKEN, retry_policy=FAST_RETRIES)
        received = worker.body_bytes
        puts = worker.server.stats.requests["PUT"]
        url = worker.url
    assert raised.value.status == 507
    assert puts == 1  # not retried
    assert received == 0  # Expect: 100-continue: the refusal came before the body
    text = str(raised.value)
    assert str(source) in text and url in text and "HTTP 507" in text
    assert "LOCALAI_MODELS_PATH" in text


async def test_temp_and_list_routes_follow_the_reference(tmp_path, client):
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        await client.put(f"{worker.url}/v1/files/models/m/sub/a.bin", content=b"a", headers=AUTH)
        await client.put(f"{worker.url}/v1/files/models/m/b.bin", content=b"b", headers=AUTH)
        listed = await client.get(f"{worker.url}/v1/files-list/models/m", headers=AUTH)
        missing = await client.get(f"{worker.url}/v1/files-list/models/none", headers=AUTH)
        temp = await client.post(f"{worker.url}/v1/files/temp", headers=AUTH)
    assert listed.json() == {"files": ["b.bin", "sub/a.bin"]}  # sidecars are the worker's, not listed
    assert (missing.status_code, missing.json()) == (404, {"error": "directory not found"})
    temp_path = Path(temp.json()["local_path"])
    assert temp_path.parent == worker.models_dir.parent / "staging" and temp_path.name.startswith("localai-output-")
