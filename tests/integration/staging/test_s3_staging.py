"""S3 mode against a real S3-compatible server (moto's, on loopback) and real NATS: the frontend uploads to
the bucket, the worker fetches on ``nodes.<id>.files.ensure``; a second load moves 0 bytes."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from corral.bus import client as bus
from corral.bus import subjects
from corral.models.config import ModelConfig, parse_model_config
from corral.proto import backend_pb2
from corral.staging.disk_space import DiskBudget
from corral.staging.ephemeral_ledger import EphemeralLedger, EphemeralLimits, ephemeral_root
from corral.staging.errors import ObjectStoreFailed
from corral.staging.messages import FileEnsureReply, FileEnsureRequest, FileListReply, FileListRequest
from corral.staging.s3 import ObjectStore, StorageConfig
from corral.staging.stager import StagingContext, StagingTarget, stage_model
from corral.worker.files import open_object_store, start_s3_file_handlers
from support.moto_s3 import ACCESS_KEY, SECRET_KEY, moto_server

MiB = 1 << 20


class CountingStore(ObjectStore):
    """The real client, counting the bytes it uploads."""

    uploaded_bytes = 0

    def upload(self, local_path, key, sha256, on_bytes=None):  # type: ignore[no-untyped-def]
        super().upload(local_path, key, sha256, on_bytes)
        self.uploaded_bytes += local_path.stat().st_size


class Recorder:
    def __init__(self) -> None:
        self.files: list[tuple[int, int, int]] = []
        self.bytes: list[tuple[int, int]] = []

    def on_file(self, index: int, total_files: int, total_bytes: int) -> None:
        self.files.append((index, total_files, total_bytes))

    def on_bytes(self, bytes_sent: int, total_bytes: int) -> None:
        self.bytes.append((bytes_sent, total_bytes))

    def on_hash(self, done_bytes: int, total_bytes: int) -> None:
        pass


@pytest.fixture(scope="module")
def s3_url(state_root: Path) -> Iterator[str]:
    with moto_server(state_root / "moto") as url:
        yield url


def _settings(url: str, bucket: str, min_free_bytes: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        storage_url=url,
        storage_bucket=bucket,
        storage_region="us-east-1",
        storage_access_key=ACCESS_KEY,
        storage_secret_key=SECRET_KEY,
        staging_min_free_bytes=min_free_bytes,
    )


@pytest.fixture
async def env(s3_url: str, nats_url: str, tmp_path: Path) -> AsyncIterator[SimpleNamespace]:
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    settings = _settings(s3_url, bucket)
    config = StorageConfig.from_settings(settings)
    assert config is not None
    store = CountingStore(config)
    store.ensure_bucket()
    front_nc = await bus.connect(nats_url, "test-frontend")
    worker_nc = await bus.connect(nats_url, "test-worker")
    node_id = f"node-{uuid.uuid4().hex[:8]}"
    models_dir = tmp_path / "worker" / "models"
    handlers = await start_s3_file_handlers(
        settings, worker_nc, node_id, models_dir, await open_object_store(settings)
    )
    assert handlers is not None  # S3 mode is configured
    async with httpx.AsyncClient() as http:
        ctx = StagingContext(http=http, token="t", object_store=store, nc=front_nc, stall_s=10.0)
        try:
            yield SimpleNamespace(
                ctx=ctx,
                store=store,
                handlers=handlers,
                node_id=node_id,
                models_dir=models_dir,
                target=StagingTarget("w1", "127.0.0.1:9", node_id),
                worker_nc=worker_nc,
                front_nc=front_nc,
                settings=settings,
            )
        finally:
            handlers.close()
            store.close()
            await front_nc.drain()
            await worker_nc.drain()


def _model(models_dir: Path, size_bytes: int = 70 * MiB) -> ModelConfig:
    (models_dir / "weights").mkdir(parents=True)
    (models_dir / "weights" / "big.gguf").write_bytes(os.urandom(size_bytes))  # 70 MiB: a multipart upload
    (models_dir / "weights" / "tok.json").write_bytes(b'{"a": 1}')
    return parse_model_config(
        {
            "name": "s3m",
            "backend": "llama-cpp",
            "parameters": {"model": "weights/big.gguf"},
            "tokenizer": "weights/tok.json",
        },
        models_dir / "s3m.yaml",
        models_dir,
    )


def _opts(cfg: ModelConfig) -> backend_pb2.ModelOptions:
    return backend_pb2.ModelOptions(
        Model=cfg.model, ModelFile=str(cfg.model_file), ModelPath=str(cfg.models_dir)
    )


@pytest.mark.slow
async def test_s3_mode_uploads_once_and_the_worker_fetches_once(env: SimpleNamespace, tmp_path: Path) -> None:
    cfg = _model(tmp_path / "frontend" / "models")
    progress = Recorder()
    staged = await stage_model(env.ctx, env.target, cfg, _opts(cfg), progress)
    base = env.models_dir / "s3m"
    assert staged.ModelFile == str(base / "weights" / "big.gguf")
    assert staged.Tokenizer == str(base / "weights" / "tok.json")
    assert staged.ModelPath == str(base)
    assert (base / "weights" / "big.gguf").read_bytes() == (
        cfg.models_dir / "weights" / "big.gguf"
    ).read_bytes()
    total = cfg.checkpoint_bytes()
    assert env.store.uploaded_bytes == total
    assert env.handlers.fetched_bytes == total
    assert (1, 2, 70 * MiB) in progress.files and (70 * MiB, 70 * MiB) in progress.bytes

    again = await stage_model(env.ctx, env.target, cfg, _opts(cfg), Recorder())
    assert again == staged
    assert env.store.uploaded_bytes == total  # the bucket already had both objects
    assert env.handlers.fetched_bytes == total  # the worker's cache already had both files


async def test_worker_replaces_a_cached_copy_whose_content_changed(
    env: SimpleNamespace, tmp_path: Path
) -> None:
    models_dir = tmp_path / "frontend" / "models"
    models_dir.mkdir(parents=True)
    (models_dir / "m.gguf").write_bytes(b"version one")
    cfg = parse_model_config(
        {"name": "m", "backend": "llama-cpp", "parameters": {"model": "m.gguf"}},
        models_dir / "m.yaml",
        models_dir,
    )
    await stage_model(env.ctx, env.target, cfg, _opts(cfg), Recorder())
    (models_dir / "m.gguf").write_bytes(b"version two!")
    staged = await stage_model(env.ctx, env.target, cfg, _opts(cfg), Recorder())
    assert Path(staged.ModelFile).read_bytes() == b"version two!"


async def test_ensure_of_a_key_missing_from_the_bucket_names_key_and_bucket(env: SimpleNamespace) -> None:
    request = FileEnsureRequest(key="models/x/none.gguf")
    msg = await env.front_nc.request(
        subjects.node_subject(env.node_id, "files.ensure"), request.to_json(), timeout=10
    )
    reply = FileEnsureReply.from_json(msg.data)
    assert reply.error == f"key 'models/x/none.gguf' is not in bucket {env.store.bucket!r}"


async def test_ensure_of_a_traversal_key_is_refused(env: SimpleNamespace) -> None:
    request = FileEnsureRequest(key="models/../../etc/passwd")
    msg = await env.front_nc.request(
        subjects.node_subject(env.node_id, "files.ensure"), request.to_json(), timeout=10
    )
    assert "key has a '..' path segment" in (FileEnsureReply.from_json(msg.data).error or "")


async def test_ensure_refuses_a_download_the_worker_disk_cannot_hold(
    env: SimpleNamespace, tmp_path: Path, nats_url: str
) -> None:
    handlers = await start_s3_file_handlers(
        env.settings,
        env.worker_nc,
        "tiny-disk-node",
        tmp_path / "tiny",
        await open_object_store(env.settings),
    )
    assert handlers is not None  # S3 mode is configured
    handlers.budget = DiskBudget(min_free_bytes=0, free_bytes=lambda _path: 10)
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    env.store.upload(path, "models/t/f.bin", "0" * 64)
    try:
        msg = await env.front_nc.request(
            subjects.node_subject("tiny-disk-node", "files.ensure"),
            FileEnsureRequest(key="models/t/f.bin").to_json(),
            timeout=10,
        )
    finally:
        handlers.close()
    error = FileEnsureReply.from_json(msg.data).error or ""
    assert "not enough disk space for key 'models/t/f.bin': it needs 100 bytes" in error


async def test_ensure_of_a_request_input_reserves_it_and_refuses_one_past_the_byte_limit_before_fetching(
    env: SimpleNamespace, tmp_path: Path
) -> None:
    models = tmp_path / "s3-inputs" / "models"
    ledger = EphemeralLedger(ephemeral_root(models), EphemeralLimits(150, 1))
    handlers = await start_s3_file_handlers(
        env.settings, env.worker_nc, "s3-inputs-node", models, await open_object_store(env.settings), ledger
    )
    assert handlers is not None  # S3 mode is configured
    path = tmp_path / "clip.wav"
    path.write_bytes(b"x" * 100)
    for request_id in ("abcd1234", "ffff0000"):
        env.store.upload(
            path, f"ephemeral/audio/{request_id}/clip.wav", hashlib.sha256(b"x" * 100).hexdigest()
        )
    subject = subjects.node_subject("s3-inputs-node", "files.ensure")
    try:
        first = await env.front_nc.request(
            subject, FileEnsureRequest(key="ephemeral/audio/abcd1234/clip.wav").to_json(), timeout=10
        )
        second = await env.front_nc.request(
            subject, FileEnsureRequest(key="ephemeral/audio/ffff0000/clip.wav").to_json(), timeout=10
        )
    finally:
        handlers.close()
    assert FileEnsureReply.from_json(first.data).local_path == str(
        ephemeral_root(models) / "audio" / "abcd1234" / "clip.wav"
    )
    assert ledger.active_request_dirs() == {"audio/abcd1234"}  # held until the request releases it
    error = FileEnsureReply.from_json(second.data).error or ""
    assert (
        "request input 'ephemeral/audio/ffff0000/clip.wav' (100 bytes) refused before it was written" in error
    )
    assert "over LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT=150" in error
    assert not (ephemeral_root(models) / "audio" / "ffff0000").exists()


async def test_listdir_lists_the_workers_files_under_a_key_prefix(
    env: SimpleNamespace, tmp_path: Path
) -> None:
    cfg = _model(tmp_path / "frontend" / "models", MiB)
    await stage_model(env.ctx, env.target, cfg, _opts(cfg), Recorder())
    msg = await env.front_nc.request(
        subjects.node_subject(env.node_id, "files.listdir"),
        FileListRequest(key_prefix="models/s3m/weights").to_json(),
        timeout=10,
    )
    listed = FileListReply.from_json(msg.data).files or []
    assert [f for f in listed if not f.endswith(".sha256")] == ["big.gguf", "tok.json"]


async def test_staging_to_a_worker_that_is_not_in_s3_mode_fails_naming_the_setting(
    env: SimpleNamespace, tmp_path: Path
) -> None:
    models_dir = tmp_path / "frontend" / "models"
    models_dir.mkdir(parents=True)
    (models_dir / "m.gguf").write_bytes(b"data")
    cfg = parse_model_config(
        {"name": "m", "backend": "llama-cpp", "parameters": {"model": "m.gguf"}},
        models_dir / "m.yaml",
        models_dir,
    )
    with pytest.raises(ObjectStoreFailed) as raised:
        await stage_model(
            env.ctx, StagingTarget("w9", "127.0.0.1:9", "no-such-node"), cfg, _opts(cfg), Recorder()
        )
    assert "node w9" in str(raised.value) and "LOCALAI_STORAGE_URL" in str(raised.value)
