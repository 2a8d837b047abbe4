"""One cold load: revision → node → attempt, moving to the next node when one stops answering.

* A node that stops answering (NATS no responders, install timeout, staging stall, LoadModel
  UNAVAILABLE) costs one attempt: the next eligible node is tried before any waiter sees a failure,
  at most MAX_NODES_TRIED nodes; the final error names each node tried and why.
* A load refused or finished under a stale config revision is redone under the current one
  (the job re-reads it from PostgreSQL), at most MAX_REVISION_ATTEMPTS times.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from corral.loading import replay
from corral.loading.attempt import load_on_node, model_options, reclaim_leftovers
from corral.loading.context import LoadContext, LoadedReplica
from corral.loading.errors import LoadError, NodeLost, StaleRevision
from corral.loading.job_placement import choose_node
from corral.loading.job_progress import PENDING, LoadProgress
from corral.loading.job_revision import MAX_REVISION_ATTEMPTS, check_revision, current_config, still_current
from corral.models.config import ModelConfig
from corral.placement.errors import PlacementError
from corral.placement.snapshot import NodeSnapshot
from corral.telemetry import tracing

__all__ = ["MAX_NODES_TRIED", "cold_load", "model_options", "nodes_exhausted"]

log = logging.getLogger(__name__)

MAX_NODES_TRIED = 3


def nodes_exhausted(model: str, tried: list[NodeLost], last: str) -> str:
    """The error once no further node can take the load: every node tried and why, then what stopped it."""
    nodes = "; ".join(f"{lost.node_name}: {lost.why}" for lost in tried)
    return f"loading model {model}: {len(tried)} node(s) stopped answering ({nodes}); {last}"


async def _attempt(
    ctx: LoadContext, cfg: ModelConfig, node: NodeSnapshot, vram_bytes: int, progress: LoadProgress
) -> LoadedReplica:
    """One node attempt as its own task, so the hold can abandon this node (not the load) on a stall."""
    task = asyncio.create_task(load_on_node(ctx, cfg, node, vram_bytes, progress), name=f"attempt:{cfg.name}")
    abandoned: list[str] = []

    def abandon(reason: str) -> bool:
        if task.done() or abandoned:
            return False
        abandoned.append(reason)
        task.cancel()
        return True

    progress.abandon = abandon
    try:
        return await task
    except asyncio.CancelledError:
        if abandoned and not _cancelling():
            raise NodeLost(node.name, abandoned[0]) from None
        raise
    finally:
        progress.abandon = None


def _cancelling() -> bool:
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


async def _load_revision(
    ctx: LoadContext, cfg: ModelConfig, progress: LoadProgress, *, checked: bool = False
) -> LoadedReplica:
    """Load `cfg` on the first node that answers; `checked`: its revision was just checked (the first round)."""
    if not checked:
        await check_revision(ctx, cfg)
    tried: list[NodeLost] = []
    while True:
        progress.phase(PENDING)
        try:
            with tracing.span("corral.placement", {"corral.model": cfg.name}):
                node, vram_bytes = await choose_node(ctx, cfg, excluded={lost.node_id for lost in tried})
        except PlacementError as exc:
            if not tried:
                raise
            raise LoadError(nodes_exhausted(cfg.name, tried, f"no other node can take it: {exc}")) from None
        try:
            return await _attempt(ctx, cfg, node, vram_bytes, progress)
        except NodeLost as lost:
            stale = await still_current(ctx, cfg)
            if stale is not None:
                raise stale from lost
            tried.append(NodeLost(lost.node_name, lost.why, node.id))
            log.warning("loading %s: %s; trying the next eligible node", cfg.name, lost)
            if len(tried) >= MAX_NODES_TRIED:
                raise LoadError(
                    nodes_exhausted(cfg.name, tried, f"gave up after {MAX_NODES_TRIED} nodes")
                ) from None
        except LoadError as exc:
            stale = await still_current(ctx, cfg)
            if stale is not None and not isinstance(exc, StaleRevision):
                raise stale from exc
            raise


async def _all(*steps: Awaitable[None]) -> None:
    """Run `steps` at once and wait for every one (none is left running); raise the first failure."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def cold_load(
    ctx: LoadContext, cfg: ModelConfig, progress: LoadProgress | None = None
) -> LoadedReplica:
    progress = progress or LoadProgress()
    # a dead owner's leftovers and the revision are independent reads: one round trip's wait, not two
    try:
        await _all(reclaim_leftovers(ctx, cfg.name), check_revision(ctx, cfg))
        stale: StaleRevision | None = None
    except StaleRevision as first:
        stale = first
    attempt = 1
    while True:
        if stale is not None:
            cfg, attempt = _next_revision(cfg, stale, attempt), attempt + 1
        try:
            loaded = await _load_revision(ctx, cfg, progress, checked=attempt == 1)
            break
        except StaleRevision as again:
            stale = again
    await replay.record(ctx.pool, cfg, model_options(cfg))  # the reconciler can load it again from this alone
    return loaded


def _next_revision(cfg: ModelConfig, stale: StaleRevision, attempt: int) -> ModelConfig:
    """The current config to load after attempt `attempt` met a stale revision (LoadError past the bound)."""
    if attempt >= MAX_REVISION_ATTEMPTS:
        raise LoadError(
            f"{stale}; the configuration changed {attempt} times during this load, retry the request"
        ) from None
    fresh = current_config(cfg, stale)
    log.info(
        "loading %s again under its current revision %s (attempt %d of %d)",
        fresh.name,
        fresh.revision[:12],
        attempt + 1,
        MAX_REVISION_ATTEMPTS,
    )
    return fresh
