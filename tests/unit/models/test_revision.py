from __future__ import annotations

from pathlib import Path

import yaml

from corral.models.config import parse_model_config
from corral.models.revision import config_revision

A = """
# the chat model
name: m
backend: simulator
context_size: 2048
parameters: {model: m.gguf, seed: 3}
"""
B = """
parameters:
  seed: 3
  model: m.gguf     # same values, other order and layout
backend: simulator
name: m
context_size: 2048
"""


def test_formatting_comments_and_order_do_not_change_the_revision() -> None:
    assert config_revision(yaml.safe_load(A)) == config_revision(yaml.safe_load(B))


def test_a_semantic_change_changes_the_revision() -> None:
    changed = {**yaml.safe_load(A), "context_size": 4096}
    assert config_revision(changed) != config_revision(yaml.safe_load(A))


def test_parsed_configs_carry_their_revision(tmp_path: Path) -> None:
    cfg = parse_model_config(yaml.safe_load(A), tmp_path / "m.yaml", tmp_path)
    assert cfg.revision == config_revision(yaml.safe_load(B)) and len(cfg.revision) == 64
