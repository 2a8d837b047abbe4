"""Storage keys: naming a frontend file and mapping a key to a worker path (reference §5.11, §6.4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.models.roots import ModelRoots, PathOutsideRoots
from corral.staging.errors import KeyEscapesDirectory, ReservedKey, StagingError
from corral.staging.keys import resolve_key, storage_key, validate_key

SRV_ROOTS = ModelRoots(Path("/srv/models"), (Path("/srv/shared"),))


@pytest.mark.parametrize(
    "local_path, expected_key",
    [
        # directly under the models dir
        ("/srv/models/llama.gguf", "models/llama3/llama.gguf"),
        # nested: the relative path is kept so sibling files stay siblings on the worker
        ("/srv/models/hf/org/repo/model.safetensors", "models/llama3/hf/org/repo/model.safetensors"),
        # in a listed root (CORRAL_MODEL_PATH_ROOTS): below the configured path's own name
        ("/srv/shared/llama.gguf", "models/llama3/llama.gguf"),
        # '..' is resolved lexically before deciding whether the file is under the models dir
        ("/srv/models/sub/../other/x.bin", "models/llama3/other/x.bin"),
    ],
)
def test_storage_key_is_models_tracking_key_and_path_relative_to_models_dir(
    local_path: str, expected_key: str
) -> None:
    assert storage_key("llama3", Path(local_path), SRV_ROOTS) == expected_key


@pytest.mark.parametrize(
    "local_path",
    [
        "/home/me/Downloads/llama.gguf",  # outside every root: no basename fallback
        "/srv/models/../secrets/llama.gguf",  # climbs out of the models dir
    ],
)
def test_storage_key_refuses_a_file_outside_the_roots(local_path: str) -> None:
    with pytest.raises(
        PathOutsideRoots,
        match=r"outside the models directory /srv/models and "
        r"CORRAL_MODEL_PATH_ROOTS \(/srv/shared\)",
    ):
        storage_key("llama3", Path(local_path), SRV_ROOTS)


def test_storage_key_refuses_a_symlink_in_the_models_dir_that_points_out(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "secret.gguf").write_bytes(b"x")
    (tmp_path / "models" / "link.gguf").symlink_to(tmp_path / "secret.gguf")
    with pytest.raises(PathOutsideRoots, match=f"resolves to {tmp_path / 'secret.gguf'}, outside"):
        storage_key("m", tmp_path / "models" / "link.gguf", ModelRoots(tmp_path / "models"))


def test_storage_key_of_relative_paths_uses_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert storage_key("m", Path("models/a/b.gguf"), ModelRoots(Path("models"))) == "models/m/a/b.gguf"


@pytest.mark.parametrize(
    "key, expected_relative_to_root",
    [
        # models/ keys land in the models dir itself
        ("models/llama3/llama.gguf", "models/llama3/llama.gguf"),
        # data/ keys land in the sibling data dir
        ("data/voices/en.onnx", "data/voices/en.onnx"),
        # ephemeral/ keys keep their full key under the sibling staging dir
        ("ephemeral/image/1a2b3c4d/cat.png", "staging/ephemeral/image/1a2b3c4d/cat.png"),
        # any other key also goes to staging, verbatim
        ("localai-output-1.tmp", "staging/localai-output-1.tmp"),
        # 'models' without a slash is not the models prefix
        ("models", "staging/models"),
        # dots inside a name are fine; only whole '.'/'..' segments are refused
        ("models/m/v1..2/x.gguf", "models/m/v1..2/x.gguf"),
    ],
)
def test_resolve_key_routes_by_prefix_to_models_data_or_staging(
    tmp_path: Path, key: str, expected_relative_to_root: str
) -> None:
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    assert resolve_key(key, models_dir) == tmp_path / expected_relative_to_root


def test_resolve_key_returns_an_absolute_path_for_a_relative_models_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    resolved = resolve_key("models/m/x.gguf", Path("models"))
    assert resolved.is_absolute()
    assert resolved == tmp_path / "models" / "m" / "x.gguf"


@pytest.mark.parametrize(
    "key, reason",
    [
        ("", "key is empty"),
        # climbing out of the models dir
        ("models/../etc/passwd", "key has a '..' path segment"),
        ("models/m/../../x", "key has a '..' path segment"),
        # climbing out of the staging dir
        ("../models/x", "key has a '..' path segment"),
        ("ephemeral/..", "key has a '..' path segment"),
        ("models/./x", "key has a '.' path segment"),
        # absolute paths are never keys
        ("/etc/passwd", "key is an absolute path; keys are relative to the worker's dirs"),
        # 'models//x', 'models/' and trailing slashes name no file
        ("models//x", "key has an empty path segment ('//' or a trailing '/')"),
        ("models/", "key has an empty path segment ('//' or a trailing '/')"),
        ("data/x/", "key has an empty path segment ('//' or a trailing '/')"),
        # Windows separators and NUL bytes would be read differently by the OS
        ("models\\..\\x", "key contains a backslash; use '/' as the separator"),
        ("models/x\x00.gguf", "key contains a NUL byte"),
    ],
)
def test_malformed_keys_are_rejected_with_the_reason(tmp_path: Path, key: str, reason: str) -> None:
    with pytest.raises(KeyEscapesDirectory) as raised:
        resolve_key(key, tmp_path / "models")
    assert raised.value.reason == reason
    assert str(raised.value) == f"invalid storage key {key!r}: {reason}"
    with pytest.raises(KeyEscapesDirectory):
        validate_key(key)


def test_key_escape_is_a_staging_error() -> None:
    assert issubclass(KeyEscapesDirectory, StagingError)


def test_symlink_pointing_outside_the_models_dir_is_rejected(tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    outside = tmp_path / "outside"
    models_dir.mkdir()
    outside.mkdir()
    os.symlink(outside, models_dir / "link")
    with pytest.raises(KeyEscapesDirectory) as raised:
        resolve_key("models/link/evil.gguf", models_dir)
    assert "outside" in raised.value.reason
    assert "a symlink points out of it" in raised.value.reason


def test_symlinked_file_pointing_outside_is_rejected(tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", models_dir / "innocent.gguf")
    with pytest.raises(KeyEscapesDirectory):
        resolve_key("models/innocent.gguf", models_dir)


def test_symlink_pointing_to_the_base_dir_itself_is_rejected(tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    os.symlink(models_dir, models_dir / "self")
    with pytest.raises(KeyEscapesDirectory):
        resolve_key("models/self", models_dir)


def test_symlink_that_stays_inside_the_models_dir_is_allowed(tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    (models_dir / "real").mkdir(parents=True)
    os.symlink(models_dir / "real", models_dir / "alias")
    assert resolve_key("models/alias/x.gguf", models_dir) == models_dir / "alias" / "x.gguf"


def test_models_dir_reached_through_a_symlink_still_accepts_its_own_keys(tmp_path: Path) -> None:
    real = tmp_path / "real-models"
    real.mkdir()
    os.symlink(real, tmp_path / "models")
    assert resolve_key("models/m/x.gguf", tmp_path / "models") == tmp_path / "models" / "m" / "x.gguf"


@pytest.mark.parametrize(
    "key",
    [
        "models/m/x.gguf.sha256",
        "models/m/x.gguf.sha256.target",
        "data/.x.abc.upload",
        "models/.x.sha256.1f.tmp",
        "models/d.sha256/x",
    ],
)  # sidecars, target sidecars, upload temp files, sidecar temp files, a sidecar name as a directory
def test_keys_naming_worker_metadata_are_reserved(key: str) -> None:
    with pytest.raises(ReservedKey, match="is a name reserved for the worker's own metadata"):
        validate_key(key)


def test_ordinary_dotfiles_and_hash_like_names_inside_a_name_are_not_reserved() -> None:
    validate_key("models/m/.gitattributes")
    validate_key("models/m/x.sha256sum.txt")
