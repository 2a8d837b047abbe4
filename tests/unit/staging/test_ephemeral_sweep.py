"""The recovery sweep of ephemeral request inputs, on a real directory tree with set mtimes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from corral.staging.ephemeral_ledger import EphemeralLedger, EphemeralLimits
from corral.staging.ephemeral_sweep import sweep_ephemeral

HOUR_S = 3600.0


def _input(root: Path, request_dir: str, name: str, age_s: float, size_bytes: int = 10) -> Path:
    path = root / request_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size_bytes)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def _ledger(root: Path) -> EphemeralLedger:
    return EphemeralLedger(root, EphemeralLimits(1 << 30, 1), free_bytes=lambda _path: 1 << 40)


def test_sweep_removes_an_abandoned_request_directory_and_keeps_active_and_young_ones(tmp_path: Path) -> None:
    root = tmp_path / "staging" / "ephemeral"
    _input(root, "audio/dead0000", "clip.wav", 2 * HOUR_S, 100)
    _input(root, "audio/dead0000", "clip.wav.sha256", 2 * HOUR_S)
    _input(root, "image/act10000", "cat.png", 3 * HOUR_S)  # old, but its request still holds a reservation
    _input(root, "image/young000", "dog.png", 10 * 60)
    ledger = _ledger(root)
    ledger.reserve("ephemeral/image/act10000/cat.png", 10)
    ledger.settle("ephemeral/image/act10000/cat.png", on_disk=True)

    report = sweep_ephemeral([root], ledger)

    assert report.removed == ["audio/dead0000"] and report.removed_bytes == 110
    assert not (root / "audio" / "dead0000").exists()
    assert (root / "image" / "act10000" / "cat.png").exists()
    assert (root / "image" / "young000" / "dog.png").exists()


def test_sweep_judges_a_request_directory_by_its_newest_file(tmp_path: Path) -> None:
    root = tmp_path / "ephemeral"
    _input(root, "audio/mixd0000", "old.wav", 5 * HOUR_S)
    _input(root, "audio/mixd0000", "sub/new.wav", 30 * 60)  # the request staged another file half an hour ago
    assert sweep_ephemeral([root], _ledger(root)).removed == []
    assert (root / "audio" / "mixd0000" / "old.wav").exists()


def test_an_empty_request_directory_is_judged_by_its_own_mtime(tmp_path: Path) -> None:
    root = tmp_path / "ephemeral"
    (root / "audio" / "empty000").mkdir(parents=True)
    (root / "audio" / "fresh000").mkdir(parents=True)
    stamp = time.time() - 2 * HOUR_S
    os.utime(root / "audio" / "empty000", (stamp, stamp))
    assert sweep_ephemeral([root], _ledger(root)).removed == ["audio/empty000"]
    assert (root / "audio" / "fresh000").is_dir()


def test_sweep_never_follows_a_symlink_out_of_the_root(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "llama").mkdir(parents=True)
    weights = models / "llama" / "model.gguf"
    weights.write_bytes(b"weights")
    old = time.time() - 5 * HOUR_S
    os.utime(weights, (old, old))
    root = tmp_path / "staging" / "ephemeral"
    (root / "audio").mkdir(parents=True)
    (root / "audio" / "link0000").symlink_to(models / "llama")  # a request "directory" that is a symlink
    dead = _input(root, "image/dead0000", "cat.png", 2 * HOUR_S)
    (dead.parent / "models-link").symlink_to(models)  # a symlink inside an abandoned request directory
    linked_root = tmp_path / "linked-root"
    linked_root.symlink_to(models)  # a root that is itself a symlink

    report = sweep_ephemeral([root, linked_root], _ledger(root))

    assert report.removed == ["image/dead0000"]
    assert weights.read_bytes() == b"weights"
    assert (root / "audio" / "link0000").is_symlink()


def test_what_the_sweep_keeps_without_a_reservation_counts_against_the_byte_limit(tmp_path: Path) -> None:
    root = tmp_path / "ephemeral"
    _input(root, "audio/left0000", "clip.wav", 10 * 60, 700)
    ledger = _ledger(root)
    sweep_ephemeral([root], ledger)
    assert ledger.held_bytes() == 700
