"""What `model.delete` may remove, and which processes `model.unload` stops (pure, plus a temp dir)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from corral.worker.model_ops import PathEscape, model_keys, model_paths, remove_paths


def test_the_model_directory_and_its_siblings_are_found(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "weights.gguf").write_bytes(b"x")
    (tmp_path / "m.yaml").write_text("name: m\n")
    (tmp_path / "mm").mkdir()  # another model whose name starts the same: never touched
    found = model_paths(tmp_path, "m")
    assert {p.name for p in found} == {"m", "m.yaml"}
    remove_paths(found)
    assert not (tmp_path / "m").exists() and (tmp_path / "mm").exists()


def test_a_symlink_is_removed_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    models = tmp_path / "models"
    models.mkdir()
    (models / "m").symlink_to(outside, target_is_directory=True)
    remove_paths(model_paths(models, "m"))
    assert (outside / "precious").read_text() == "keep" and not (models / "m").exists()


def test_a_path_resolving_outside_is_refused(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "sub").mkdir(parents=True)
    with pytest.raises(PathEscape):
        model_paths(models / "sub", "..")  # names never reach here with '..' (name_problem), still refused


def _supervisor(**ports: int) -> Any:
    return SimpleNamespace(processes={key: SimpleNamespace(port=port) for key, port in ports.items()})


def test_unload_targets_only_the_named_model() -> None:
    sup = _supervisor(**{"a#0": 5001, "a#1": 5002, "ab#0": 5003, "b#0": 5004})
    assert model_keys(sup, "a") == ["a#0", "a#1"]
    assert model_keys(sup, "a", "10.0.0.7:5002") == ["a#1"]
    assert model_keys(sup, "missing") == []
