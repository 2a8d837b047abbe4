"""Aliases: a name resolves to the model it stands for; alias files are parsed strictly and are not models."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from corral.models.aliases import AliasConfigError, load_aliases, parse_alias, resolve
from corral.models.config import load_model_configs

MODELS = {"llama3", "llama4"}
ALIASES = {"production": "llama3", "staging": "production", "gone": "llama2"}


@pytest.mark.parametrize(
    "name, model, problem",
    [
        ("llama3", "llama3", ""),
        (
            "unknown-model",
            "unknown-model",
            "",
        ),  # a plain name governs itself (configured elsewhere, or later)
        ("production", "llama3", ""),
        ("staging", None, "points at another alias 'production'"),
        ("gone", None, "points at 'llama2', which is not a configured model"),
    ],
)
def test_names_resolve_to_the_model_they_stand_for(name: str, model: str | None, problem: str) -> None:
    resolution = resolve(name, MODELS, ALIASES)
    assert resolution.model == model
    assert problem in resolution.problem and bool(problem) == bool(resolution.problem)


def test_alias_files_are_parsed_strictly() -> None:
    assert parse_alias({"name": "production", "alias": "llama3"}, Path("p.yaml")) == ("production", "llama3")
    with pytest.raises(AliasConfigError, match="only 'name' and 'alias'; remove backend"):
        parse_alias({"name": "p", "alias": "llama3", "backend": "simulator"}, Path("p.yaml"))
    with pytest.raises(AliasConfigError, match="points at itself"):
        parse_alias({"name": "p", "alias": "p"}, Path("p.yaml"))


def test_alias_files_sit_beside_model_configs_and_are_not_models(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "llama3.yaml").write_text("name: llama3\nbackend: simulator\n")
    (tmp_path / "production.yaml").write_text("name: production\nalias: llama3\n")
    (tmp_path / "clash.yaml").write_text("name: llama3\nalias: production\n")  # takes a model's name
    with caplog.at_level(logging.WARNING):
        configs = load_model_configs(tmp_path)
        aliases = load_aliases(tmp_path, set(configs))
    assert set(configs) == {"llama3"}
    assert aliases == {"production": "llama3"}
    assert "the name 'llama3' is already a model" in caplog.text
    assert "skipping model config" not in caplog.text  # alias files are not broken model configs
