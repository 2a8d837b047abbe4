"""Which local paths a model config names, how they become keys, and the Hugging Face config block."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.models.artifacts import expand_files, option_path
from corral.models.config import ModelConfigError, parse_model_config
from corral.models.huggingface import HuggingFaceSource, committed_snapshot, parse_huggingface, ref_path
from corral.staging.plan import build_plan
from support.rows import present


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_directory_expands_file_by_file_without_sidecars_of_real_files(tmp_path: Path) -> None:
    _touch(tmp_path / "d" / "a.bin")
    _touch(tmp_path / "d" / "a.bin.sha256")  # sidecar of a.bin: skipped
    _touch(tmp_path / "d" / "b.sha256")  # no b next to it: a real file
    _touch(tmp_path / "d" / "sub" / "c.bin")
    assert [p.relative_to(tmp_path).as_posix() for p in expand_files([tmp_path / "d"])] == [
        "d/a.bin",
        "d/b.sha256",
        "d/sub/c.bin",
    ]


def test_an_onnx_voice_brings_its_json_companion(tmp_path: Path) -> None:
    voice = _touch(tmp_path / "en.onnx")
    _touch(tmp_path / "en.onnx.json")
    assert expand_files([voice]) == [voice, tmp_path / "en.onnx.json"]


@pytest.mark.parametrize(
    "option, staged",
    [
        ("vae:vae.bin", True),  # a file in the models dir
        ("chat_format:gemma", False),  # a plain value
        ("root:.", False),  # the models dir itself would stage everything
        ("up:..", False),  # so would a parent of it
        ("noseparator", False),
    ],
)
def test_option_values_that_name_files_are_staged_but_never_the_whole_models_dir(
    tmp_path: Path, option: str, staged: bool
) -> None:
    _touch(tmp_path / "vae.bin")
    assert (option_path(option, [tmp_path], tmp_path) is not None) == staged


def test_keys_mirror_the_models_dir_and_keep_trees_of_listed_roots_below_their_name(tmp_path: Path) -> None:
    models, outside = tmp_path / "models", tmp_path / "shared" / "voices"
    _touch(models / "sub" / "m.gguf")
    _touch(outside / "en" / "v.onnx")
    cfg = parse_model_config(
        {
            "name": "m",
            "backend": "llama-cpp",
            "parameters": {"model": "sub/m.gguf"},
            "options": [f"voices:{outside}"],
        },
        models / "m.yaml",
        models,
        (tmp_path / "shared",),
    )
    plan = build_plan(cfg)
    assert [f.key for f in plan.files] == ["models/m/sub/m.gguf", "models/m/voices/en/v.onnx"]
    assert [f.record_hash for f in plan.files] == [True, False]  # no sidecar written outside the models dir


@pytest.mark.parametrize(
    "block, message",
    [
        ({"repo": "no spaces allowed"}, "field 'huggingface.repo' must look like 'org/name'"),
        ({"repo": "a/../b"}, "field 'huggingface.repo'"),
        ({"repo": "a/b", "revision": ""}, "field 'huggingface.revision'"),
        ({"repo": "a/b", "include": "*.gguf"}, None),  # one pattern as a string is fine
        ({"repo": "a/b", "include": [3]}, "field 'huggingface.include' must be a list of glob patterns"),
        ("a/b", None),  # shorthand: just the repo
    ],
)
def test_huggingface_block_is_validated_naming_the_field(
    block: dict[str, str] | dict[str, str | list[int]] | str, message: str | None
) -> None:
    if message is None:
        assert present(parse_huggingface(block)).repo == "a/b"
    else:
        with pytest.raises(ValueError, match=message):
            parse_huggingface(block)


def test_a_bad_huggingface_block_makes_the_model_config_error_name_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"m\.yaml: field 'huggingface\.repo'"):
        parse_model_config(
            {"name": "m", "backend": "llama-cpp", "huggingface": {"repo": "bad repo"}},
            tmp_path / "m.yaml",
            tmp_path,
        )


def test_huggingface_model_may_omit_parameters_model_and_then_loads_the_snapshot_dir(tmp_path: Path) -> None:
    cfg = parse_model_config(
        {"name": "m", "backend": "llama-cpp", "huggingface": {"repo": "a/b"}}, tmp_path / "m.yaml", tmp_path
    )
    assert cfg.model_file is None  # nothing downloaded yet
    source = HuggingFaceSource("a/b")
    snapshot = tmp_path / ".artifacts" / "huggingface" / "a--b" / "snapshots" / "c0ffee"
    _touch(snapshot / "w.bin")
    ref_path(tmp_path, source).parent.mkdir(parents=True)
    ref_path(tmp_path, source).write_text("c0ffee")
    assert committed_snapshot(tmp_path, source) == snapshot
    assert cfg.model_file == snapshot and cfg.files() == [snapshot / "w.bin"]


def test_different_include_patterns_get_different_snapshots() -> None:
    commit = "c" * 40
    assert HuggingFaceSource("a/b").selection_name(commit) == commit
    assert HuggingFaceSource("a/b", include=("*.gguf",)).selection_name(commit) != HuggingFaceSource(
        "a/b", include=("*.json",)
    ).selection_name(commit)
