"""Model and alias names are names, never paths: one validator for every entry (models/names.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.models.aliases import AliasConfigError, parse_alias
from corral.models.config import ModelConfigError, load_model_configs, parse_model_config
from corral.models.names import InvalidName, name_problem, validate_name
from corral.placement.rules import RuleInvalid, parse_rule

LONG = "m" * 300


@pytest.mark.parametrize(
    "name", ["gemma-3-270m", "qwen2.5:7b", "all-minilm-l6-v2", "a", "m@q4+lora", "x" * 255]
)
def test_plain_names_are_accepted(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name, problem",
    [
        ("../evil", "'../evil' must not contain '/' or '\\' (a name, not a path)"),
        ("a/b", "'a/b' must not contain '/' or '\\' (a name, not a path)"),
        ("a..b", "'a..b' must not contain '..'"),
        (".hidden", "'.hidden' must not start with '.'"),
        ("two words", "'two words' may contain only letters, digits and . _ - : @ +"),
        (LONG, f"must be at most 255 characters, got 300 ('{'m' * 64}…')"),
        ("", "is required (a model or alias name)"),
        (7, "is required (a model or alias name)"),
    ],
)
def test_names_that_are_paths_too_long_or_odd_are_refused_saying_why(name: object, problem: str) -> None:
    assert name_problem(name) == problem
    with pytest.raises(InvalidName) as info:
        validate_name(name, "model")
    assert str(info.value) == f"field 'model': {problem}" and info.value.field == "model"


@pytest.mark.parametrize("name", ["../evil", "a..b", LONG])
def test_a_model_yaml_with_a_path_as_its_name_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_model_config({"name": name, "backend": "simulator"}, tmp_path / "bad.yaml", tmp_path)
    assert str(info.value) == f"{tmp_path / 'bad.yaml'}: field 'name' {name_problem(name)}"


def test_loading_the_models_directory_skips_a_file_whose_name_is_a_path(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text("name: good\nbackend: simulator\n")
    (tmp_path / "bad.yaml").write_text("name: ../../etc/evil\nbackend: simulator\n")
    assert list(load_model_configs(tmp_path)) == ["good"]


@pytest.mark.parametrize(
    "data, field",
    [({"name": "../prod", "alias": "m"}, "name"), ({"name": "prod", "alias": "x/../../m"}, "alias")],
)
def test_an_alias_naming_a_path_is_refused(tmp_path: Path, data: dict[str, str], field: str) -> None:
    with pytest.raises(AliasConfigError) as info:
        parse_alias(data, tmp_path / "prod.yaml")
    assert str(info.value) == f"{tmp_path / 'prod.yaml'}: field {field!r} {name_problem(data[field])}"


@pytest.mark.parametrize("name", ["../m", ".m", "a/b"])
def test_a_scheduling_rule_for_a_path_is_refused_naming_model_name(name: str) -> None:
    with pytest.raises(RuleInvalid) as info:
        parse_rule({"model_name": name, "min_replicas": 1})
    assert info.value.field == "model_name" and str(info.value) == f"field 'model_name': {name_problem(name)}"
