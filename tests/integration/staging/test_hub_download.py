"""Managed Hugging Face artifacts, frontend side, against a local server implementing the hub's file API."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.constants
import pytest

from corral.models.config import parse_model_config
from corral.models.huggingface import HuggingFaceSource, committed_snapshot
from corral.staging.errors import HubDownloadFailed
from corral.staging.hashing import read_trusted_hash
from corral.staging.hub_download import HubClient, HubFile
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


async def test_snapshot_is_downloaded_with_the_token_verified_and_committed(
    hub: FakeHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="huggingface_hub")  # the library's own debug lines too
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
    assert not (snapshot / ".cache").exists()  # the library's bookkeeping is not part of the snapshot
    assert all(r.path.startswith((f"/api/models/{REPO}/", f"/{REPO}/resolve/")) for r in hub.requests)
    assert TOKEN not in caplog.text and TOKEN not in repr(HubClient(hub.url, TOKEN))


async def test_a_committed_snapshot_is_not_downloaded_again(hub: FakeHub, tmp_path: Path) -> None:
    source = HuggingFaceSource(REPO)
    client = HubClient(hub.url, TOKEN)
    first = await client.ensure_snapshot(tmp_path, source, Recorder())
    downloads = len(hub.file_requests())
    second = await client.ensure_snapshot(tmp_path, source, Recorder())
    assert first == second
    assert len(hub.file_requests()) == downloads == len(FILES)


async def test_a_gated_repo_without_the_token_fails_naming_hf_token(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, "").ensure_snapshot(tmp_path, HuggingFaceSource(REPO), Recorder())
    assert raised.value.status == 401
    assert "set HF_TOKEN on the frontend" in str(raised.value)


async def test_an_unknown_revision_is_a_404_naming_repo_and_revision(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, HuggingFaceSource(REPO, "v9"), Recorder())
    assert str(raised.value) == (
        "Hugging Face repo 'acme/tiny-gguf': HTTP 404: repo 'acme/tiny-gguf' or "
        "revision 'v9' not found on the hub"
    )


async def test_patterns_that_match_nothing_fail_naming_the_field(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, TOKEN).ensure_snapshot(
            tmp_path, HuggingFaceSource(REPO, "main", ("*.onnx",)), Recorder()
        )
    assert "matches huggingface.include ['*.onnx']" in str(raised.value)


async def test_a_corrupt_download_is_refused_and_nothing_is_committed(hub: FakeHub, tmp_path: Path) -> None:
    hub.files["tiny.gguf"] = b"G" * 299_999 + b"X"  # served bytes differ from the listing's hash below
    listing = hub.listing
    hub.listing = lambda: {  # type: ignore[method-assign]  # this hub's listing, one entry changed
        **listing(),
        "siblings": [
            {
                "rfilename": "tiny.gguf",
                "size": 300_000,
                "lfs": {
                    "sha256": hashlib.sha256(FILES["tiny.gguf"]).hexdigest(),
                    "size": 300_000,
                    "pointerSize": 130,
                },
            }
        ],
    }
    source = HuggingFaceSource(REPO)
    with pytest.raises(HubDownloadFailed) as raised:
        await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, source, Recorder())
    assert "tiny.gguf: sha256" in str(raised.value)
    assert committed_snapshot(tmp_path, source) is None


async def test_unreachable_hub_falls_back_to_the_committed_snapshot(hub: FakeHub, tmp_path: Path) -> None:
    source = HuggingFaceSource(REPO)
    snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, source, Recorder())
    url = hub.url
    hub.stop()
    assert await HubClient(url, TOKEN).ensure_snapshot(tmp_path, source, Recorder()) == snapshot


async def test_unsafe_file_names_in_a_listing_are_ignored(hub: FakeHub, tmp_path: Path) -> None:
    listing = hub.listing
    hub.listing = lambda: {  # type: ignore[method-assign]  # this hub's listing and two hostile names
        **listing(),
        "siblings": [
            *listing()["siblings"],
            {"rfilename": "../../escape.txt", "size": 1},
            {"rfilename": "/abs", "size": 1},
        ],
    }
    snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, HuggingFaceSource(REPO), Recorder())
    assert not (tmp_path / "escape.txt").exists()
    assert not any("escape" in p.name for p in tmp_path.rglob("*"))
    assert (snapshot / "sub" / "extra.bin").is_file()


async def test_model_config_points_into_the_snapshot_once_downloaded(hub: FakeHub, tmp_path: Path) -> None:
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
    assert cfg.files() == []
    before = cfg.model_file
    assert before is None and cfg.huggingface is not None
    snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(tmp_path, cfg.huggingface, Recorder())
    after = cfg.model_file
    assert after == snapshot / "tiny.gguf"
    assert sorted(p.name for p in cfg.files()) == ["config.json", "tiny.gguf"]
    assert ".artifacts" in Path(after).parts


async def test_a_hub_answering_a_commit_that_is_a_path_writes_nothing_outside_the_models_dir(
    tmp_path: Path,
) -> None:
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


async def test_the_library_refuses_a_hostile_file_name_our_listing_filter_would_have_dropped(
    hub: FakeHub, tmp_path: Path
) -> None:
    """The second wall: a name past the listing filter reaches huggingface_hub, which refuses it unasked."""
    models = tmp_path / "models"
    into = models / "snap"
    into.mkdir(parents=True)
    client = HubClient(hub.url, TOKEN)
    for name in ("../../escape.txt", "/abs/escape.txt", "sub/../../escape.txt"):
        with pytest.raises(HubDownloadFailed, match="refused by huggingface_hub"):
            client.download_file(
                HuggingFaceSource(REPO),
                hub.commit,
                HubFile(name, 1, None),
                into,
                on_bytes=lambda done, total: None,
                on_hash=lambda done, total: None,
            )
    assert not any("escape" in p.name for p in tmp_path.rglob("*"))
    assert hub.requests == []  # refused before asking the hub


async def test_a_cancelled_download_stops_in_its_thread_and_commits_nothing(tmp_path: Path) -> None:
    big = {"big.bin": os.urandom(12 << 20)}  # over one library chunk (10 MiB) before the hold
    hub = FakeHub(REPO, big, hold_after=11 << 20).start()
    source = HuggingFaceSource(REPO)
    try:
        task = asyncio.create_task(HubClient(hub.url, "").ensure_snapshot(tmp_path, source, Recorder()))
        while not hub.file_requests():
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.05)
        # The task ends only once its thread has stopped (at its next chunk): when the chunk was already in the
        # socket's buffer that is at once, else after the release below; either way no download outlives it.
        hub.release.set()  # the next chunk reaches the thread, which sees the cancellation
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        hub.stop()
    assert committed_snapshot(tmp_path, source) is None
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size >= 10 << 20]
    assert leftovers == []  # the library removed its partial file


async def test_lfs_files_redirected_to_a_cdn_are_fetched_there_without_the_token(tmp_path: Path) -> None:
    cdn = FakeHub(REPO, dict(FILES), host="127.0.0.2").start()
    hub = FakeHub(REPO, dict(FILES), token=TOKEN, cdn=cdn.url).start()
    try:
        snapshot = await HubClient(hub.url, TOKEN).ensure_snapshot(
            tmp_path, HuggingFaceSource(REPO), Recorder()
        )
    finally:
        hub.stop()
        cdn.stop()
    assert (snapshot / "tiny.gguf").read_bytes() == FILES["tiny.gguf"]
    assert sorted(r.path.rsplit("/", 1)[-1] for r in cdn.file_requests()) == ["extra.bin", "tiny.gguf"]
    assert all(r.authorization == "" for r in cdn.requests)
    assert all(r.authorization == f"Bearer {TOKEN}" for r in hub.requests)


async def test_a_hub_that_does_not_answer_names_the_timeout_knob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_ETAG_TIMEOUT", 1)  # as HF_HUB_ETAG_TIMEOUT=1 would
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts connections, never answers
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        with pytest.raises(HubDownloadFailed, match="raise HF_HUB_ETAG_TIMEOUT") as raised:
            await HubClient(endpoint, "").ensure_snapshot(tmp_path, HuggingFaceSource(REPO), Recorder())
    finally:
        silent.close()
    assert raised.value.status is None


async def test_an_interrupted_download_keeps_finished_files_and_commits_only_the_listing(
    tmp_path: Path,
) -> None:
    files = {"a.bin": b"a" * 1000, "big.bin": os.urandom(12 << 20)}
    hub = FakeHub(REPO, files, hold_after=11 << 20).start()
    source = HuggingFaceSource(REPO)
    try:
        task = asyncio.create_task(HubClient(hub.url, "").ensure_snapshot(tmp_path, source, Recorder()))
        while not any(r.path.endswith("/big.bin") for r in hub.file_requests()):
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.05)  # the task hands the cancellation to its thread, which is held mid-body
        hub.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        incomplete = next(tmp_path.rglob(f".incomplete-{hub.commit}"))
        (incomplete / "big.bin.part").write_bytes(b"left by an older corral")
        hub.hold_after = None
        snapshot = await HubClient(hub.url, "").ensure_snapshot(tmp_path, source, Recorder())
    finally:
        hub.stop()
    assert [r.path.rsplit("/", 1)[-1] for r in hub.file_requests()] == ["a.bin", "big.bin", "big.bin"]
    assert sorted(p.name for p in snapshot.rglob("*")) == [
        "a.bin",
        "a.bin.sha256",
        "big.bin",
        "big.bin.sha256",
    ]
    assert (snapshot / "big.bin").read_bytes() == files["big.bin"]
