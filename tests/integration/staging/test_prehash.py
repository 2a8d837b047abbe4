"""The frontend's pre-hashing of configured model files (real files, real threads): what it records, what
it skips, and that a staging asking for a file being hashed joins that computation."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from corral.models.config import ModelConfig, parse_model_config
from corral.staging import hashing, local_hash
from corral.staging.hashing import ProgressCallback, hash_sidecar_path, read_trusted_hash
from corral.staging.local_hash import local_sha256
from corral.staging.prehash import ModelPrehasher

MiB = 1 << 20


def _config(models_dir: Path, name: str, files: dict[str, int]) -> ModelConfig:
    for relative, size in files.items():
        (models_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (models_dir / relative).write_bytes(os.urandom(size))
    first = next(iter(files))
    return parse_model_config(
        {"name": name, "backend": "llama-cpp", "parameters": {"model": first}},
        models_dir / f"{name}.yaml",
        models_dir,
    )


async def _run_until_recorded(prehasher: ModelPrehasher, paths: list[Path], timeout_s: float = 30.0) -> None:
    stop = asyncio.Event()
    runner = asyncio.create_task(prehasher.run(stop))
    try:
        async with asyncio.timeout(timeout_s):
            while not all(await asyncio.to_thread(lambda: [read_trusted_hash(p) for p in paths])):
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await runner


async def test_configured_files_without_a_recorded_hash_are_hashed_and_recorded(tmp_path: Path) -> None:
    models = tmp_path / "models"
    a = _config(models, "a", {"a/model.gguf": 3 * MiB})
    b = _config(models, "b", {"b.gguf": MiB})
    prehasher = ModelPrehasher()
    prehasher.submit([a, b])
    paths = [models / "a" / "model.gguf", models / "b.gguf"]
    await _run_until_recorded(prehasher, paths)
    for path in paths:
        assert read_trusted_hash(path) == hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_config_edited_later_has_its_new_file_hashed_and_a_missing_file_is_left_to_its_load(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    prehasher = ModelPrehasher()
    stop = asyncio.Event()
    runner = asyncio.create_task(prehasher.run(stop))
    try:
        missing = parse_model_config(
            {"name": "gone", "backend": "llama-cpp", "parameters": {"model": "no.gguf"}},
            models / "gone.yaml",
            models,
        )
        prehasher.submit([missing])  # nothing to hash, nothing raised: the load names the missing file
        prehasher.submit([_config(models, "late", {"late.gguf": MiB})])
        async with asyncio.timeout(30):
            while read_trusted_hash(models / "late.gguf") is None:
                await asyncio.sleep(0.02)
        assert not runner.done()
    finally:
        stop.set()
        await runner


async def test_a_file_with_a_recorded_hash_is_not_read_again(tmp_path: Path) -> None:
    models = tmp_path / "models"
    cfg = _config(models, "a", {"a.gguf": MiB})
    path = models / "a.gguf"
    hash_sidecar_path(path).write_text("0" * 64)  # bare hex: never trusted, so it is hashed and rewritten
    prehasher = ModelPrehasher()
    prehasher.submit([cfg])
    await _run_until_recorded(prehasher, [path])
    recorded = hash_sidecar_path(path).read_text()
    assert recorded.startswith(hashlib.sha256(path.read_bytes()).hexdigest())
    stamp = hash_sidecar_path(path).stat().st_mtime_ns
    again = ModelPrehasher()
    again.submit([cfg])
    await _run_until_recorded(again, [path])
    assert hash_sidecar_path(path).stat().st_mtime_ns == stamp  # trusted: not hashed, not rewritten


async def test_a_staging_asking_while_the_file_is_hashed_joins_that_computation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(8 * MiB))
    calls: list[Path] = []
    real = hashing.cached_sha256  # what local_hash calls until the patch below

    def counting(file: Path, report: ProgressCallback | None = None, record: bool = True) -> str:
        calls.append(file)
        return real(file, report, record)

    monkeypatch.setattr(local_hash, "cached_sha256", counting)
    first = local_sha256(path)
    second = local_sha256(tmp_path / "." / "big.bin")  # the same file by another spelling
    assert first is second
    assert await second == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(calls) == 1
    third = local_sha256(path)  # done: a new ask starts anew (and finds the recorded hash)
    assert third is not first and await third == await first


async def test_stopping_the_frontend_stops_a_pre_hash_mid_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that takes long to hash does not hold the frontend's exit: the thread gives up at its next chunk."""
    models = tmp_path / "models"
    cfg = _config(models, "big", {"big.gguf": 64 * MiB})
    path = models / "big.gguf"
    prehasher = ModelPrehasher()
    started = threading.Event()  # set from the hashing thread
    real_check = prehasher._check_stop

    def slow_check(done: int, total: int) -> None:  # ~1 s per MiB: minutes for the file, unless stopped
        started.set()
        time.sleep(0.02)
        real_check(done, total)

    monkeypatch.setattr(prehasher, "_check_stop", slow_check)
    prehasher.submit([cfg])
    stop = asyncio.Event()
    runner = asyncio.create_task(prehasher.run(stop))
    async with asyncio.timeout(30):
        while not started.is_set():
            await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(runner, 5)  # returns at once; the thread stops at its next chunk
    await asyncio.sleep(0.2)
    assert read_trusted_hash(path) is None and not hash_sidecar_path(path).exists()
    assert not [t for t in threading.enumerate() if t.name.startswith("prehash") and t.is_alive()]


async def test_files_outside_the_models_dir_are_never_hashed_nor_given_a_sidecar(tmp_path: Path) -> None:
    """A listed root (CORRAL_MODEL_PATH_ROOTS) is read, never written; a link that points out is not even read."""
    models, shared = tmp_path / "models", tmp_path / "shared"
    shared.mkdir()
    (shared / "big.gguf").write_bytes(os.urandom(MiB))
    (tmp_path / "secret").write_bytes(os.urandom(MiB))
    in_root = parse_model_config(
        {"name": "s", "backend": "llama-cpp", "parameters": {"model": str(shared / "big.gguf")}},
        models / "s.yaml",
        models,
        (shared,),
    )
    linked = _config(models, "l", {"l.gguf": MiB})
    (models / "l.gguf").unlink()
    (models / "l.gguf").symlink_to(tmp_path / "secret")  # points out since the config was accepted
    marker = _config(models, "m", {"m.gguf": MiB})
    prehasher = ModelPrehasher()
    prehasher.submit(
        [in_root, linked, marker]
    )  # in order: once m.gguf is recorded, the others were looked at
    await _run_until_recorded(prehasher, [models / "m.gguf"])
    assert not hash_sidecar_path(shared / "big.gguf").exists()
    assert not hash_sidecar_path(tmp_path / "secret").exists()
    assert not hash_sidecar_path(models / "l.gguf").exists()
