"""The worker file server (reference §6.4) on real sockets, driven by real httpx clients."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import tracemalloc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import pytest

from corral.staging.disk_space import DiskBudget
from corral.staging.errors import KeyEscapesDirectory, StagingFailed
from corral.staging.file_server import ThreadedFileServer, TransferStats
from corral.staging.receiver import build_file_server
from corral.staging.uploader import RetryPolicy, stage_file, stage_files

TOKEN = "s3cret-registration-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAST_RETRIES = RetryPolicy(max_attempts=6, first_backoff_s=0.05, max_backoff_s=0.2)
MiB = 1 << 20


@dataclass
class RunningServer:
    url: str
    port: int
    models_dir: Path
    counter: TransferStats


class FileServerFactory(Protocol):
    """The file_server fixture: ``async with file_server(token=..., ...) as server``."""

    def __call__(
        self,
        token: str = ...,
        *,
        readiness: Callable[[], str | None] = ...,
        allow_unauthenticated: bool = ...,
        max_upload_bytes: int = ...,
        disk_budget: DiskBudget | None = ...,
    ) -> contextlib.AbstractAsyncContextManager[RunningServer]: ...


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def _serve(server: ThreadedFileServer, port: int = 0) -> AsyncIterator[int]:
    """Run the threaded file server on 127.0.0.1:``port`` (0 = any) until the block exits."""
    await server.start("127.0.0.1", port)
    try:
        yield server.port
    finally:
        await server.stop()


@pytest.fixture
def file_server(tmp_path: Path) -> FileServerFactory:
    """Factory: ``async with file_server(token=..., ...) as server`` runs a file server over tmp_path."""

    @contextlib.asynccontextmanager
    async def start(
        token: str = TOKEN,
        *,
        readiness: Callable[[], str | None] = lambda: None,
        allow_unauthenticated: bool = False,
        max_upload_bytes: int = 50 << 30,
        disk_budget: DiskBudget | None = None,
    ) -> AsyncIterator[RunningServer]:
        models_dir = tmp_path / "worker" / "models"
        models_dir.mkdir(parents=True, exist_ok=True)
        server = build_file_server(
            models_dir,
            token,
            readiness=readiness,
            allow_unauthenticated=allow_unauthenticated,
            max_upload_bytes=max_upload_bytes,
            disk_budget=disk_budget,
        )
        async with _serve(server) as port:
            yield RunningServer(f"http://127.0.0.1:{port}", port, models_dir, server.stats)

    return start


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as http:
        yield http


def _source_file(tmp_path: Path, size_bytes: int, name: str = "model.gguf", seed: int = 7) -> Path:
    path = tmp_path / "frontend" / "models" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    with open(path, "wb") as file:
        remaining = size_bytes
        while remaining > 0:
            piece = block[:remaining]
            file.write(piece)
            remaining -= len(piece)
    return path


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _raw_request(
    port: int, request: bytes, *, close_after_send: bool = False, linger_s: float = 0.0
) -> bytes:
    """Send raw bytes (so keys reach the server exactly as written); return the raw answer.

    ``close_after_send`` drops the connection ``linger_s`` after sending, like a crashed client.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    if close_after_send:
        await asyncio.sleep(linger_s)
        writer.close()
        await writer.wait_closed()
        return b""
    answer = await asyncio.wait_for(reader.read(), 10)  # requests carry "Connection: close"
    writer.close()
    return answer


# --- probes -------------------------------------------------------------------------------------------


async def test_healthz_answers_ok_without_auth_for_get_and_head(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        got = await client.get(f"{server.url}/healthz")
        head = await client.head(f"{server.url}/healthz")
    assert (got.status_code, got.text) == (200, "ok")
    assert head.status_code == 200


async def test_readyz_is_ok_when_ready_and_503_with_the_reason_when_not(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    reason: list[str | None] = [None]
    async with file_server(readiness=lambda: reason[0]) as server:
        ready = await client.get(f"{server.url}/readyz")
        reason[0] = "NATS connection is down: worker cannot receive work"
        not_ready = await client.get(f"{server.url}/readyz")
        not_ready_head = await client.head(f"{server.url}/readyz")
    assert (ready.status_code, ready.text) == (200, "ok")
    assert not_ready.status_code == 503
    assert not_ready.text == "not ready: NATS connection is down: worker cannot receive work"
    assert not_ready_head.status_code == 503


async def test_readyz_reports_a_crashing_readiness_check_as_not_ready(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    def broken() -> str | None:
        raise RuntimeError("boom")

    async with file_server(readiness=broken) as server:
        answer = await client.get(f"{server.url}/readyz")
    assert (answer.status_code, answer.text) == (503, "not ready: readiness check failed: boom")


# --- auth ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers, message",
    [
        # no Authorization header at all
        ({}, "missing 'Authorization: Bearer <registration token>' header"),
        # a different scheme
        ({"Authorization": f"Basic {TOKEN}"}, "missing 'Authorization: Bearer <registration token>' header"),
        # the right scheme with a wrong token
        (
            {"Authorization": "Bearer nope"},
            "wrong bearer token: it must equal the worker's registration token",
        ),
        # a prefix of the right token is still wrong
        (
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            "wrong bearer token: it must equal the worker's registration token",
        ),
    ],
)
async def test_v1_requests_without_the_right_bearer_token_get_401(
    file_server: FileServerFactory, client: httpx.AsyncClient, headers: dict[str, str], message: str
) -> None:
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/x.gguf"
        got = await client.get(url, headers=headers)
        put = await client.put(url, content=b"data", headers=headers)
        head = await client.head(url, headers=headers)
        assert not (server.models_dir / "m" / "x.gguf").exists()
    assert (got.status_code, got.json()) == (401, {"error": message})
    assert (put.status_code, put.json()) == (401, {"error": message})
    assert head.status_code == 401


async def test_worker_without_a_token_refuses_v1_requests_and_explains_why(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server(token="") as server:
        answer = await client.put(f"{server.url}/v1/files/models/m/x", content=b"x", headers=AUTH)
        health = await client.get(f"{server.url}/healthz")
    assert answer.status_code == 401
    assert "no registration token" in answer.json()["error"]
    assert "allow_unauthenticated" in answer.json()["error"]
    assert health.status_code == 200


async def test_worker_without_a_token_serves_v1_only_when_unauthenticated_access_is_allowed(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server(token="", allow_unauthenticated=True) as server:
        answer = await client.put(f"{server.url}/v1/files/models/m/x", content=b"x")
    assert answer.status_code == 200


# --- upload, HEAD, GET --------------------------------------------------------------------------------


async def test_uploaded_file_is_reported_by_head_with_the_source_sha256_size_and_path(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    data = os.urandom(3 * MiB + 17)
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/llama3/sub/model.gguf"
        put = await client.put(url, content=data, headers={**AUTH, "X-Content-SHA256": _sha256(data)})
        head = await client.head(url, headers=AUTH)
    target = server.models_dir / "llama3" / "sub" / "model.gguf"
    assert (put.status_code, put.json()) == (200, {"local_path": str(target)})
    assert target.read_bytes() == data
    assert head.status_code == 200
    assert head.headers["X-Content-SHA256"] == _sha256(data)
    assert head.headers["X-File-Size"] == str(len(data))
    assert head.headers["Content-Length"] == str(len(data))
    assert head.headers["X-Local-Path"] == str(target)
    assert head.headers["Accept-Ranges"] == "bytes"
    assert "X-Target-SHA256" not in head.headers
    stat = target.stat()  # the worker's record: its own hash, bound to the file's size, mtime and inode
    assert (
        target.parent / "model.gguf.sha256"
    ).read_text() == f"{_sha256(data)} {stat.st_size} {stat.st_mtime_ns} {stat.st_ino}"
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.gguf", "model.gguf.sha256"]


async def test_upload_without_a_declared_hash_is_accepted_and_hashed_by_the_worker(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/plain.bin"
        put = await client.put(url, content=b"hello", headers=AUTH)
        head = await client.head(url, headers=AUTH)
    assert put.status_code == 200
    assert head.headers["X-Content-SHA256"] == _sha256(b"hello")


async def test_get_returns_the_uploaded_bytes(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    data = os.urandom(2 * MiB + 5)
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/weights.bin"
        await client.put(url, content=data, headers=AUTH)
        got = await client.get(url, headers=AUTH)
    assert got.status_code == 200
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.content == data


@pytest.mark.parametrize(
    "key, relative_path",
    [
        ("data/voices/en.onnx", "data/voices/en.onnx"),  # data/ keys go to the sibling data dir
        ("ephemeral/image/1a2b3c4d/cat.png", "staging/ephemeral/image/1a2b3c4d/cat.png"),  # staging dir
    ],
)
async def test_keys_outside_models_land_in_the_data_or_staging_dir(
    file_server: FileServerFactory, client: httpx.AsyncClient, key: str, relative_path: str
) -> None:
    async with file_server() as server:
        put = await client.put(f"{server.url}/v1/files/{key}", content=b"abc", headers=AUTH)
    expected = server.models_dir.parent / relative_path
    assert put.json() == {"local_path": str(expected)}
    assert expected.read_bytes() == b"abc"


async def test_head_and_get_of_a_missing_key_are_404(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        head = await client.head(f"{server.url}/v1/files/models/m/none.gguf", headers=AUTH)
        got = await client.get(f"{server.url}/v1/files/models/m/none.gguf", headers=AUTH)
    assert head.status_code == 404
    assert got.status_code == 404
    assert got.json() == {"error": "file not found: no file for key 'models/m/none.gguf'"}


async def test_head_get_and_put_of_a_directory_are_400(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        (server.models_dir / "m" / "dir").mkdir(parents=True)
        url = f"{server.url}/v1/files/models/m/dir"
        head = await client.head(url, headers=AUTH)
        got = await client.get(url, headers=AUTH)
        put = await client.put(url, content=b"x", headers=AUTH)
    assert head.status_code == 400
    assert got.json() == {"error": "key 'models/m/dir' names a directory, not a file"}
    assert put.status_code == 400


async def test_upload_with_a_wrong_sha256_is_rejected_and_leaves_no_file(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    data = b"the real bytes"
    wrong = _sha256(b"other bytes")
    async with file_server() as server:
        put = await client.put(
            f"{server.url}/v1/files/models/m/x.gguf",
            content=data,
            headers={**AUTH, "X-Content-SHA256": wrong},
        )
    assert put.status_code == 400
    assert put.json() == {"error": f"sha256 mismatch: expected {wrong} got {_sha256(data)}"}
    assert list((server.models_dir / "m").iterdir()) == []


async def test_failed_upload_keeps_the_previous_file_intact(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/x.gguf"
        await client.put(url, content=b"old", headers=AUTH)
        put = await client.put(url, content=b"new", headers={**AUTH, "X-Content-SHA256": "0" * 64})
        head = await client.head(url, headers=AUTH)
    assert put.status_code == 400
    assert (server.models_dir / "m" / "x.gguf").read_bytes() == b"old"
    assert head.headers["X-Content-SHA256"] == _sha256(b"old")


async def test_malformed_declared_hash_is_rejected_before_reading_the_body(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        put = await client.put(
            f"{server.url}/v1/files/models/m/x", content=b"x", headers={**AUTH, "X-Content-SHA256": "abc"}
        )
    assert put.status_code == 400
    assert put.json() == {"error": "X-Content-SHA256 must be 64 hex characters, got 'abc'"}


async def test_upload_larger_than_the_limit_is_rejected_with_413(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server(max_upload_bytes=1000) as server:
        put = await client.put(f"{server.url}/v1/files/models/m/big", content=b"x" * 1001, headers=AUTH)
        small = await client.put(f"{server.url}/v1/files/models/m/ok", content=b"x" * 1000, headers=AUTH)
    assert put.status_code == 413
    assert put.json() == {"error": "upload too large: 1001 bytes exceeds this worker's limit of 1000 bytes"}
    assert small.status_code == 200
    assert sorted(p.name for p in (server.models_dir / "m").iterdir()) == ["ok", "ok.sha256"]


async def test_chunked_upload_over_the_limit_is_rejected_with_413_and_leaves_no_file(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"x" * 600

    async with file_server(max_upload_bytes=1000) as server:
        put = await client.put(f"{server.url}/v1/files/models/m/big", content=body(), headers=AUTH)
    assert put.status_code == 413
    assert list((server.models_dir / "m").iterdir()) == []


async def test_client_that_disconnects_mid_body_leaves_no_file(file_server: FileServerFactory) -> None:
    async with file_server() as server:
        request = (
            b"PUT /v1/files/models/m/cut.gguf HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100000\r\n\r\n".encode()
            + b"x" * 1000
        )
        await _raw_request(server.port, request, close_after_send=True)
        await asyncio.sleep(0.3)
        leftovers = list((server.models_dir / "m").iterdir())
    assert leftovers == []


async def test_put_below_an_existing_file_is_400(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        await client.put(f"{server.url}/v1/files/models/m/x.gguf", content=b"x", headers=AUTH)
        answer = await client.put(f"{server.url}/v1/files/models/m/x.gguf/inner", content=b"y", headers=AUTH)
    assert answer.status_code == 400
    assert answer.json() == {
        "error": f"a parent of {str(server.models_dir / 'm/x.gguf/inner')!r} is a file, not a directory"
    }


@pytest.mark.parametrize(
    "raw_path",
    [
        b"/v1/files/models/../../secret",  # plain dot segments
        b"/v1/files/models/%2e%2e/%2e%2e/secret",  # percent-encoded dot segments
        b"/v1/files/%2Fetc%2Fpasswd",  # an absolute path smuggled in as the key
        b"/v1/files/data/..%2F..%2Fsecret",  # encoded slashes around '..'
    ],
)
async def test_traversal_keys_are_rejected_with_400_and_write_nothing(
    file_server: FileServerFactory, raw_path: bytes
) -> None:
    async with file_server() as server:
        request = (
            b"PUT "
            + raw_path
            + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nContent-Length: 3\r\n\r\nabc".encode()
        )
        answer = await _raw_request(server.port, request)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert b'{"error":"invalid storage key ' in answer
    assert not (server.models_dir.parent.parent / "secret").exists()
    assert not (server.models_dir.parent / "secret").exists()


async def test_percent_encoded_traversal_key_names_the_key_in_the_400(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        put = await client.put(
            f"{server.url}/v1/files/models/%2e%2e/%2e%2e/secret", content=b"x", headers=AUTH
        )
    assert put.status_code == 400
    assert put.json() == {"error": "invalid storage key 'models/../../secret': key has a '..' path segment"}


async def test_symlink_escaping_the_models_dir_is_rejected_and_nothing_is_written_outside(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with file_server() as server:
        os.symlink(outside, server.models_dir / "escape")
        put = await client.put(f"{server.url}/v1/files/models/escape/evil.gguf", content=b"x", headers=AUTH)
        got = await client.get(f"{server.url}/v1/files/models/escape/evil.gguf", headers=AUTH)
    assert put.status_code == 400
    assert "outside" in put.json()["error"]
    assert got.status_code == 400
    assert list(outside.iterdir()) == []


async def test_head_rehashes_a_file_changed_after_its_sidecar_was_written(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/x.gguf"
        await client.put(url, content=b"first", headers=AUTH)
        target = server.models_dir / "m" / "x.gguf"
        before_ns = target.stat().st_mtime_ns
        target.write_bytes(b"second")
        os.utime(target, ns=(before_ns + 10**9, before_ns + 10**9))
        head = await client.head(url, headers=AUTH)
    assert head.headers["X-Content-SHA256"] == _sha256(b"second")


async def test_head_reads_back_a_file_changed_in_place_at_the_same_size_and_nothing_else(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/x.gguf"
        await client.put(url, content=b"first", headers=AUTH)
        target = server.models_dir / "m" / "x.gguf"
        unchanged = await client.head(url, headers=AUTH)
        read_unchanged = server.counter.hash_read_bytes
        before_ns = target.stat().st_mtime_ns
        with open(target, "r+b") as file:  # same size, same inode, new content and mtime
            file.write(b"FIRST")
        os.utime(target, ns=(before_ns + 10**9, before_ns + 10**9))
        changed = await client.head(url, headers=AUTH)
        read_changed = server.counter.hash_read_bytes - read_unchanged
        again = await client.head(url, headers=AUTH)
    assert unchanged.headers["X-Content-SHA256"] == _sha256(b"first")
    assert read_unchanged == 0  # the receiver hashed the upload as it arrived; its record is trusted
    assert changed.headers["X-Content-SHA256"] == _sha256(b"FIRST")
    assert read_changed == 5  # the recorded hash no longer matches the file's mtime: read back once
    assert again.headers["X-Content-SHA256"] == _sha256(b"FIRST")
    assert server.counter.hash_read_bytes - read_unchanged == 5  # and recorded again


# --- stage_file (frontend uploader) -------------------------------------------------------------------


async def test_stage_file_uploads_and_returns_the_worker_path(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 3 * MiB + 1)
    async with file_server() as server:
        remote = await stage_file(client, server.url, "models/llama3/model.gguf", source, TOKEN)
    assert remote == str(server.models_dir / "llama3" / "model.gguf")
    assert Path(remote).read_bytes() == source.read_bytes()


async def test_stage_file_skips_the_upload_when_the_worker_already_has_the_same_file(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 2 * MiB)
    progress: list[tuple[int, int]] = []
    async with file_server() as server:
        first = await stage_file(client, server.url, "models/m/model.gguf", source, TOKEN)
        mtime_ns = Path(first).stat().st_mtime_ns
        puts_before, heads_before = server.counter.requests["PUT"], server.counter.requests["HEAD"]
        second = await stage_file(
            client,
            server.url,
            "models/m/model.gguf",
            source,
            TOKEN,
            on_progress=lambda s, t: progress.append((s, t)),
        )
    assert second == first
    assert server.counter.requests["PUT"] == puts_before  # the second staging sends nothing
    assert server.counter.requests["HEAD"] == heads_before + 1
    assert server.counter.hash_read_bytes == 0  # and neither side read the file back to hash it
    assert Path(first).stat().st_mtime_ns == mtime_ns
    assert progress == [(2 * MiB, 2 * MiB)]


async def test_stage_file_replaces_a_worker_file_with_different_content(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, MiB, seed=1)
    async with file_server() as server:
        remote = await stage_file(client, server.url, "models/m/model.gguf", source, TOKEN)
        _source_file(tmp_path, MiB + 3, seed=2)
        puts_before = server.counter.requests["PUT"]
        again = await stage_file(client, server.url, "models/m/model.gguf", source, TOKEN)
        head = await client.head(f"{server.url}/v1/files/models/m/model.gguf", headers=AUTH)
    assert again == remote
    assert Path(remote).read_bytes() == source.read_bytes()
    assert head.headers["X-Content-SHA256"] == _sha256(source.read_bytes())
    # The changed file has no recorded hash: all but its last byte go while it is hashed, then the last one.
    assert server.counter.requests["PUT"] == puts_before + 2


async def test_stage_file_of_20_mib_keeps_memory_bounded_and_reports_progress_up_to_the_total(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    size_bytes = 20 * MiB
    source = _source_file(tmp_path, size_bytes)
    progress: list[tuple[int, int]] = []
    async with file_server() as server:
        tracemalloc.start()
        try:
            remote = await stage_file(
                client,
                server.url,
                "models/big/model.gguf",
                source,
                TOKEN,
                on_progress=lambda sent, total: progress.append((sent, total)),
            )
            _, peak_bytes = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak_bytes < 8 * MiB, f"peak {peak_bytes} bytes while staging a {size_bytes}-byte file"
    assert progress[-1] == (size_bytes, size_bytes)
    assert [sent for sent, _ in progress] == sorted(sent for sent, _ in progress)
    assert {total for _, total in progress} == {size_bytes}
    assert hashlib.sha256(Path(remote).read_bytes()).hexdigest() == _sha256(source.read_bytes())


async def test_stage_file_with_a_wrong_token_fails_naming_file_key_worker_and_status(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 10)
    async with file_server() as server:
        with pytest.raises(StagingFailed) as raised:
            await stage_file(
                client, server.url, "models/m/x.gguf", source, "wrong-token", retry_policy=FAST_RETRIES
            )
    failure = raised.value
    assert (failure.status, failure.key, failure.local_path, failure.worker_url) == (
        401,
        "models/m/x.gguf",
        source,
        server.url,
    )
    assert str(failure) == (
        f"staging {str(source)!r} as key 'models/m/x.gguf' to worker {server.url} failed (HTTP 401): "
        f"HEAD {server.url}/v1/files/models/m/x.gguf refused: unauthorized: the frontend's registration "
        "token does not match the worker's"
    )
    assert server.counter.requests == {"HEAD": 1}


async def test_stage_file_reports_the_workers_message_when_the_upload_is_refused(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 2000)
    async with file_server(max_upload_bytes=1000) as server:
        with pytest.raises(StagingFailed) as raised:
            await stage_file(client, server.url, "models/m/x.gguf", source, TOKEN, retry_policy=FAST_RETRIES)
    assert raised.value.status == 413
    assert raised.value.message == "upload too large: 2000 bytes exceeds this worker's limit of 1000 bytes"


async def test_stage_file_refuses_a_malformed_key_before_contacting_the_worker(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 10)
    with pytest.raises(KeyEscapesDirectory):
        await stage_file(client, "http://127.0.0.1:9", "models/../x", source, TOKEN)


async def test_stage_file_retries_until_the_worker_comes_up(
    file_server: FileServerFactory, tmp_path: Path, client: httpx.AsyncClient
) -> None:
    source = _source_file(tmp_path, 100_000)
    models_dir = tmp_path / "late" / "models"
    models_dir.mkdir(parents=True)
    sock = _bound_socket()  # bound but not listening: connections are refused until the server starts
    port = sock.getsockname()[1]
    server = build_file_server(models_dir, TOKEN, readiness=lambda: None)
    staging = asyncio.create_task(
        stage_file(
            client, f"http://127.0.0.1:{port}", "models/m/x.gguf", source, TOKEN, retry_policy=FAST_RETRIES
        )
    )
    await asyncio.sleep(0.15)
    assert not staging.done()
    sock.close()
    async with _serve(server, port):
        remote = await asyncio.wait_for(staging, 10)
    assert Path(remote).read_bytes() == source.read_bytes()


async def test_stage_file_gives_up_on_an_unreachable_worker_with_a_clear_error(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 10)
    sock = _bound_socket()  # never listens
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(StagingFailed) as raised:
        await stage_file(client, url, "models/m/x", source, TOKEN, retry_policy=RetryPolicy(3, 0.01, 0.01))
    sock.close()
    assert raised.value.status is None
    assert "gave up after 3 attempts: HEAD" in raised.value.message
    assert "ConnectError" in raised.value.message


async def test_stage_file_of_a_missing_local_file_fails_naming_it(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    with pytest.raises(StagingFailed) as raised:
        await stage_file(client, "http://127.0.0.1:9", "models/m/x", tmp_path / "nope.gguf", TOKEN)
    assert raised.value.message.startswith("cannot read the local file:")
    assert "nope.gguf" in str(raised.value)


async def test_stage_files_returns_worker_paths_by_key_and_reports_overall_progress(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    first = _source_file(tmp_path, MiB, name="a.gguf", seed=1)
    second = _source_file(tmp_path, 2 * MiB, name="b/c.json", seed=2)
    progress: list[tuple[int, int]] = []
    async with file_server() as server:
        staged = await stage_files(
            client,
            server.url,
            [("models/m/a.gguf", first), ("models/m/b/c.json", second)],
            TOKEN,
            on_progress=lambda sent, total: progress.append((sent, total)),
        )
    assert staged == {
        "models/m/a.gguf": str(server.models_dir / "m" / "a.gguf"),
        "models/m/b/c.json": str(server.models_dir / "m" / "b" / "c.json"),
    }
    assert progress[-1] == (3 * MiB, 3 * MiB)
    assert [sent for sent, _ in progress] == sorted(sent for sent, _ in progress)


async def test_stage_file_of_an_empty_file_works(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 0)
    async with file_server() as server:
        remote = await stage_file(client, server.url, "models/m/empty", source, TOKEN)
    assert Path(remote).read_bytes() == b""


async def test_stage_file_without_resume_sends_a_plain_put(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, MiB)
    async with file_server() as server:
        remote = await stage_file(client, server.url, "models/m/x", source, TOKEN, resumable=False)
    assert Path(remote).read_bytes() == source.read_bytes()


# --- resumable protocol (Content-Range) ---------------------------------------------------------------


def _range_headers(start: int, end: int, total: int, sha: str) -> dict[str, str]:
    return {**AUTH, "Content-Range": f"bytes {start}-{end}/{total}", "X-Content-SHA256": sha}


async def test_range_upload_in_two_parts_answers_308_then_200_and_head_shows_the_partial(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    data = os.urandom(3000)
    sha = _sha256(data)
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/r.gguf"
        first = await client.put(url, content=data[:1000], headers=_range_headers(0, 999, 3000, sha))
        partial = await client.head(url, headers=AUTH)
        second = await client.put(url, content=data[1000:], headers=_range_headers(1000, 2999, 3000, sha))
        done = await client.head(url, headers=AUTH)
    target = server.models_dir / "m" / "r.gguf"
    assert first.status_code == 308
    assert (first.headers["Range"], first.headers["X-File-Size"]) == ("bytes=0-999", "1000")
    assert partial.headers["X-Target-SHA256"] == sha
    assert partial.headers["X-File-Size"] == "1000"
    assert "X-Content-SHA256" not in partial.headers
    assert (second.status_code, second.json()) == (200, {"local_path": str(target)})
    assert target.read_bytes() == data
    assert done.headers["X-Content-SHA256"] == sha
    assert "X-Target-SHA256" not in done.headers
    assert not (target.parent / "r.gguf.sha256.target").exists()


async def test_range_upload_at_the_wrong_offset_is_416_with_the_current_size(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    data = os.urandom(3000)
    sha = _sha256(data)
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/r.gguf"
        await client.put(url, content=data[:1000], headers=_range_headers(0, 999, 3000, sha))
        wrong = await client.put(url, content=data[2000:], headers=_range_headers(2000, 2999, 3000, sha))
    assert wrong.status_code == 416
    assert wrong.headers["Content-Range"] == "bytes */3000"
    assert wrong.headers["X-File-Size"] == "1000"
    assert wrong.json() == {"error": "Content-Range start 2000 does not match current file size 1000"}


async def test_range_upload_continuing_with_a_different_hash_is_409_and_discards_the_partial(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    data = os.urandom(3000)
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/r.gguf"
        await client.put(url, content=data[:1000], headers=_range_headers(0, 999, 3000, _sha256(data)))
        other = "f" * 64
        conflict = await client.put(url, content=data[1000:], headers=_range_headers(1000, 2999, 3000, other))
    assert conflict.status_code == 409
    assert conflict.json()["error"].endswith("restart from byte 0")
    assert list((server.models_dir / "m").iterdir()) == []


async def test_range_upload_whose_bytes_do_not_match_the_declared_hash_is_400_and_deleted(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    declared = _sha256(b"a" * 100)
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/r.gguf"
        answer = await client.put(url, content=b"b" * 100, headers=_range_headers(0, 99, 100, declared))
    assert answer.status_code == 400
    assert answer.json() == {"error": f"sha256 mismatch: expected {declared} got {_sha256(b'b' * 100)}"}
    assert list((server.models_dir / "m").iterdir()) == []


@pytest.mark.parametrize(
    "content_range",
    [
        "items 0-9/10",  # wrong unit
        "bytes 5-2/10",  # end before start
        "bytes 0-9/5",  # total smaller than the range
        "bytes x-9/10",  # not a number
        "bytes 0-9",  # no total
    ],
)
async def test_malformed_content_range_is_400(
    file_server: FileServerFactory, client: httpx.AsyncClient, content_range: str
) -> None:
    async with file_server() as server:
        answer = await client.put(
            f"{server.url}/v1/files/models/m/r",
            content=b"0123456789",
            headers={**AUTH, "Content-Range": content_range},
        )
    assert answer.status_code == 400
    assert "Content-Range" in answer.json()["error"]


async def test_range_upload_from_zero_over_a_different_complete_file_replaces_it(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        url = f"{server.url}/v1/files/models/m/r"
        await client.put(url, content=b"old content", headers=AUTH)
        new = b"brand new content"
        answer = await client.put(
            url, content=new, headers=_range_headers(0, len(new) - 1, len(new), _sha256(new))
        )
    assert answer.status_code == 200
    assert (server.models_dir / "m" / "r").read_bytes() == new


async def test_stage_file_resumes_a_dropped_upload_from_the_workers_partial_size(
    file_server: FileServerFactory, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    source = _source_file(tmp_path, 3 * MiB)
    data = source.read_bytes()
    sha = _sha256(data)
    progress: list[tuple[int, int]] = []
    async with file_server() as server:
        # A previous attempt delivered the first 1 MiB and then the connection dropped.
        url = f"{server.url}/v1/files/models/m/model.gguf"
        await client.put(url, content=data[:MiB], headers=_range_headers(0, MiB - 1, len(data), sha))
        body_bytes_before = server.counter.body_bytes_received
        remote = await stage_file(
            client,
            server.url,
            "models/m/model.gguf",
            source,
            TOKEN,
            on_progress=lambda sent, total: progress.append((sent, total)),
        )
        resumed_bytes = server.counter.body_bytes_received - body_bytes_before
    assert Path(remote).read_bytes() == data
    assert resumed_bytes == 2 * MiB
    assert progress[0] == (MiB, 3 * MiB)
    assert progress[-1] == (3 * MiB, 3 * MiB)


async def test_dropped_range_upload_keeps_the_bytes_received_for_a_later_resume(
    file_server: FileServerFactory, client: httpx.AsyncClient
) -> None:
    async with file_server() as server:
        request = (
            b"PUT /v1/files/models/m/cut.gguf HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nX-Content-SHA256: {'a' * 64}\r\n".encode()
            + b"Content-Range: bytes 0-99999/100000\r\nContent-Length: 100000\r\n\r\n"
            + b"x" * 4000
        )
        # Bytes the server has already read when the connection drops are kept.
        await _raw_request(server.port, request, close_after_send=True, linger_s=0.3)
        await asyncio.sleep(0.3)
        head = await client.head(f"{server.url}/v1/files/models/m/cut.gguf", headers=AUTH)
    assert head.status_code == 200
    assert head.headers["X-File-Size"] == "4000"
    assert head.headers["X-Target-SHA256"] == "a" * 64
