"""stage_model over HTTP against the real worker file server: what is staged, how options are rewritten,
what progress the load job sees, and that a model the worker already holds moves 0 bytes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from corral.loading.replay import config_from_replay
from corral.models.config import ModelConfig, parse_model_config
from corral.models.roots import PathOutsideRoots
from corral.proto import backend_pb2
from corral.staging.hashing import hash_sidecar_path, read_trusted_hash
from corral.staging.stager import StagingContext, StagingTarget, stage_model
from corral.store.load_infos import LoadInfo
from support.file_servers import TOKEN, running_file_server

MiB = 1 << 20


class Recorder:
    """A StagingProgress that keeps every call."""

    def __init__(self) -> None:
        self.files: list[tuple[int, int, int]] = []
        self.bytes: list[tuple[int, int]] = []
        self.hashes: list[tuple[int, int]] = []

    def on_file(self, index: int, total_files: int, total_bytes: int) -> None:
        self.files.append((index, total_files, total_bytes))

    def on_bytes(self, bytes_sent: int, total_bytes: int) -> None:
        self.bytes.append((bytes_sent, total_bytes))

    def on_hash(self, done_bytes: int, total_bytes: int) -> None:
        self.hashes.append((done_bytes, total_bytes))


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        yield client


def _write(path: Path, size_bytes: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size_bytes))
    return path


def _model(models_dir: Path, outside: Path) -> ModelConfig:
    """A model with a main file, mmproj, a LoRA directory, a piper voice + companion and option files."""
    _write(models_dir / "llm" / "main.gguf", 3 * MiB)
    _write(models_dir / "llm" / "mmproj.gguf", 1000)
    _write(models_dir / "loras" / "style" / "adapter.bin", 2000)
    _write(models_dir / "loras" / "style" / "adapter.bin.sha256", 64)  # a stale hash sidecar: never staged
    _write(models_dir / "voices" / "en.onnx", 500)
    _write(models_dir / "voices" / "en.onnx.json", 50)
    _write(models_dir / "llm" / "vocab.json", 70)  # option relative to the model's own dir
    _write(
        outside / "extra" / "table.bin", 30
    )  # option: an absolute path in a listed root, outside the models dir
    _write(models_dir / "unrelated.bin", 10)  # not referenced: must not be staged
    data = {
        "name": "vision",
        "backend": "llama-cpp",
        "parameters": {"model": "llm/main.gguf"},
        "mmproj": "llm/mmproj.gguf",
        "lora_adapters": ["loras/style", "hub-org/remote-lora"],  # the second does not exist locally
        "audio_path": "voices/en.onnx",
        "options": ["vocab:vocab.json", f"table:{outside / 'extra'}", "chat_format:gemma", "root:."],
    }
    return parse_model_config(
        yaml.safe_load(yaml.safe_dump(data)), models_dir / "vision.yaml", models_dir, (outside,)
    )  # CORRAL_MODEL_PATH_ROOTS


def _options(cfg: ModelConfig) -> backend_pb2.ModelOptions:
    return backend_pb2.ModelOptions(
        Model=cfg.model,
        ModelFile=str(cfg.model_file),
        ModelPath=str(cfg.models_dir),
        Options=list(cfg.options),
    )


async def test_stage_model_stages_every_needed_file_and_rewrites_paths_for_the_worker(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    models_dir, outside = tmp_path / "frontend" / "models", tmp_path / "elsewhere"
    cfg = _model(models_dir, outside)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        ctx = StagingContext(http=http, token=TOKEN)
        staged = await stage_model(
            ctx, StagingTarget("w1", f"127.0.0.1:{worker.port}"), cfg, _options(cfg), Recorder()
        )
    base = worker.models_dir / "vision"
    staged_files = sorted(
        p.relative_to(base).as_posix()
        for p in base.rglob("*")
        if p.is_file() and not p.name.endswith(".sha256")
    )
    assert staged_files == sorted(
        [
            "llm/main.gguf",
            "llm/mmproj.gguf",
            "llm/vocab.json",
            "loras/style/adapter.bin",
            "voices/en.onnx",
            "voices/en.onnx.json",
            "extra/table.bin",
        ]
    )
    assert (
        read_trusted_hash(base / "loras" / "style" / "adapter.bin")
        == hashlib.sha256((models_dir / "loras" / "style" / "adapter.bin").read_bytes()).hexdigest()
    )  # the worker's own
    for relative in ("llm/main.gguf", "loras/style/adapter.bin", "extra/table.bin"):
        source = models_dir / relative if not relative.startswith("extra") else outside / relative
        assert (base / relative).read_bytes() == source.read_bytes()
    assert staged.ModelFile == str(base / "llm" / "main.gguf")
    assert staged.ModelPath == str(base)
    assert staged.MMProj == str(base / "llm" / "mmproj.gguf")
    assert staged.AudioPath == str(base / "voices" / "en.onnx")
    assert list(staged.LoraAdapters) == [str(base / "loras" / "style"), "hub-org/remote-lora"]
    assert list(staged.Options) == [
        f"vocab:{base / 'llm' / 'vocab.json'}",  # relative to the model's dir: made absolute on the worker
        f"table:{base / 'extra'}",  # absolute frontend path: rewritten
        "chat_format:gemma",
        "root:.",  # not files (or the whole models dir): untouched
    ]
    assert staged.Model == "llm/main.gguf"


async def test_progress_reports_each_file_bytes_up_to_its_size_and_hashing(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    models_dir = tmp_path / "frontend" / "models"
    _write(models_dir / "a.gguf", 40 * MiB)
    _write(models_dir / "a.gguf.json", 10)
    cfg = parse_model_config(
        {
            "name": "a",
            "backend": "llama-cpp",
            "parameters": {"model": "a.gguf"},
            "options": ["cfg:a.gguf.json"],
        },
        models_dir / "a.yaml",
        models_dir,
    )
    progress = Recorder()
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        await stage_model(
            StagingContext(http=http, token=TOKEN),
            StagingTarget("w1", f"127.0.0.1:{worker.port}"),
            cfg,
            _options(cfg),
            progress,
        )
    assert progress.files == [(1, 2, 40 * MiB), (2, 2, 10)]
    first_file = [b for b in progress.bytes if b[1] == 40 * MiB]
    assert first_file[0] == (0, 40 * MiB) and first_file[-1] == (40 * MiB, 40 * MiB)
    assert len(first_file) >= 3  # reported while sending, not just at the end
    assert (40 * MiB, 40 * MiB) in progress.hashes  # the local verify hash counts as progress
    assert len([h for h in progress.hashes if h[1] == 40 * MiB]) >= 2


async def test_second_load_of_the_same_model_on_the_same_worker_transfers_zero_bytes(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    models_dir, outside = tmp_path / "frontend" / "models", tmp_path / "elsewhere"
    cfg = _model(models_dir, outside)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        target = StagingTarget("w1", f"127.0.0.1:{worker.port}")
        ctx = StagingContext(http=http, token=TOKEN)
        first = await stage_model(ctx, target, cfg, _options(cfg), Recorder())
        after_first = worker.body_bytes
        puts_first = worker.server.stats.requests["PUT"]
        second = await stage_model(ctx, target, cfg, _options(cfg), Recorder())
        after_second = worker.body_bytes
        puts_second = worker.server.stats.requests["PUT"]
    assert after_first == sum(p.stat().st_size for p in cfg.files())
    assert after_second - after_first == 0
    assert puts_second == puts_first
    assert second == first


async def test_shared_models_mode_stages_nothing_and_passes_absolute_paths(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    models_dir, outside = tmp_path / "frontend" / "models", tmp_path / "elsewhere"
    cfg = _model(models_dir, outside)
    ctx = StagingContext(http=http, token=TOKEN, shared_models=True)
    # Port 9 (discard) is never contacted: any staging attempt would fail loudly.
    staged = await stage_model(ctx, StagingTarget("w1", "127.0.0.1:9"), cfg, _options(cfg), Recorder())
    assert staged.ModelFile == str(models_dir / "llm" / "main.gguf")
    assert staged.ModelPath == str(models_dir)
    assert staged.MMProj == str(models_dir / "llm" / "mmproj.gguf")
    assert list(staged.LoraAdapters) == [str(models_dir / "loras" / "style"), "hub-org/remote-lora"]
    assert list(staged.Options) == list(cfg.options)


async def test_model_without_local_files_is_passed_through_unchanged(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    cfg = parse_model_config(
        {"name": "sim", "backend": "simulator", "parameters": {"model": "sim"}},
        tmp_path / "sim.yaml",
        tmp_path,
    )
    opts = backend_pb2.ModelOptions(Model="sim", ModelPath=str(tmp_path))
    staged = await stage_model(
        StagingContext(http=http, token=TOKEN), StagingTarget("w1", "127.0.0.1:9"), cfg, opts, Recorder()
    )
    assert staged == opts


def test_checkpoint_bytes_count_every_staged_file(tmp_path: Path) -> None:
    cfg = _model(tmp_path / "models", tmp_path / "elsewhere")
    sizes = {p.name: p.stat().st_size for p in cfg.files()}
    assert sizes == {
        "main.gguf": 3 * MiB,
        "mmproj.gguf": 1000,
        "adapter.bin": 2000,
        "en.onnx": 500,
        "en.onnx.json": 50,
        "vocab.json": 70,
        "table.bin": 30,
    }
    assert cfg.checkpoint_bytes() == sum(sizes.values())


async def test_a_file_of_a_listed_root_is_staged_without_a_sidecar_beside_it(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    models_dir, outside = tmp_path / "frontend" / "models", tmp_path / "elsewhere"
    cfg = _model(models_dir, outside)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        await stage_model(
            StagingContext(http=http, token=TOKEN),
            StagingTarget("w1", f"127.0.0.1:{worker.port}"),
            cfg,
            _options(cfg),
            Recorder(),
        )
    assert not hash_sidecar_path(
        outside / "extra" / "table.bin"
    ).exists()  # corral writes only in its models dir
    assert read_trusted_hash(models_dir / "llm" / "main.gguf") is not None  # there it keeps the hash


@pytest.mark.parametrize(
    "model, link, shared_models",
    [
        ("m.gguf", "m.gguf", False),  # the model file, swapped for a link that points out
        ("m.gguf", "m.gguf", True),  # shared models: nothing is copied, but the path is not passed on either
        ("weights", "weights/shard-2.bin", False),  # a link planted inside a model directory
    ],
)
async def test_a_file_that_points_out_after_the_config_was_accepted_is_never_staged(
    tmp_path: Path, http: httpx.AsyncClient, model: str, link: str, shared_models: bool
) -> None:
    models_dir, secret = tmp_path / "frontend" / "models", _write(tmp_path / "secret", 100)
    _write(models_dir / link, 100)
    cfg = parse_model_config(
        {"name": "m", "backend": "llama-cpp", "parameters": {"model": model}},
        models_dir / "m.yaml",
        models_dir,
    )
    (models_dir / link).unlink()
    (models_dir / link).symlink_to(secret)
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        ctx = StagingContext(http=http, token=TOKEN, shared_models=shared_models)
        with pytest.raises(
            PathOutsideRoots,
            match=f"staged file: '{models_dir / link}' resolves to {secret}, "
            f"outside the models directory {models_dir}; keep model files "
            "under it, or list the directory in CORRAL_MODEL_PATH_ROOTS",
        ):
            await stage_model(
                ctx, StagingTarget("w1", f"127.0.0.1:{worker.port}"), cfg, _options(cfg), Recorder()
            )
        assert worker.server.stats.requests["PUT"] == 0
    assert [p for p in (tmp_path / "worker").rglob("*") if p.is_file()] == []
    assert not hash_sidecar_path(secret).exists()


async def test_a_replayed_load_naming_a_file_outside_is_never_staged(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """Replay info recorded before the roots existed (ModelFile=/etc/passwd) must not stage it now."""
    models_dir, secret = tmp_path / "frontend" / "models", _write(tmp_path / "secret", 100)
    models_dir.mkdir(parents=True)
    opts = backend_pb2.ModelOptions(Model="../secret", ModelFile=str(secret), ModelPath=str(models_dir))
    cfg = config_from_replay(LoadInfo("m", "llama-cpp", opts.SerializeToString(), "rev"))
    async with running_file_server(tmp_path / "worker" / "models") as worker:
        with pytest.raises(PathOutsideRoots, match=f"resolves to {secret}, outside the models directory"):
            await stage_model(
                StagingContext(http=http, token=TOKEN),
                StagingTarget("w1", f"127.0.0.1:{worker.port}"),
                cfg,
                _options(cfg),
                Recorder(),
            )
        assert worker.server.stats.requests["PUT"] == 0
    assert not hash_sidecar_path(secret).exists()
