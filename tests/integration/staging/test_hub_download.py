"""Managed Hugging Face artifacts, frontend side, against a local server implementing the hub's file API."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.models.config import parse_model_config
from corral.models.huggingface import HuggingFaceSource, committed_snapshot
from corral.staging.errors import HubDownloadFailed
from corral.staging.hashing import read_trusted_hash
from corral.staging.hub_download import HubClient
from support.fake_hub import FakeHub

REPO = "acme/tiny-gguf"
TOKEN = "hf_secret_frontend_only"
FILES = {
    "tiny.gguf": b"G" * 300_000,
    "config.json": b'{"arch": "llama"}',
    "sub/extra.bin": b"x" * 1000,
    "README.md": b"# tiny",
}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def on_file(self, index: int, total_files: int, total_bytes: int) -> None:
        self.calls.append(("file", index, total_files))

    def on_bytes(self, done: int, total: int) -> None:
        self.calls.append(("bytes", done, total))

    def on_hash(self, done: int, total: int) -> None:
        self.calls.append(("hash", done, total))


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    server = FakeHub(REPO, dict(FILES), token=TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


async def test_snapshot_is_downloaded_with_the_token_verified_and_committed(hub, tmp_path):
    source = HuggingFaceSource(REPO, "main", ("*.gguf", "*.json"))
    progress = Recorder()
    snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, source, progress)
    assert sorted(p.name for p in snapshot.iterdir() if not p.name.endswith(".sha256")) == [
        "config.json",
        "tiny.gguf",
    ]
    assert (snapshot / "tiny.gguf").read_bytes() == FILES["tiny.gguf"]
    assert read_trusted_hash(snapshot / "tiny.gguf") == hashlib.sha256(FILES["tiny.gguf"]).hexdigest()
    assert committed_snapshot(tmp_path, source) == snapshot
    assert snapshot.parent.name == "snapshots" and snapshot.name.startswith(hub.commit + "-")
    assert all(r.authorization == f"Bearer {TOKEN}" for r in hub.requests)
    assert ("file", 2, 2) in progress.calls and ("bytes", 300_000, 300_000) in progress.calls
    assert not list(snapshot.parent.glob(".incomplete-*"))


async def test_a_committed_snapshot_is_not_downloaded_again(hub, tmp_path):
    source = HuggingFaceSource(REPO)
    client = HubClient(hub.url, TOKEN)
    first = await client.ensure_snapshot(tmp_path, source, Recorder())
    downloads = len(hub.file_requests())
    second = await client.ensure_snapshot(tmp_path, source, Recorder())
    assert first == second
    assert len(hub.file_requests()) == downloads == len(FILES)


async def test_a_gated_repo_without_the_token_fails_naming_hf_token(hub, tmp_path):
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, "").ensure_snapshot(tmp_path, HuggingFaceSource(REPO), Recorder())
    assert raised.value.status == 401
    assert "set HF_TOKEN on the frontend" in str(raised.value)


async def test_an_unknown_revision_is_a_404_naming_repo_and_revision(hub, tmp_path):
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, HuggingFaceSource(REPO, "v9"), Recorder())
    assert str(raised.value) == (
        "Hugging Face repo 'acme/tiny-gguf': HTTP 404: repo 'acme/tiny-gguf' or "
        "revision 'v9' not found on the hub"
    )


async def test_patterns_that_match_nothing_fail_naming_the_field(hub, tmp_path):
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, TOKEN).ensure_snapshot(
            tmp_path, HuggingFaceSource(REPO, "main", ("*.onnx",)), Recorder()
        )
    assert "matches huggingface.include ['*.onnx']" in str(raised.value)


async def test_a_corrupt_download_is_refused_and_nothing_is_committed(hub, tmp_path):
    hub.files["tiny.gguf"] = b"G" * 299_999 + b"X"  # served bytes differ from the listing's hash below
    listing = hub.listing
    hub.listing = lambda: {
        **listing(),
        "siblings": [  # type: ignore[method-assign]
            {
                "rfilename": "tiny.gguf",
                "size": 300_000,
                "lfs": {"sha256": hashlib.sha256(FILES["tiny.gguf"]).hexdigest(), "size": 300_000},
            }
        ],
    }
    source = HuggingFaceSource(REPO)
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, source, Recorder())
    assert "tiny.gguf: sha256" in str(raised.value)
    assert committed_snapshot(tmp_path, source) is None


async def test_unreachable_hub_falls_back_to_the_committed_snapshot(hub, tmp_path):
    source = HuggingFaceSource(REPO)
    snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, source, Recorder())
    url = hub.url
    hub.stop()
    assert await HubClient(url, TOKEN).ensure_snapshot(tmp_path, source, Recorder()) == snapshot


async def test_unsafe_file_names_in_a_listing_are_ignored(hub, tmp_path):
    listing = hub.listing
    hub.listing = lambda: {
        **listing(),
        "siblings": [  # type: ignore[method-assign]
            *listing()["siblings"],
            {"rfilename": "../../escape.txt", "size": 1},
            {"rfilename": "/abs", "size": 1},
        ],
    }
    snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, HuggingFaceSource(REPO), Recorder())
    assert not (tmp_path / "escape.txt").exists()
    assert not any("escape" in p.name for p in tmp_path.rglob("*"))
    assert (snapshot / "sub" / "extra.bin").is_file()


async def test_model_config_points_into_the_snapshot_once_downloaded(hub, tmp_path):
    cfg = parse_model_config(
        {
            "name": "tiny",
            "backend": "llama-cpp",
            "parameters": {"model": "tiny.gguf"},
            "huggingface": {"repo": REPO, "include": ["*.gguf", "config.json"]},
        },
        tmp_path / "tiny.yaml",
        tmp_path,
    )
    assert cfg.model_file is None and cfg.files() == []
    snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, cfg.huggingface, Recorder())
    assert cfg.model_file == snapshot / "tiny.gguf"
    assert sorted(p.name for p in cfg.files()) == ["config.json", "tiny.gguf"]
    assert ".artifacts" in Path(cfg.model_file).parts


async def test_a_hub_answering_a_commit_that_is_a_path_writes_nothing_outside_the_models_dir(tmp_path):
    """The commit names the snapshot directory: a hostile mirror's '../..' must not place it elsewhere."""
    models = tmp_path / "models"
    models.mkdir()
    hub = FakeHub(REPO, dict(FILES), commit="../../../../../../escaped").start()
    try:
        with pytest.raises(
            HubDownloadFailed,
            match="answered commit '../../../../../../escaped', not a hex commit id; nothing was downloaded",
        ):
            await HubClient(hub.url, "").ensure_snapshot(models, HuggingFaceSource(REPO), Recorder())
    finally:
        hub.stop()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]
    assert hub.file_requests() == []
