"""Ephemeral request inputs on the real threaded file server, driven by httpx and the frontend's RequestInputs."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from corral.staging.ephemeral_ledger import EphemeralLedger, EphemeralLimits, ephemeral_root
from corral.staging.errors import InputStorageFull, RequestInputFailed
from corral.staging.request_inputs import RequestInputs
from support.file_servers import AUTH, TOKEN, WorkerFiles, running_file_server
from support.waiting import wait_for_async

KiB = 1 << 10
KEY = "ephemeral/audio/abcd1234/clip.wav"


def _ledger(
    models_dir: Path,
    byte_limit: int = 100 * KiB,
    min_free: int = 1,
    free: int | None = None,
) -> EphemeralLedger:
    root = ephemeral_root(models_dir)
    if free is None:
        return EphemeralLedger(root, EphemeralLimits(byte_limit, min_free))
    return EphemeralLedger(root, EphemeralLimits(byte_limit, min_free), free_bytes=lambda _path: free)


def _put_headers(data: bytes) -> dict[str, str]:
    return {**AUTH, "X-Content-SHA256": hashlib.sha256(data).hexdigest()}


def _async(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return predicate()

    return check


def _files_below(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*"))


async def _put(server: WorkerFiles, key: str, data: bytes) -> httpx.Response:
    """PUT ``key`` as it is: percent-encoded whole, so no client normalises '..' or '//' away before the worker."""
    async with httpx.AsyncClient() as http:
        return await http.put(
            f"{server.url}/v1/files/{quote(key, safe='')}", content=data, headers=_put_headers(data)
        )


async def _release(server: WorkerFiles, keys: list[str]) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(f"{server.url}/v1/files/release", json={"keys": keys}, headers=AUTH)


async def test_an_input_past_the_byte_limit_is_refused_before_any_byte_is_written(tmp_path: Path) -> None:
    models = tmp_path / "models"
    async with running_file_server(models, ephemeral=_ledger(models, byte_limit=100 * KiB)) as server:
        assert (await _put(server, KEY, os.urandom(60 * KiB))).status_code == 200
        received = server.body_bytes

        refused = await _put(server, "ephemeral/audio/ffff0000/big.wav", os.urandom(60 * KiB))

        assert refused.status_code == 507
        assert refused.headers["Retry-After"] == "5"
        assert refused.json() == {
            "setting": "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT",
            "error": "request input 'ephemeral/audio/ffff0000/big.wav' (61440 bytes) refused before it was written: "
            "the worker's ephemeral request inputs would reach 122880 bytes (61440 held by 1 request(s) not "
            "yet released), over LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT=102400 (102.4 kB); retry when requests "
            "finish, raise LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT on the worker, or add workers",
        }
        assert server.body_bytes == received  # not one byte of the refused body was read
        assert not (ephemeral_root(models) / "audio" / "ffff0000").exists()  # nor a directory made for it


async def test_an_input_that_would_eat_the_free_space_headroom_is_refused_before_any_byte_is_written(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    ledger = _ledger(models, byte_limit=1 << 30, min_free=1 << 20, free=(1 << 20) + 10 * KiB)
    async with running_file_server(models, ephemeral=ledger) as server:
        refused = await _put(server, KEY, os.urandom(20 * KiB))
        assert refused.status_code == 507
        assert refused.json()["setting"] == "LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES"
        assert "below LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES=1048576 (1.0 MB)" in refused.json()["error"]
        assert server.body_bytes == 0 and not ephemeral_root(models).exists()


async def test_an_input_of_unknown_size_is_refused_with_411(tmp_path: Path) -> None:
    models = tmp_path / "models"

    async def chunks() -> AsyncIterator[bytes]:
        yield b"x" * 100

    async with running_file_server(models, ephemeral=_ledger(models)) as server, httpx.AsyncClient() as http:
        answer = await http.put(f"{server.url}/v1/files/{KEY}", content=chunks(), headers=AUTH)
    assert answer.status_code == 411
    assert "an ephemeral input must declare its size" in answer.json()["error"]


async def test_release_deletes_the_exact_keys_and_frees_their_reservation(tmp_path: Path) -> None:
    models = tmp_path / "models"
    ledger = _ledger(models, byte_limit=100 * KiB)
    other = "ephemeral/image/abcd1234/cat.png"
    async with running_file_server(models, ephemeral=ledger) as server:
        for key in (KEY, other):
            assert (await _put(server, key, os.urandom(40 * KiB))).status_code == 200
        assert (
            await _put(server, "ephemeral/image/ffff0000/dog.png", os.urandom(40 * KiB))
        ).status_code == 507

        answer = await _release(server, [KEY, other, "ephemeral/audio/abcd1234/never-staged.wav"])

        assert answer.status_code == 200
        assert answer.json() == {
            "released": [KEY, other],
            "missing": ["ephemeral/audio/abcd1234/never-staged.wav"],
            "freed_bytes": 80 * KiB,
        }
        assert ledger.held_bytes() == 0 and ledger.active_request_dirs() == set()
        assert _files_below(ephemeral_root(models)) == [
            "audio",
            "image",
        ]  # sidecars and request dirs gone too
        assert (await _release(server, [KEY, other])).json()["missing"] == [KEY, other]  # idempotent
        assert (
            await _put(server, "ephemeral/image/ffff0000/dog.png", os.urandom(40 * KiB))
        ).status_code == 200


@pytest.mark.parametrize(
    "keys, message",
    [
        (["models/llama/model.gguf"], "key 'models/llama/model.gguf' is not an ephemeral request input"),
        (["data/x.json"], "key 'data/x.json' is not an ephemeral request input"),
        (["ephemeral/../models/llama/model.gguf"], "key has a '..' path segment"),
        (["ephemeral/audio/abcd1234"], "an ephemeral key must be 'ephemeral/<category>/<request id>/<name>'"),
    ],
)
async def test_release_refuses_anything_but_ephemeral_input_keys_and_releases_nothing(
    tmp_path: Path, keys: list[str], message: str
) -> None:
    models = tmp_path / "models"
    (models / "llama").mkdir(parents=True)
    (models / "llama" / "model.gguf").write_bytes(b"weights")
    async with running_file_server(models, ephemeral=_ledger(models)) as server:
        assert (await _put(server, KEY, b"clip")).status_code == 200
        answer = await _release(server, [KEY, *keys])
    assert answer.status_code == 400 and message in answer.json()["error"]
    assert (models / "llama" / "model.gguf").read_bytes() == b"weights"
    assert (ephemeral_root(models) / "audio" / "abcd1234" / "clip.wav").exists()


@pytest.mark.parametrize(
    "key, status",
    [
        ("ephemeral/../models/llama/evil.gguf", 400),  # '..' segment
        ("ephemeral/audio/abcd1234/../../../models/llama/evil.gguf", 400),
        (
            "ephemeral/audio/linked00/evil.gguf",
            400,
        ),  # its request directory is a symlink into the models tree
        ("ephemeral/escape/abcd1234/evil.gguf", 400),  # its category directory is a symlink out of the root
    ],
)
async def test_an_input_never_lands_in_the_models_tree(tmp_path: Path, key: str, status: int) -> None:
    models = tmp_path / "models"
    (models / "llama").mkdir(parents=True)
    root = ephemeral_root(models)
    (root / "audio").mkdir(parents=True)
    (root / "audio" / "linked00").symlink_to(models / "llama")
    (tmp_path / "staging" / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "staging" / "outside")
    async with running_file_server(models, ephemeral=_ledger(models)) as server:
        answer = await _put(server, key, b"not a model")
        absolute = await _put(server, f"{models}/llama/evil.gguf", b"not a model")
    assert answer.status_code == status, answer.text
    assert absolute.status_code == 400 and "key is an absolute path" in absolute.json()["error"]
    assert _files_below(models) == ["llama"]
    assert _files_below(tmp_path / "staging" / "outside") == []


async def test_request_inputs_stage_a_file_and_release_it_when_the_block_ends(tmp_path: Path) -> None:
    models = tmp_path / "models"
    ledger = _ledger(models)
    async with running_file_server(models, ephemeral=ledger) as server, httpx.AsyncClient() as http:
        async with RequestInputs(http, f"127.0.0.1:{server.port}", TOKEN) as inputs:
            path = await inputs.stage("audio", "My Clip.wav", b"RIFF....WAVE")
            second = await inputs.stage("audio", "My Clip.wav", b"RIFF....WAV2")
            assert path == str(ephemeral_root(models) / "audio" / inputs.request_id / "My_Clip.wav")
            assert second.endswith("/My_Clip-2.wav")
            assert Path(path).read_bytes() == b"RIFF....WAVE"
            assert ledger.active_request_dirs() == {f"audio/{inputs.request_id}"}
        assert not Path(path).exists() and not Path(path).parent.exists()
        assert ledger.held_bytes() == 0


async def test_request_inputs_release_when_the_request_fails(tmp_path: Path) -> None:
    models = tmp_path / "models"
    ledger = _ledger(models)
    async with running_file_server(models, ephemeral=ledger) as server, httpx.AsyncClient() as http:
        with pytest.raises(RuntimeError, match="inference failed"):
            async with RequestInputs(http, f"127.0.0.1:{server.port}", TOKEN) as inputs:
                path = await inputs.stage("image", "cat.png", b"\x89PNG")
                raise RuntimeError("inference failed")
        assert not Path(path).exists() and ledger.held_bytes() == 0


async def test_request_inputs_release_when_the_request_is_cancelled_mid_inference(tmp_path: Path) -> None:
    models = tmp_path / "models"
    ledger = _ledger(models)
    staged: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def handle_request(http: httpx.AsyncClient, port: int) -> None:
        async with RequestInputs(http, f"127.0.0.1:{port}", TOKEN) as inputs:
            staged.set_result(await inputs.stage("audio", "clip.wav", os.urandom(10 * KiB)))
            await asyncio.Event().wait()  # "inference" until the client disconnects

    async with running_file_server(models, ephemeral=ledger) as server, httpx.AsyncClient() as http:
        request = asyncio.create_task(handle_request(http, server.port))
        path = Path(await staged)
        assert path.exists()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        assert not path.exists() and ledger.held_bytes() == 0


async def test_request_inputs_release_an_upload_cancelled_while_it_was_sent(tmp_path: Path) -> None:
    models = tmp_path / "models"
    ledger = _ledger(models, byte_limit=1 << 30)
    async with running_file_server(models, ephemeral=ledger) as server, httpx.AsyncClient() as http:
        inputs = RequestInputs(http, f"127.0.0.1:{server.port}", TOKEN)

        async def handle_request() -> None:
            async with inputs:
                await inputs.stage("video", "clip.mp4", os.urandom(64 << 20))

        request = asyncio.create_task(handle_request())
        await wait_for_async(_async(lambda: server.body_bytes > 0), "the upload to start", timeout_s=30)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        assert inputs.released
        await wait_for_async(
            _async(lambda: ledger.held_bytes() == 0),
            "the cut upload's reservation to be dropped",
            timeout_s=30,
        )
        assert _files_below(ephemeral_root(models) / "video") == []


async def test_request_inputs_turn_a_full_worker_into_input_storage_full(tmp_path: Path) -> None:
    models = tmp_path / "models"
    async with (
        running_file_server(models, ephemeral=_ledger(models, byte_limit=KiB)) as server,
        httpx.AsyncClient() as http,
    ):
        with pytest.raises(InputStorageFull) as refused:
            async with RequestInputs(http, f"127.0.0.1:{server.port}", TOKEN) as inputs:
                await inputs.stage("audio", "clip.wav", os.urandom(2 * KiB))
    assert refused.value.setting == "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT"
    assert (refused.value.client_status, refused.value.retry_after_s) == (503, 5)
    assert "over LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT=1024" in refused.value.message


async def test_request_inputs_name_a_wrong_token(tmp_path: Path) -> None:
    models = tmp_path / "models"
    async with running_file_server(models, ephemeral=_ledger(models)) as server, httpx.AsyncClient() as http:
        with pytest.raises(RequestInputFailed, match=r"\(HTTP 401\): wrong bearer token"):
            async with RequestInputs(http, f"127.0.0.1:{server.port}", "not-the-token") as inputs:
                await inputs.stage("audio", "clip.wav", b"x")
