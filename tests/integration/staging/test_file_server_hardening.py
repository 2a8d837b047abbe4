"""The worker file server against careless and hostile clients: raw sockets on the real threaded server.

Issue 10: sidecars are the worker's own, auth is decided on the headers before any body byte is
read, connections are capped, headers and bodies have timeouts, chunked uploads reserve disk as
they grow. Issue 16: a file that did not change is never hashed twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import select
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from corral.staging import hashing
from corral.staging.disk_space import DiskBudget
from corral.staging.file_server import ServerLimits
from corral.staging.uploader import stage_file
from support.file_servers import AUTH, TOKEN, running_file_server
from support.waiting import wait_for

MiB = 1 << 20
GUARD_S = (
    20.0  # a socket read that takes this long means the server did not drop/answer (never asserted as timing)
)
RESERVED_RULE = (
    "is a name reserved for the worker's own metadata (hash sidecars '*.sha256', '*.sha256.target' "
    "and hidden '.*.upload' / '.*.tmp' files of uploads in progress); clients can neither write "
    "nor read it"
)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as http:
        yield http


@pytest.fixture
def hash_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every full-file hash the worker or frontend computes (a hook on the one hashing function)."""
    calls: list[Path] = []
    real = hashing.sha256_file

    def counting(path: Path, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(Path(path))
        return real(path, **kwargs)

    monkeypatch.setattr(hashing, "sha256_file", counting)
    return calls


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD_S)
    return sock


def _read_until_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


async def _read_all(sock: socket.socket) -> bytes:
    return await asyncio.to_thread(_read_until_eof, sock)


# --- sidecars are the worker's own ----------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".sha256", ".sha256.target"])
async def test_a_client_cannot_put_or_get_a_sidecar_and_head_keeps_the_hash_of_the_real_bytes(
    tmp_path: Path, client: httpx.AsyncClient, suffix: str
) -> None:
    data = os.urandom(MiB + 3)
    forged = _sha256(b"not these bytes")
    async with running_file_server(tmp_path / "models") as server:
        url = f"{server.url}/v1/files/models/m/x.gguf"
        assert (await client.put(url, content=data, headers=AUTH)).status_code == 200
        put = await client.put(url + suffix, content=forged.encode(), headers=AUTH)
        get = await client.get(url + suffix, headers=AUTH)
        head = await client.head(url, headers=AUTH)
    message = f"invalid storage key 'models/m/x.gguf{suffix}': 'x.gguf{suffix}' {RESERVED_RULE}"
    assert (put.status_code, put.json()) == (403, {"error": message})
    assert (get.status_code, get.json()) == (403, {"error": message})
    assert head.headers["X-Content-SHA256"] == _sha256(data)
    assert "X-Target-SHA256" not in head.headers


async def test_hidden_upload_temp_files_cannot_be_named_by_clients(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    async with running_file_server(tmp_path / "models") as server:
        answer = await client.put(
            f"{server.url}/v1/files/models/m/.x.gguf.abc123.upload", content=b"x", headers=AUTH
        )
    assert answer.status_code == 403
    assert answer.json() == {
        "error": f"invalid storage key 'models/m/.x.gguf.abc123.upload': "
        f"'.x.gguf.abc123.upload' {RESERVED_RULE}"
    }


async def test_the_file_list_does_not_show_sidecars(tmp_path: Path, client: httpx.AsyncClient) -> None:
    async with running_file_server(tmp_path / "models") as server:
        await client.put(f"{server.url}/v1/files/models/m/a.bin", content=b"a", headers=AUTH)
        listed = await client.get(f"{server.url}/v1/files-list/models/m", headers=AUTH)
    assert listed.json() == {"files": ["a.bin"]}
    assert (server.models_dir / "m" / "a.bin.sha256").exists()


async def test_a_hash_planted_on_disk_in_the_bare_hex_form_is_not_believed(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    data = b"real bytes"
    async with running_file_server(tmp_path / "models") as server:
        url = f"{server.url}/v1/files/models/m/x.bin"
        await client.put(url, content=data, headers=AUTH)
        (server.models_dir / "m" / "x.bin.sha256").write_text(_sha256(b"forged"))  # newer than the file
        head = await client.head(url, headers=AUTH)
    assert head.headers["X-Content-SHA256"] == _sha256(data)


# --- hashes are bound to size + mtime + inode ---------------------------------------------------------


async def test_a_byte_flipped_file_with_the_same_size_and_a_new_mtime_is_hashed_again(
    tmp_path: Path, client: httpx.AsyncClient, hash_calls: list[Path]
) -> None:
    data = bytearray(os.urandom(2 * MiB))
    async with running_file_server(tmp_path / "models") as server:
        url = f"{server.url}/v1/files/models/m/x.gguf"
        await client.put(url, content=bytes(data), headers=AUTH)
        target = server.models_dir / "m" / "x.gguf"
        before = target.stat()
        with open(target, "r+b") as file:  # same size, one byte different
            file.seek(MiB)
            file.write(bytes([data[MiB] ^ 0xFF]))
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns + 1))  # a new mtime, 1 ns later
        data[MiB] ^= 0xFF
        head = await client.head(url, headers=AUTH)
    assert target.stat().st_size == before.st_size
    assert head.headers["X-Content-SHA256"] == _sha256(bytes(data))
    assert hash_calls == [target]


async def test_an_unchanged_file_is_never_hashed_again_by_head(
    tmp_path: Path, client: httpx.AsyncClient, hash_calls: list[Path]
) -> None:
    async with running_file_server(tmp_path / "models") as server:
        url = f"{server.url}/v1/files/models/m/x.gguf"
        await client.put(url, content=os.urandom(MiB), headers=AUTH)
        heads = [await client.head(url, headers=AUTH) for _ in range(3)]
    assert len({h.headers["X-Content-SHA256"] for h in heads}) == 1
    assert hash_calls == []  # the receiver hashed while writing; HEAD trusts that record


async def test_restaging_an_unchanged_file_costs_a_head_and_no_hash_on_either_side(
    tmp_path: Path, hash_calls: list[Path]
) -> None:
    source = tmp_path / "frontend" / "m.gguf"
    source.parent.mkdir()
    source.write_bytes(os.urandom(3 * MiB))
    async with running_file_server(tmp_path / "models") as server, httpx.AsyncClient(timeout=30) as http:
        first = await stage_file(http, server.url, "models/m/m.gguf", source, TOKEN)
        hashed_first = list(hash_calls)
        puts_first = server.server.stats.requests["PUT"]
        second = await stage_file(http, server.url, "models/m/m.gguf", source, TOKEN)
    assert first == second
    assert hashed_first == [source]  # the frontend hashed its file once; the worker hashed while receiving
    assert hash_calls == [source]  # the second staging hashed nothing
    assert server.server.stats.requests["PUT"] == puts_first
    assert server.server.stats.requests["HEAD"] == 2


# --- auth before the body -------------------------------------------------------------------------------


async def test_a_wrong_token_with_a_huge_body_gets_401_at_once_and_the_connection_closes(
    tmp_path: Path,
) -> None:
    async with running_file_server(tmp_path / "models") as server:
        sock = _connect(server.port)
        with sock:
            sock.sendall(
                b"PUT /v1/files/models/m/big.bin HTTP/1.1\r\nHost: w\r\n"
                b"Authorization: Bearer wrong\r\nContent-Length: 100000000000\r\n\r\n"
            )
            answer = await _read_all(sock)  # EOF comes without one body byte sent
        stats = server.server.stats
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401 ")
    assert b"\r\nConnection: close" in head
    assert body == b'{"error":"wrong bearer token: it must equal the worker\'s registration token"}'
    assert stats.body_bytes_received == 0
    assert not (server.models_dir / "m").exists()


# --- connection cap, header and idle timeouts ---------------------------------------------------------


async def test_connections_past_the_cap_get_503_at_once_and_served_ones_keep_working(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    limits = ServerLimits(max_connections=2)
    async with running_file_server(tmp_path / "models", limits=limits) as server:
        holders = [_connect(server.port) for _ in range(2)]  # each holds a server thread, sending nothing
        try:
            await asyncio.to_thread(_wait_connections, server, 2)
            extra = _connect(server.port)
            with extra:
                refused = await _read_all(extra)
        finally:
            for sock in holders:
                sock.close()
        await asyncio.to_thread(_wait_connections, server, 0)
        health = await client.get(f"{server.url}/healthz")
    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert b"\r\nRetry-After: 1" in head
    assert body == (
        b'{"error": "the worker\'s file server already serves 2 connections '
        b'(CORRAL_FILE_SERVER_MAX_CONNECTIONS); retry shortly"}'
    )
    assert server.server.stats.connections_refused == 1
    assert health.status_code == 200


def _wait_connections(server, count: int) -> None:  # type: ignore[no-untyped-def]
    inner = server.server._server
    wait_for(lambda: len(inner.connections) == count, f"{count} open file-server connections", GUARD_S)


async def test_half_a_header_is_dropped_after_the_header_timeout(tmp_path: Path) -> None:
    async with running_file_server(tmp_path / "models", limits=ServerLimits(header_timeout_s=0.3)) as server:
        sock = _connect(server.port)
        with sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: w\r\n")  # no blank line: the header never ends
            answer = await _read_all(sock)
    assert answer == b""  # dropped without an answer (by the read timeout or the header watchdog)


async def test_a_header_sent_one_byte_at_a_time_is_dropped_although_bytes_keep_coming(tmp_path: Path) -> None:
    async with running_file_server(tmp_path / "models", limits=ServerLimits(header_timeout_s=0.5)) as server:
        sock = _connect(server.port)
        with sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Pad: ")
            dropped = await asyncio.to_thread(_trickle_until_dropped, sock)
        assert server.server.stats.header_timeouts == 1
    assert dropped


def _trickle_until_dropped(sock: socket.socket) -> bool:
    """Send one header byte every 0.1 s (each well inside any per-read timeout) until the server hangs up."""
    for _ in range(int(GUARD_S / 0.1)):
        readable, _, _ = select.select([sock], [], [], 0.1)
        if readable:
            return sock.recv(65536) == b""
        try:
            sock.sendall(b"a")
        except OSError:
            return True
    return False


async def test_a_body_that_stops_is_cut_after_the_idle_timeout(tmp_path: Path) -> None:
    async with running_file_server(tmp_path / "models", limits=ServerLimits(idle_timeout_s=0.3)) as server:
        sock = _connect(server.port)
        with sock:
            sock.sendall(
                f"PUT /v1/files/models/m/x.bin HTTP/1.1\r\nHost: w\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Length: 1000\r\n\r\n".encode()
                + b"x" * 10
            )
            answer = await _read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert body == (
        b'{"error":"short body: no body byte arrived for 0.3s (CORRAL_FILE_SERVER_IDLE_TIMEOUT); '
        b'10 bytes received"}'
    )
    assert not (server.models_dir / "m" / "x.bin").exists()


# --- chunked uploads reserve disk as they grow ----------------------------------------------------------


def _filesystem_of(capacity_bytes: int, root: Path):  # type: ignore[no-untyped-def]
    """A free-space probe for a filesystem of ``capacity_bytes`` holding what is under ``root``."""

    def free_bytes(_path: Path) -> int:
        used = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        return capacity_bytes - used

    return free_bytes


async def test_a_chunked_upload_that_outgrows_free_disk_is_refused_with_507_when_it_gets_there(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    budget = DiskBudget(min_free_bytes=MiB, free_bytes=_filesystem_of(8 * MiB, tmp_path))
    async with running_file_server(models, disk_budget=budget) as server:
        sock = _connect(server.port)
        with sock:
            sock.sendall(
                f"PUT /v1/files/models/c/big.bin HTTP/1.1\r\nHost: w\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Transfer-Encoding: chunked\r\n\r\n".encode()
            )
            sent, answer = await asyncio.to_thread(_send_chunks_until_answered, sock, 64)
        stats = server.server.stats
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 507 "), answer[:300]
    assert re.fullmatch(
        rb'\{"error":"not enough disk space for key \'models/c/big.bin\': it needs \d+ bytes but the filesystem '
        rb"of '.*' has \d+ bytes free \(\d+ reserved by uploads in progress, 1048576 kept free by "
        rb"CORRAL_STAGING_MIN_FREE_BYTES\); free space on the worker, move LOCALAI_MODELS_PATH to a larger "
        rb'volume, or schedule the model on another node"\}',
        body,
    ), body
    assert 6 * MiB <= stats.body_bytes_received <= 7 * MiB  # stopped at capacity minus what is kept free
    assert sent < 64
    assert [p for p in models.rglob("*") if p.is_file()] == []  # the partial temp file is gone


def _send_chunks_until_answered(sock: socket.socket, max_chunks: int) -> tuple[int, bytes]:
    chunk = b"%x\r\n" % MiB + os.urandom(MiB) + b"\r\n"
    for sent in range(max_chunks):
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            return sent, _read_until_eof(sock)
        sock.sendall(chunk)
    return max_chunks, _read_until_eof(sock)


async def test_a_chunked_upload_that_fits_is_stored_and_releases_its_reservation(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    budget = DiskBudget(min_free_bytes=MiB, free_bytes=_filesystem_of(64 * MiB, tmp_path))
    data = os.urandom(5 * MiB)

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(data), MiB):
            yield data[start : start + MiB]

    async with running_file_server(tmp_path / "models", disk_budget=budget) as server:
        answer = await client.put(f"{server.url}/v1/files/models/c/ok.bin", content=body(), headers=AUTH)
    assert answer.status_code == 200, answer.text
    assert (server.models_dir / "c" / "ok.bin").read_bytes() == data
    assert budget._reserved_bytes == {}


@pytest.mark.parametrize("key", ["models/c/bad.bin", "models/c/bad-range.bin"])
async def test_broken_chunked_framing_gets_400_naming_it_and_keeps_no_file(tmp_path: Path, key: str) -> None:
    ranged = "Content-Range: bytes 0-9/10\r\n" if key.endswith("range.bin") else ""
    async with running_file_server(tmp_path / "models") as server:
        sock = _connect(server.port)
        sock.sendall(
            (
                f"PUT /v1/files/{key} HTTP/1.1\r\nHost: w\r\nAuthorization: Bearer {TOKEN}\r\n{ranged}"
                "Transfer-Encoding: chunked\r\n\r\nzz\r\n0123456789\r\n"
            ).encode()
        )
        answer = await _read_all(sock)
        sock.close()
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert b"malformed chunked body (invalid chunk size b'zz')" in answer
    stored = server.models_dir / key.removeprefix("models/")
    if ranged:  # a resumable range keeps what came well framed (nothing here), as after a cut: never complete
        assert stored.stat().st_size == 0 and hashing.read_trusted_hash(stored) is None
    else:
        assert not stored.exists()


async def test_an_empty_file_is_served_as_an_empty_body(tmp_path: Path, client: httpx.AsyncClient) -> None:
    async with running_file_server(tmp_path / "models") as server:
        put = await client.put(
            f"{server.url}/v1/files/models/c/empty.bin",
            content=b"",
            headers={**AUTH, "X-Content-SHA256": _sha256(b"")},
        )
        got = await client.get(f"{server.url}/v1/files/models/c/empty.bin", headers=AUTH)
        again = await client.get(f"{server.url}/healthz")  # the same server still answers
    assert put.status_code == 200, put.text
    assert got.status_code == 200 and got.content == b"" and got.headers["content-length"] == "0"
    assert again.status_code == 200


# --- keys ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_key, status, message",
    [
        (
            "models/a/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
            400,
            "invalid storage key 'models/a/../../../etc/passwd': key has a '..' path segment",
        ),
        (
            "%2Fetc%2Fpasswd",
            400,
            "invalid storage key '/etc/passwd': key is an absolute path; keys are relative to the worker's dirs",
        ),
        ("models/a%00b", 400, "invalid storage key 'models/a\\x00b': key contains a NUL byte"),
        (
            "models/a%0D%0AX-Evil:%201",
            400,
            "invalid storage key 'models/a\\r\\nX-Evil: 1': key contains a control character",
        ),
        (
            "models/" + "n" * 256,
            400,
            f"invalid storage key 'models/{'n' * 256}': a path segment is 256 bytes long; "
            "the limit is 255 (the filesystem's longest name)",
        ),
        (
            "models/" + "a/" * 600 + "b",
            400,
            f"invalid storage key '{('models/' + 'a/' * 600)[:64]}...': key is 1208 "
            "characters long; the limit is 1024",
        ),
    ],
)  # traversal, absolute, NUL, header injection, NAME_MAX, path length
async def test_malformed_keys_are_refused_with_4xx_naming_the_rule(
    tmp_path: Path, client: httpx.AsyncClient, raw_key: str, status: int, message: str
) -> None:
    async with running_file_server(tmp_path / "models") as server:
        answers = [
            await client.request(
                method,
                f"{server.url}/v1/files/{raw_key}",
                headers=AUTH,
                content=b"x" if method == "PUT" else None,
            )
            for method in ("PUT", "GET")
        ]
    for answer in answers:
        assert (answer.status_code, answer.json()) == (status, {"error": message})
    assert not (tmp_path / "etc").exists()


async def test_a_path_that_is_not_utf8_gets_a_4xx_quoting_it_escaped(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    async with running_file_server(tmp_path / "models") as server:
        answer = await client.get(f"{server.url}/v1/nothing-%90", headers=AUTH)
    assert (answer.status_code, answer.json()) == (404, {"error": "no route for GET /v1/nothing-\udc90"})


async def test_an_unknown_method_gets_405_naming_the_allowed_ones(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    async with running_file_server(tmp_path / "models") as server:
        answer = await client.request("DELETE", f"{server.url}/v1/files/models/m/x", headers=AUTH)
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "GET, HEAD, PUT, POST"
    assert answer.json() == {"error": "method 'DELETE' is not allowed; use GET, HEAD, PUT or POST"}
