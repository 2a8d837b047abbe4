"""The `huggingface:` block of a model config and where its snapshot lives under the models directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.models.huggingface import (
    DEFAULT_REVISION,
    HuggingFaceConfigError,
    HuggingFaceSource,
    hub_root,
    parse_huggingface,
    ref_path,
    repo_dir,
    snapshot_path,
)

MODELS = Path("/models")


def test_absent_is_none_and_a_string_is_the_repo() -> None:
    assert parse_huggingface(None) is None
    assert parse_huggingface("acme/tiny") == HuggingFaceSource("acme/tiny", DEFAULT_REVISION, ())


def test_a_full_block_is_kept_stripped() -> None:
    source = parse_huggingface(
        {"repo": " acme/tiny ", "revision": " v1.0 ", "include": [" *.gguf ", "*.json"]}
    )
    assert source == HuggingFaceSource("acme/tiny", "v1.0", ("*.gguf", "*.json"))


def test_one_include_pattern_may_be_a_string() -> None:
    source = parse_huggingface({"repo": "gpt2", "include": "*.safetensors"})
    assert source is not None and source.include == ("*.safetensors",)


@pytest.mark.parametrize(
    "repo",
    [
        None,
        "",
        "/tiny",
        "acme/",
        "acme/tiny/extra",
        "acme/../x",
        "-acme/tiny",
        "acme/t iny",
        "ácme/tiny",
        7,
        ["a/b"],
    ],
)
def test_a_repo_that_is_not_org_slash_name_is_refused(repo: Any) -> None:
    with pytest.raises(HuggingFaceConfigError, match="'huggingface.repo' must look like 'org/name'"):
        parse_huggingface({"repo": repo})


@pytest.mark.parametrize("revision", ["", "  ", "../main", "main\x00", 3, None])
def test_a_revision_that_is_not_a_ref_is_refused(revision: Any) -> None:
    with pytest.raises(
        HuggingFaceConfigError, match="'huggingface.revision' must be a branch, tag or commit"
    ):
        parse_huggingface({"repo": "acme/tiny", "revision": revision})


@pytest.mark.parametrize("include", [[""], ["  "], [3], {"a": 1}, 5])
def test_include_must_be_glob_patterns(include: Any) -> None:
    with pytest.raises(HuggingFaceConfigError, match="'huggingface.include' must be a list of glob patterns"):
        parse_huggingface({"repo": "acme/tiny", "include": include})


def test_a_block_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(HuggingFaceConfigError, match="must be a mapping"):
        parse_huggingface(["acme/tiny"])


def test_the_selection_is_the_commit_plus_a_stable_id_of_the_patterns() -> None:
    every = HuggingFaceSource("acme/tiny")
    assert every.patterns_id == "" and every.selection_name("abc123") == "abc123"
    some = HuggingFaceSource("acme/tiny", include=("*.gguf", "*.json"))
    assert len(some.patterns_id) == 8
    assert (
        some.patterns_id == HuggingFaceSource("acme/tiny", include=("*.json", "*.gguf")).patterns_id
    )  # order-free
    assert some.patterns_id != HuggingFaceSource("acme/tiny", include=("*.gguf",)).patterns_id
    assert some.selection_name("abc123") == f"abc123-{some.patterns_id}"


def test_the_layout_under_the_models_directory() -> None:
    source = HuggingFaceSource("acme/tiny")
    assert hub_root(MODELS) == Path("/models/.artifacts/huggingface")
    assert repo_dir(MODELS, source) == Path("/models/.artifacts/huggingface/acme--tiny")
    assert snapshot_path(MODELS, source, "abc") == Path(
        "/models/.artifacts/huggingface/acme--tiny/snapshots/abc"
    )
    assert ref_path(MODELS, source) == Path("/models/.artifacts/huggingface/acme--tiny/refs/main")


def test_a_ref_with_slashes_stays_one_file_and_patterns_name_their_own_ref() -> None:
    pr = HuggingFaceSource("acme/tiny", revision="refs/pr/1")
    assert ref_path(MODELS, pr).name == "refs%2Fpr%2F1"
    assert ref_path(MODELS, pr).parent == repo_dir(MODELS, pr) / "refs"
    some = HuggingFaceSource("acme/tiny", include=("*.gguf",))
    assert ref_path(MODELS, some).name == f"main-{some.patterns_id}"
