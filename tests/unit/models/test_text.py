"""Text that can be stored: a lone surrogate (YAML's or JSON's `\\ud800` escape) is found and named by its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.models.config import ModelConfigError, load_model_configs, parse_model_config
from corral.models.text import invalid_text, text_problem


@pytest.mark.parametrize(
    "document, field",
    [
        ({"description": "a\ud800"}, "description"),
        ({"parameters": {"model": "m", "mmproj": "\udc00.gguf"}}, "parameters.mmproj"),
        ({"options": ["ok", "chat_format:\ud83d"]}, "options.1"),
        ({"node_selector": {"zone\ud800": "a"}}, "node_selector.zone\\ud800"),  # a bad key is quoted escaped
        (["\ud800"], "0"),
    ],
)
def test_the_first_string_that_is_not_valid_unicode_is_named_by_its_dotted_path(
    document: Any, field: str
) -> None:
    assert invalid_text(document) == field


@pytest.mark.parametrize(
    "document",
    [
        {
            "description": "caf\u00e9 \U0001f600",
            "n": 1,
            "x": None,
            "l": [True, 2.5],
        },  # a pair decodes to one character
        {},
        "plain",
    ],
)
def test_valid_text_is_accepted(document: Any) -> None:
    assert invalid_text(document) is None


def test_a_deep_document_is_walked_without_recursion() -> None:
    deep: Any = "\ud800"
    for _ in range(100_000):
        deep = [deep]
    assert invalid_text(deep) == ".".join(["0"] * 100_000)


def test_the_message_names_the_field_and_the_fix() -> None:
    assert text_problem("description") == (
        "field 'description' is not valid text: it holds a lone UTF-16 surrogate (an escape like \\ud800 without its "
        "pair), which UTF-8 cannot store; send the character itself or a complete surrogate pair"
    )


def test_a_config_with_a_lone_surrogate_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_model_config(
            {"name": "m", "backend": "simulator", "description": "a\ud800"}, tmp_path / "m.yaml", tmp_path
        )
    assert info.value.field == "description"
    assert str(info.value) == f"{tmp_path / 'm.yaml'}: {text_problem('description')}"


def test_a_models_directory_file_with_a_lone_surrogate_or_bytes_that_are_not_utf8_is_skipped_at_boot(
    tmp_path: Path,
) -> None:
    (tmp_path / "good.yaml").write_text("name: good\nbackend: simulator\n")
    (tmp_path / "escape.yaml").write_text('name: escape\nbackend: simulator\ndescription: "a\\ud800"\n')
    (tmp_path / "bytes.yaml").write_bytes(b"name: bytes\nbackend: simulator\ndescription: \xff\n")
    assert list(load_model_configs(tmp_path)) == [
        "good"
    ]  # was a UnicodeEncodeError / UnicodeDecodeError: no start
