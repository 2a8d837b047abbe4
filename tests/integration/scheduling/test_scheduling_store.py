"""Rules, replay info and the placement selector against a real PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import asyncpg

from corral.loading.context import LoadContext
from corral.loading.job_nodes import model_options
from corral.loading.job_placement import effective_selector
from corral.loading.replay import config_from_replay, record, replay_config
from corral.models.artifacts import ArtifactPaths
from corral.models.config import ModelConfig
from corral.placement.rules import RuleSpec
from corral.store import load_infos
from corral.store import scheduling as scheduling_store


def _config(name: str, models_dir: Path, **fields: object) -> ModelConfig:
    return ModelConfig(name=name, backend="simulator", model="weights.gguf", models_dir=models_dir, **fields)  # type: ignore[arg-type]


async def test_declarative_seeding_replaces_listed_rules_whole_and_leaves_others(pool: asyncpg.Pool) -> None:
    await scheduling_store.upsert(
        pool, RuleSpec("listed", min_replicas=4, route_policy="prefix_cache", min_prefix_match=0.7)
    )
    await scheduling_store.upsert(pool, RuleSpec("unlisted", max_replicas=2, route_policy="round_robin"))
    before = await scheduling_store.get(pool, "listed")
    await scheduling_store.seed(
        pool,
        [
            RuleSpec(
                "listed",
                spread_all=True,
                route_policy="",
                balance_abs_threshold=0,
                balance_rel_threshold=0.0,
                min_prefix_match=0.0,
            )
        ],
    )
    listed, unlisted = (
        await scheduling_store.get(pool, "listed"),
        await scheduling_store.get(pool, "unlisted"),
    )
    assert listed is not None and before is not None and unlisted is not None
    assert (listed.spread_all, listed.min_replicas, listed.route_policy, listed.min_prefix_match) == (
        True,
        0,
        "",
        0.0,
    )  # the API-set overrides are reset: the config is authoritative
    assert listed.declared and listed.created_s == before.created_s  # still the same (oldest) rule
    assert (unlisted.max_replicas, unlisted.route_policy, unlisted.declared) == (2, "round_robin", False)


async def test_a_rule_cools_down_after_three_unsatisfiable_passes(pool: asyncpg.Pool) -> None:
    await scheduling_store.upsert(pool, RuleSpec("m", min_replicas=1))
    ticks = [await scheduling_store.unsatisfied(pool, "m", "no room", "fp", 300.0) for _ in range(3)]
    assert ticks == [1, 2, 3]
    rule = await scheduling_store.get(pool, "m")
    assert (
        rule is not None and rule.unsatisfiable_until_s is not None and rule.unsatisfiable_fingerprint == "fp"
    )
    await scheduling_store.satisfied(pool, "m")
    rule = await scheduling_store.get(pool, "m")
    assert rule is not None and (
        rule.unsatisfiable_ticks,
        rule.unsatisfiable_until_s,
        rule.unsatisfiable_reason,
    ) == (0, None, "")


async def test_replay_info_rebuilds_the_config_it_was_recorded_from(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    (tmp_path / "weights.gguf").write_bytes(b"x" * 10)
    (tmp_path / "proj.gguf").write_bytes(b"y")
    cfg = _config(
        "m",
        tmp_path,
        context_size=512,
        options=("load_time_s:0.1",),
        revision="rev-1",
        artifacts=ArtifactPaths((("MMProj", "proj.gguf"),), ("lora.bin",)),
    )
    await record(pool, cfg, model_options(cfg))
    replayed = await replay_config(pool, "m")
    assert replayed is not None
    assert (replayed.name, replayed.backend, replayed.context_size, replayed.options) == (
        "m",
        "simulator",
        512,
        ("load_time_s:0.1",),
    )
    assert replayed.model_file == tmp_path / "weights.gguf" and replayed.checkpoint_bytes() == 11
    assert replayed.artifacts == cfg.artifacts
    assert replayed.revision == ""  # no revision established yet: none is claimed


async def test_replay_info_of_an_older_revision_is_not_used(pool: asyncpg.Pool, tmp_path: Path) -> None:
    cfg = _config("m", tmp_path, revision="rev-1")
    await record(pool, cfg, model_options(cfg))
    await pool.execute("INSERT INTO model_config_states (model_name, config_revision) VALUES ('m', 'rev-1')")
    info = await load_infos.replayable(pool, "m")
    assert info is not None and config_from_replay(info).revision == "rev-1"
    await pool.execute("UPDATE model_config_states SET config_revision = 'rev-2'")
    assert await replay_config(pool, "m") is None


async def test_placement_applies_the_governing_rule_selector_over_the_model_yaml(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    cfg = _config("llama3", tmp_path, node_selector={"zone": "us-east", "tier": "cpu"})
    aliases = {"production": "llama3"}
    ctx = cast(
        LoadContext, SimpleNamespace(pool=pool, aliases=aliases)
    )  # the fields effective_selector reads
    assert await effective_selector(ctx, cfg) == {"zone": "us-east", "tier": "cpu"}
    await scheduling_store.upsert(pool, RuleSpec("production", node_selector={"tier": "gpu"}, min_replicas=1))
    assert await effective_selector(ctx, cfg) == {"zone": "us-east", "tier": "gpu"}  # the rule wins on a key
    aliases["production"] = "llama4"  # repointed: the rule follows the alias
    assert await effective_selector(ctx, cfg) == {"zone": "us-east", "tier": "cpu"}
