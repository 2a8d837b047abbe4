"""Place a model: snapshot → placement pipeline → a node (freed by eviction when nothing has room) → install.

A node that gives NATS "no responders" is demoted to unhealthy; a slow install answer is not
absence (no demotion), but both move the load to the next eligible node (cold_load.py).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from opentelemetry.trace import SpanKind

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import BackendInstallReply, BackendInstallRequest
from corral.loading.context import LoadContext
from corral.loading.errors import InstallFailed, NodeLost
from corral.models.aliases import resolve
from corral.models.config import ModelConfig
from corral.models.vram import estimate_vram_bytes_off_loop
from corral.placement.governance import governing_rule
from corral.placement.pipeline import Decision
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot
from corral.store import placement as placement_store
from corral.store import scheduling as scheduling_store
from corral.store import settings as settings_store
from corral.telemetry import tracing

log = logging.getLogger(__name__)

DISK_CHECK_SETTING = "distributed_disk_headroom_check"
INSTALL_TIMEOUT_KNOB = "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT"


async def effective_selector(ctx: LoadContext, cfg: ModelConfig) -> dict[str, str]:
    """The model YAML's node_selector merged with its scheduling rule's; the rule wins on a shared key."""
    rules = await scheduling_store.all_rules(ctx.pool)
    rule = governing_rule(cfg.name, rules, lambda name: resolve(name, None, ctx.aliases))
    return {**cfg.node_selector, **(rule.node_selector if rule else {})}


async def placement_request(ctx: LoadContext, cfg: ModelConfig) -> PlacementRequest:
    return PlacementRequest(
        model=cfg.name, disk_bytes=cfg.checkpoint_bytes(),
        vram_bytes=await estimate_vram_bytes_off_loop(cfg.model_file, cfg.context_size),
        selector=await effective_selector(ctx, cfg),
        disk_check=bool(await settings_store.get(ctx.pool, DISK_CHECK_SETTING, True)),
        shared_models=ctx.staging.shared_models,
    )


async def plan(ctx: LoadContext, cfg: ModelConfig, excluded: Collection[str] = ()) -> Decision:
    """The placement decision over every healthy approved node but `excluded` (ids already tried)."""
    return await ctx.fleet.decide(ctx.pool, await placement_request(ctx, cfg), excluded)


async def choose_node(ctx: LoadContext, cfg: ModelConfig, excluded: Collection[str] = ()) -> tuple[NodeSnapshot, int]:
    """The node to load on and the VRAM to reserve there; eviction frees one when nothing has room."""
    decision = await plan(ctx, cfg, excluded)
    if decision.needs_eviction and ctx.evictor is not None:
        return await ctx.evictor.make_room(decision), decision.request.vram_bytes
    return decision.node, decision.request.vram_bytes


async def install(ctx: LoadContext, node: NodeSnapshot, cfg: ModelConfig, replica_index: int) -> str:
    """Start the backend process on `node`; its address. NodeLost when the node does not answer."""
    request = BackendInstallRequest(backend=cfg.backend, model_id=cfg.name, replica_index=replica_index)
    try:
        with tracing.span("corral.install", {"corral.node": node.name}, kind=SpanKind.CLIENT):
            reply = await bus.request(ctx.nc, subjects.backend_install(node.id), request, BackendInstallReply,
                                      ctx.install_timeout_s, INSTALL_TIMEOUT_KNOB, headers=tracing.headers())
    except bus.NoResponders:
        log.warning("Scheduled node is not answering on the bus: node=%s id=%s; marking it unhealthy and "
                    "trying the next node", node.name, node.id)
        await placement_store.mark_unhealthy(ctx.pool, node.id)
        raise NodeLost(node.name, "not answering on the bus (NATS no responders); marked unhealthy") from None
    except bus.BusError as exc:
        raise NodeLost(node.name, f"backend install: {exc}") from None
    if not reply.success:
        raise InstallFailed(f"loading model {cfg.name}: worker {node.name} replied with error: {reply.error}")
    return reply.address or node.address
