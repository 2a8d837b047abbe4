"""The worker's node credential file: kept 0600 next to (never inside) the models directory."""

from __future__ import annotations

from pathlib import Path

from corral.node.node_credential import NodeCredentialFile, default_state_dir


def test_a_saved_credential_is_read_back_for_the_same_name_only(tmp_path: Path) -> None:
    kept = NodeCredentialFile(tmp_path / "state", "gpu/01")
    assert kept.load() == ""  # first start: nothing kept yet
    kept.save("node-id", "secret")
    assert kept.path == tmp_path / "state" / "node-credential-gpu_01.json"
    assert kept.path.stat().st_mode & 0o777 == 0o600 and kept.path.parent.stat().st_mode & 0o777 == 0o700
    assert kept.load() == "secret"
    assert NodeCredentialFile(tmp_path / "state", "gpu_01").load() == ""  # same file name, another node


def test_an_unreadable_file_counts_as_no_credential(tmp_path: Path) -> None:
    kept = NodeCredentialFile(tmp_path, "w1")
    kept.path.write_text("{not json")
    assert kept.load() == ""


def test_the_default_state_dir_is_beside_the_served_models_directory(tmp_path: Path) -> None:
    assert default_state_dir(tmp_path / "w1" / "models") == tmp_path / "w1" / ".corral-worker"
