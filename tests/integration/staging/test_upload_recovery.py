"""Interrupted and refused uploads against the real worker file server: resume, finalise, 507."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
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


async def test_upload_cut_after_n_bytes_resumes_at_n_and_ends_with_the_source_sha256(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    source = _source(tmp_path, 8 * MiB + 5)
    cut_at = 3 * MiB + 123
    sent: list[tuple[int, int]] = []
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        proxy = CutProxy(worker.port, cut_after_body_bytes=cut_at).start()
        try:
            remote = await stage_file(
                client,
                f"http://127.0.0.1:{proxy.port}",
                KEY,
                source,
                TOKEN,
                retry_policy=FAST_RETRIES,
                on_progress=lambda s, t: sent.append((s, t)),
            )
        finally:
            proxy.stop()
        received = worker.body_bytes
    puts = [h.decode() for h in proxy.heads if h.startswith(b"PUT ")]
    size = source.stat().st_size
    assert proxy.cuts == 1
    # A file never hashed here: its first range goes while it is hashed (no hash, all but the last byte) ...
    assert f"Content-Range: bytes 0-{size - 2}/{size}" in puts[0]
    assert "X-Content-SHA256" not in puts[0]
    # ... and after the cut the rest goes with the hash, resumed exactly at N.
    assert f"Content-Range: bytes {cut_at}-{size - 1}/{size}" in puts[1]
    assert f"X-Content-SHA256: {_sha256(source)}" in puts[1]
    assert len(puts) == 2
    assert received == size  # N bytes before the cut + the rest after it, nothing twice
    assert worker.hash_read_bytes == 0  # the verify continued the digest of the N bytes kept at the cut
    assert _sha256(Path(remote)) == _sha256(source)
    assert (cut_at, size) in sent  # the resumed attempt reports from the resume offset
    assert sent[-1] == (size, size)


async def test_first_staging_sends_while_hashing_and_neither_side_reads_the_file_back(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    source = _source(tmp_path, 4 * MiB + 7)
    size, sha = source.stat().st_size, _sha256(source)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        proxy = CutProxy(worker.port).start()  # forwards everything, records each request head
        try:
            remote = await stage_file(client, f"http://127.0.0.1:{proxy.port}", KEY, source, TOKEN)
            first_puts = sum(h.startswith(b"PUT ") for h in proxy.heads)
            again = await stage_file(client, f"http://127.0.0.1:{proxy.port}", KEY, source, TOKEN)
        finally:
            proxy.stop()
        received, read_back = worker.body_bytes, worker.hash_read_bytes
    puts = [h.decode() for h in proxy.heads if h.startswith(b"PUT ")]
    # The upload did not wait for the local hash: all but the last byte went without it ...
    assert f"Content-Range: bytes 0-{size - 2}/{size}" in puts[0]
    assert "X-Content-SHA256" not in puts[0]
    # ... and the last byte carried it, for the worker to verify the whole file before it is usable.
    assert f"Content-Range: bytes {size - 1}-{size - 1}/{size}" in puts[1]
    assert f"X-Content-SHA256: {sha}" in puts[1]
    assert first_puts == len(puts) == 2  # the second staging of the unchanged file sent nothing
    assert again == remote and _sha256(Path(remote)) == sha
    assert received == size  # every byte once
    assert read_back == 0  # the worker hashed both ranges as they arrived: nothing was read back
    assert hashing.read_trusted_hash(Path(remote)) == sha  # what the worker computed, recorded
    assert hashing.read_trusted_hash(source) == sha  # the frontend's hash, recorded for the next staging


async def test_a_corrupted_byte_in_the_range_sent_before_the_hash_is_refused_and_leaves_no_file(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    source = _source(tmp_path, 2 * MiB)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        proxy = CutProxy(worker.port, flip_body_byte_at=MiB + 3).start()
        try:
            with pytest.raises(StagingFailed) as failure:
                await stage_file(
                    client, f"http://127.0.0.1:{proxy.port}", KEY, source, TOKEN, retry_policy=FAST_RETRIES
                )
        finally:
            proxy.stop()
        target = worker.models_dir / "m" / "model.gguf"
        leftovers = sorted(p.name for p in target.parent.iterdir()) if target.parent.exists() else []
    assert proxy.flips == 1
    assert failure.value.status == 400
    assert f"sha256 mismatch: expected {_sha256(source)}" in str(failure.value)
    assert leftovers == []  # neither the corrupt file nor a hash of it


async def test_a_prefix_hashed_before_a_restart_or_changed_since_is_read_back_for_the_verify(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    data = os.urandom(3 * MiB)
    size, sha = len(data), hashlib.sha256(data).hexdigest()
    url_path = f"/v1/files/{KEY}"

    def last_byte_headers() -> dict[str, str]:
        return {**AUTH, "X-Content-SHA256": sha, "Content-Range": f"bytes {size - 1}-{size - 1}/{size}"}

    prefix_headers = {**AUTH, "Content-Range": f"bytes 0-{size - 2}/{size}"}
    models = tmp_path / "worker" / "models"
    async with running_file_server(models) as worker:  # same process: the kept digest is continued
        assert (
            await client.put(worker.url + url_path, content=data[:-1], headers=prefix_headers)
        ).status_code == 308
        head = await client.head(worker.url + url_path, headers=AUTH)
        done = await client.put(worker.url + url_path, content=data[-1:], headers=last_byte_headers())
        same_process_read = worker.hash_read_bytes
    assert head.headers["X-Content-SHA256"] == hashlib.sha256(data[:-1]).hexdigest()  # the partial, unread
    assert done.status_code == 200 and same_process_read == 0
    (models / "m" / "model.gguf").unlink()
    hashing.remove_sidecars(models / "m" / "model.gguf")
    async with running_file_server(models) as worker:
        assert (
            await client.put(worker.url + url_path, content=data[:-1], headers=prefix_headers)
        ).status_code == 308
    async with running_file_server(models) as restarted:  # a new process: no digest of the prefix
        done = await client.put(restarted.url + url_path, content=data[-1:], headers=last_byte_headers())
        restarted_read = restarted.hash_read_bytes
    assert done.status_code == 200 and restarted_read == size
    (models / "m" / "model.gguf").unlink()
    hashing.remove_sidecars(models / "m" / "model.gguf")
    async with running_file_server(models) as worker:
        assert (
            await client.put(worker.url + url_path, content=data[:-1], headers=prefix_headers)
        ).status_code == 308
        target = models / "m" / "model.gguf"
        before_ns = target.stat().st_mtime_ns
        with open(target, "r+b") as file:  # the prefix changed in place, same size: its digest is not used
            file.write(b"\0")
        os.utime(target, ns=(before_ns + 10**9, before_ns + 10**9))
        refused = await client.put(worker.url + url_path, content=data[-1:], headers=last_byte_headers())
        changed_read = worker.hash_read_bytes
    assert refused.status_code == 400 and "sha256 mismatch" in refused.json()["error"]
    assert changed_read == size


async def test_full_size_unfinished_file_with_correct_content_is_finalised_without_resending(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
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


async def test_full_size_unfinished_file_with_corrupt_content_is_removed_and_sent_again(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
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
async def test_reference_style_put_from_zero_over_a_full_size_unfinished_file(
    tmp_path: Path, client: httpx.AsyncClient, corrupt: bool
) -> None:
    data = os.urandom(MiB)
    sha = hashlib.sha256(data).hexdigest()
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        target = worker.models_dir / "m" / "model.gguf"
        _leave_unfinished(target, os.urandom(MiB) if corrupt else data, sha)
        answer = await client.put(
            f"{worker.url}/v1/files/{KEY}",
            content=data,
            headers={**AUTH, "X-Content-SHA256": sha, "Content-Range": f"bytes 0-{MiB - 1}/{MiB}"},
        )
    assert (answer.status_code, answer.json()) == (200, {"local_path": str(target)})
    assert target.read_bytes() == data
    assert hashing.read_trusted_hash(target) == sha


async def test_status_query_on_a_partial_file_answers_416_with_the_offset_to_resume_from(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    data = os.urandom(1000)
    sha = hashlib.sha256(data).hexdigest()
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        target = worker.models_dir / "m" / "model.gguf"
        _leave_unfinished(target, data[:400], sha)
        answer = await client.put(
            f"{worker.url}/v1/files/{KEY}",
            content=b"",
            headers={**AUTH, "X-Content-SHA256": sha, "Content-Range": "bytes */1000"},
        )
    assert answer.status_code == 416
    assert answer.headers["X-File-Size"] == "400"
    assert answer.json() == {"error": "file holds 400 of 1000 bytes; continue from byte 400"}


def _tiny_disk(free_bytes: int) -> DiskBudget:
    return DiskBudget(min_free_bytes=1000, free_bytes=lambda _path: free_bytes)


async def test_upload_larger_than_the_free_disk_is_refused_with_507_before_any_byte_is_written(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    async with running_file_server(tmp_path / "worker" / "models", disk_budget=_tiny_disk(5000)) as worker:
        full = await client.put(f"{worker.url}/v1/files/models/m/a.bin", content=b"x" * 4001, headers=AUTH)
        ranged = await client.put(
            f"{worker.url}/v1/files/models/m/b.bin",
            content=b"x" * 4001,
            headers={**AUTH, "Content-Range": "bytes 0-4000/4001"},
        )
        fits = await client.put(f"{worker.url}/v1/files/models/m/c.bin", content=b"x" * 4000, headers=AUTH)
        leftovers = sorted(p.name for p in (worker.models_dir / "m").iterdir())
    assert full.status_code == 507
    assert full.json()["error"].startswith(
        "not enough disk space for key 'models/m/a.bin': it needs 4001 bytes but the filesystem of "
    )
    assert (
        "5000 bytes free (0 reserved by uploads in progress, 1000 kept free by CORRAL_STAGING_MIN_FREE_BYTES)"
        in full.json()["error"]
    )
    assert ranged.status_code == 507
    assert fits.status_code == 200
    assert leftovers == ["c.bin", "c.bin.sha256"]


async def test_stage_file_refused_for_disk_space_fails_at_once_naming_file_node_status_and_fix(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
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


async def test_temp_and_list_routes_follow_the_reference(tmp_path: Path, client: httpx.AsyncClient) -> None:
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        await client.put(f"{worker.url}/v1/files/models/m/sub/a.bin", content=b"a", headers=AUTH)
        await client.put(f"{worker.url}/v1/files/models/m/b.bin", content=b"b", headers=AUTH)
        listed = await client.get(f"{worker.url}/v1/files-list/models/m", headers=AUTH)
        missing = await client.get(f"{worker.url}/v1/files-list/models/none", headers=AUTH)
        temp = await client.post(f"{worker.url}/v1/files/temp", headers=AUTH)
    assert listed.json() == {"files": ["b.bin", "sub/a.bin"]}  # sidecars are the worker's, not listed
    assert (missing.status_code, missing.json()) == (404, {"error": "directory not found"})
    temp_path = Path(temp.json()["local_path"])
    assert temp_path.parent == worker.models_dir.parent / "staging" and temp_path.name.startswith(
        "localai-output-"
    )


async def test_a_server_that_ignores_content_range_is_refused_not_trusted_with_a_short_file(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    """A plain PUT server (no resumable protocol) would keep the first range as the whole file, unverified."""

    class PlainPut(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"local_path": "/models/m/model.gguf"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PlainPut)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(StagingFailed, match="answered 200 to a partial range") as failure:
            await stage_file(
                client,
                f"http://127.0.0.1:{server.server_address[1]}",
                KEY,
                _source(tmp_path, MiB),
                TOKEN,
                retry_policy=FAST_RETRIES,
            )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert failure.value.status == 200
