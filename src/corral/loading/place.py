"""Place a model: snapshot → placement pipeline → backend.install on the best node that answers.

A node that gives NATS "no responders" is demoted to unhealthy and the next-ranked node is
tried; a slow answer is not absence (it is an install timeout, reported as such).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import BackendInstallReply, BackendInstallRequest
from corral.loading.errors import InstallFailed
from corral.models.aliases import resolve
from corral.models.config import ModelConfig
from corral.models.vram import estimate_vram_bytes_off_loop
from corral.placement.governance import governing_rule
from corral.placement.pipeline import Decision, decide
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot
from corral.store import placement as placement_store
from corral.store import scheduling as scheduling_store
from corral.store import settings as settings_store

log = logging.getLogger(__name__)

DISK_CHECK_SETTING = "distributed_disk_headroom_check"


@dataclass(frozen=True)
class Placed:
    node: NodeSnapshot
    replica_index: int
    address: str
    reserved_vram: int


async def effective_selector(ctx, cfg: ModelConfig) -> dict[str, str]:  # noqa: ANN001 - LoadContext (cycle)
    """The model YAML's node_selector merged with its scheduling rule's; the rule wins on a shared key."""
    rules = await scheduling_store.all_rules(ctx.pool)
    aliases = getattr(ctx, "aliases", {})
    rule = governing_rule(cfg.name, rules, lambda name: resolve(name, None, aliases))
    return {**cfg.node_selector, **(rule.node_selector if rule else {})}


async def placement_request(ctx, cfg: ModelConfig) -> PlacementRequest:  # noqa: ANN001 - LoadContext (cycle)
    return PlacementRequest(
        model=cfg.name, disk_bytes=cfg.checkpoint_bytes(),
        vram_bytes=await estimate_vram_bytes_off_loop(cfg.model_file, cfg.context_size),
        selector=await effective_selector(ctx, cfg),
        disk_check=bool(await settings_store.get(ctx.pool, DISK_CHECK_SETTING, True)),
        shared_models=bool(getattr(ctx.staging, "shared_models", False)),
    )


async def plan(ctx, cfg: ModelConfig) -> Decision:  # noqa: ANN001
    return decide(await placement_request(ctx, cfg), await placement_store.snapshot(ctx.pool))


async def _install(ctx, node: NodeSnapshot, cfg: ModelConfig, replica_index: int) -> str:  # noqa: ANN001
    request = BackendInstallRequest(backend=cfg.backend, model_id=cfg.name, replica_index=replica_index)
    reply = await bus.request(ctx.nc, subjects.backend_install(node.id), request, BackendInstallReply,
                              ctx.install_timeout_s, "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT")
    if not reply.success:
        raise InstallFailed(f"loading model {cfg.name}: worker {node.name} replied with error: {reply.error}")
    return reply.address or node.address


async def place_and_install(ctx, cfg: ModelConfig, decision: Decision) -> Placed:  # noqa: ANN001
    """Install on the best-ranked node that is on the bus; demote the ones that are not."""
    for node in decision.ranked:
        replica_index = node.free_replica_index(cfg.name) or 0
        reserved = decision.request.vram_bytes
        if not await placement_store.reserve_vram(ctx.pool, node.id, reserved):
            reserved = 0
        try:
            address = await _install(ctx, node, cfg, replica_index)
        except bus.NoResponders:
            await placement_store.release_vram(ctx.pool, node.id, reserved)
            log.warning("Scheduled node is not answering on the bus: node=%s id=%s; marking it unhealthy and "
                        "trying the next node", node.name, node.id)
            await placement_store.mark_unhealthy(ctx.pool, node.id)
            continue
        except bus.BusError as exc:
            await placement_store.release_vram(ctx.pool, node.id, reserved)
            raise InstallFailed(f"loading model {cfg.name}: node {node.name}: {exc}") from None
        except BaseException:
            await placement_store.release_vram(ctx.pool, node.id, reserved)
            raise
        return Placed(node=node, replica_index=replica_index, address=address, reserved_vram=reserved)
    names = ", ".join(n.name for n in decision.ranked)
    raise InstallFailed(f"loading model {cfg.name}: no scheduled node answers on the bus ({names}); "
                        "check the workers' NATS connection (--nats-url)")
