"""The config revision a load runs under: refuse a stale one, and rebuild the current config to redo it.

A load that started (or finished) under a revision an edit has replaced is not failed to its
waiters: the job re-reads the current configuration from PostgreSQL and loads again (bounded).
"""

from __future__ import annotations

import yaml

from corral.loading.context import LoadContext
from corral.loading.errors import LoadError, StaleRevision
from corral.models.config import ModelConfig, ModelConfigError, parse_model_config
from corral.store import revisions

MAX_REVISION_ATTEMPTS = 3  # an edit storm cannot keep one job loading forever


async def check_revision(ctx: LoadContext, cfg: ModelConfig, *, quarantine: bool = False) -> None:
    """Establish the model's revision on first sight; raise StaleRevision when another one is current.

    `quarantine`: re-assert the current revision first, so a replica just recorded under the old one
    leaves routing at once (it is never routed to; the load's cleanup stops it). That check comes after a load
    whose start established the revision already, so it only reads (one round trip less on a cold start).
    """
    if not cfg.revision:
        return
    if not quarantine:
        await revisions.establish(ctx.pool, cfg.name, cfg.revision, yaml.safe_dump(cfg.raw, sort_keys=False))
    state = await revisions.get(ctx.pool, cfg.name)
    if state is None or state["config_revision"] == cfg.revision:
        return
    if quarantine:
        await revisions.advance(ctx.pool, cfg.name, state["config_revision"], state["config_yaml"])
    raise StaleRevision(
        f"loading model {cfg.name}: its configuration changed (revision {cfg.revision[:12]} is "
        f"stale, current {state['config_revision'][:12]})",
        state["config_revision"],
        state["config_yaml"] or "",
    )


async def still_current(ctx: LoadContext, cfg: ModelConfig) -> StaleRevision | None:
    """After a failed attempt: the StaleRevision to redo with when an edit caused (or overtook) it."""
    try:
        await check_revision(ctx, cfg)
    except StaleRevision as stale:
        return stale
    return None


def current_config(cfg: ModelConfig, stale: StaleRevision) -> ModelConfig:
    """The model's current configuration, rebuilt from the YAML PostgreSQL holds for its revision."""
    if not stale.current_yaml:
        raise LoadError(f"loading model {cfg.name}: the model was removed while it loaded")
    source = cfg.source or cfg.models_dir / f"{cfg.name}.yaml"
    try:
        fresh = parse_model_config(
            yaml.safe_load(stale.current_yaml), source, cfg.models_dir, cfg.extra_roots
        )
    except (ModelConfigError, yaml.YAMLError) as exc:
        raise LoadError(
            f"loading model {cfg.name}: its current configuration does not parse: {exc}"
        ) from None
    if fresh.disabled:
        raise LoadError(f"loading model {cfg.name}: the model was disabled while it loaded")
    return fresh
