"""Declarative rules at boot (LOCALAI_MODEL_SCHEDULING_CONFIG / LOCALAI_MODEL_SCHEDULING): errors name the
source, the entry and the field."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from corral.config.errors import ConfigError
from corral.placement.rules import RuleSpec
from corral.replicas.scheduling_seed import declared_rules

SPEC_EXAMPLE = """\
# One replica on every GPU-labelled node (static spread, tracks join/leave):
- model_name: gpt-oss
  node_selector:
    tier: gpu
  replicas: all

# One replica on EVERY node in the cluster (no selector = all nodes):
- model_name: embeddings
  replicas: all

# Elastic on CPU nodes: always >=1, burst to capacity under load, 0 = no cap:
- model_name: whisper
  node_selector:
    tier: cpu
  min_replicas: 1
  max_replicas: 0
"""


def settings(path: str = "", inline: str = "") -> SimpleNamespace:
    return SimpleNamespace(model_scheduling_config=path, model_scheduling=inline)


def test_the_specification_example_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "scheduling.yaml"
    path.write_text(SPEC_EXAMPLE)
    specs = declared_rules(settings(str(path)))
    assert [(s.model_name, s.node_selector, s.spread_all, s.min_replicas, s.max_replicas) for s in specs] == [
        ("gpt-oss", {"tier": "gpu"}, True, 0, 0),
        ("embeddings", {}, True, 0, 0),
        ("whisper", {"tier": "cpu"}, False, 1, 0),
    ]


def test_inline_json_is_read_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("- model_name: a\n  min_replicas: 1\n")
    specs = declared_rules(
        settings(str(path), '[{"model_name":"b","replicas":"all","route_policy":"round_robin"}]')
    )
    assert specs[1] == RuleSpec(
        model_name="b",
        spread_all=True,
        route_policy="round_robin",
        balance_abs_threshold=0,
        balance_rel_threshold=0.0,
        min_prefix_match=0.0,
    )


@pytest.mark.parametrize(
    "inline, message",
    [
        (
            '[{"model_name":"whisper","max_replicas":0}]',
            "LOCALAI_MODEL_SCHEDULING entry 1 (model_name 'whisper'): field 'max_replicas': an entry with only "
            "max_replicas: 0 does nothing",
        ),
        (
            '[{"model_name":"a","min_replicas":1},{"model_name":"b","replicas":"all","min_replicas":2}]',
            "LOCALAI_MODEL_SCHEDULING entry 2 (model_name 'b'): field 'min_replicas': replicas: all",
        ),
        ('[{"replicas":"all"}]', "LOCALAI_MODEL_SCHEDULING entry 1: field 'model_name': is required"),
        ('{"model_name":"a"}', "LOCALAI_MODEL_SCHEDULING: expected a list of rules"),
        ("[{model_name: a}]", "LOCALAI_MODEL_SCHEDULING: not valid JSON"),
        (
            '[{"model_name":"a","min_replicas":1},{"model_name":"a","replicas":"all"}]',
            "model_name 'a' is listed twice",
        ),
    ],
)
def test_a_mistake_names_the_entry_and_the_field(inline: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        declared_rules(settings(inline=inline))
    assert message in str(caught.value)


def test_an_unreadable_or_malformed_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"LOCALAI_MODEL_SCHEDULING_CONFIG \(.*missing.yaml\): cannot read"):
        declared_rules(settings(str(tmp_path / "missing.yaml")))
    bad = tmp_path / "bad.yaml"
    bad.write_text("- model_name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        declared_rules(settings(str(bad)))


def test_nothing_declared_means_no_rules() -> None:
    assert declared_rules(settings()) == []
