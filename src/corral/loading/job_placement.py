"""Place a model: snapshot → placement pipeline → a node (freed by eviction when nothing has room) → install.

A node that gives NATS "no responders" (still, after a few short retries: a worker subscribes its subjects
just after registering) is demoted to unhealthy; a slow install answer is not
absence (no demotion), but both move the load to the next eligible node (cold_load.py) — unless
the worker reported install progress within the install timeout: then it is busy installing the
backend, the load shows "worker busy" and asks again (the worker joins its install in flight);
the cold-load hold still bounds the whole wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass

from nats.aio.msg import Msg
from opentelemetry.trace import SpanKind

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import BackendInstallReply, BackendInstallRequest, LoadDefaults
from corral.loading.context import LoadContext
from corral.loading.errors import InstallFailed, NodeLost
from corral.loading.job_progress import LoadProgress
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
NO_RESPONDERS_RETRY_S = (0.2, 0.5, 1.0)  # asked again after these pauses before a node counts as absent
INSTALL_TIMEOUT_KNOB = "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT"
BUSY_WINDOW_MIN_S = 30.0  # install progress this recent means the worker is busy installing, not gone


async def effective_selector(ctx: LoadContext, cfg: ModelConfig) -> dict[str, str]:
    """The model YAML's node_selector merged with its scheduling rule's; the rule wins on a shared key."""
    rules = await scheduling_store.all_rules(ctx.pool)
    rule = governing_rule(cfg.name, rules, lambda name: resolve(name, None, ctx.aliases))
    return {**cfg.node_selector, **(rule.node_selector if rule else {})}


async def placement_request(ctx: LoadContext, cfg: ModelConfig) -> PlacementRequest:
    # three independent reads (a file header off the loop, two queries) at once: a cold start waits for the slowest
    vram = asyncio.ensure_future(estimate_vram_bytes_off_loop(cfg.model_file, cfg.context_size))
    selector = asyncio.ensure_future(effective_selector(ctx, cfg))
    disk_check = asyncio.ensure_future(settings_store.get(ctx.pool, DISK_CHECK_SETTING, True))
    try:
        await asyncio.wait((vram, selector, disk_check))  # each to its end, whichever fails
    finally:
        for read in (vram, selector, disk_check):
            read.cancel()  # only when this load itself was cancelled meanwhile
    return PlacementRequest(
        model=cfg.name,
        disk_bytes=cfg.checkpoint_bytes(),
        vram_bytes=vram.result(),
        selector=selector.result(),
        disk_check=bool(disk_check.result()),
        shared_models=ctx.staging.shared_models,
    )


async def plan(ctx: LoadContext, cfg: ModelConfig, excluded: Collection[str] = ()) -> Decision:
    """The placement decision over every healthy approved node but `excluded` (ids already tried)."""
    return await ctx.fleet.decide(ctx.pool, await placement_request(ctx, cfg), excluded)


async def choose_node(
    ctx: LoadContext, cfg: ModelConfig, excluded: Collection[str] = ()
) -> tuple[NodeSnapshot, int]:
    """The node to load on and the VRAM to reserve there; eviction frees one when nothing has room."""
    decision = await plan(ctx, cfg, excluded)
    if decision.needs_eviction and ctx.evictor is not None:
        return await ctx.evictor.make_room(decision), decision.request.vram_bytes
    return decision.node, decision.request.vram_bytes


EVENT_TEXT_MAX_CHARS = 256  # a worker's progress strings go into the job row and every 503 body


def _shown(event: dict[str, object]) -> dict[str, object]:
    """The fields of a progress event the `loading` object shows, bounded: text cut, percentage 0..100."""
    shown: dict[str, object] = {}
    for key in ("phase", "file_name", "current", "total"):
        if isinstance(event.get(key), str):
            shown[key] = str(event[key])[:EVENT_TEXT_MAX_CHARS]
    percentage = event.get("percentage")
    if isinstance(percentage, int | float) and not isinstance(percentage, bool):
        shown["percentage"] = max(0.0, min(100.0, float(percentage)))
    return shown


class InstallEvents:
    """Install progress events of one op from the bus: shown in the load's progress, never ending a wait."""

    def __init__(self, progress: LoadProgress | None) -> None:
        self.progress = progress
        self.last_heard_s: float | None = None

    async def on_msg(self, msg: Msg) -> None:
        try:
            event = json.loads(msg.data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        self.last_heard_s = time.monotonic()
        if self.progress is not None:
            self.progress.on_install(_shown(event))

    def heard_within(self, window_s: float) -> bool:
        return self.last_heard_s is not None and time.monotonic() - self.last_heard_s <= window_s


@dataclass(frozen=True)
class Installed:
    """A started backend process: where it listens, and the LoadModel defaults of its node."""

    address: str
    load_defaults: LoadDefaults | None = None


async def install(
    ctx: LoadContext,
    node: NodeSnapshot,
    cfg: ModelConfig,
    replica_index: int,
    progress: LoadProgress | None = None,
) -> Installed:
    """Start the backend process on `node` (installing the backend there first if it is missing). NodeLost
    when the node does not answer; InstallFailed with the worker's error otherwise."""
    op_id = uuid.uuid4().hex
    request = BackendInstallRequest(
        backend=cfg.backend, model_id=cfg.name, replica_index=replica_index, op_id=op_id
    )
    events = InstallEvents(progress)
    # No flush before asking: the server handles this connection's SUB before its request, so the subscription is
    # in place before the worker can hear of the install (a flush would cost a round trip on every cold start).
    sub = await ctx.nc.subscribe(subjects.backend_install_progress(node.id, op_id), cb=events.on_msg)
    try:
        with tracing.span("corral.install", {"corral.node": node.name}, kind=SpanKind.CLIENT):
            reply = await _ask_until_answered(ctx, node, request, events, progress)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        if progress is not None and progress.worker_busy:
            progress.on_worker_busy(False)
    if not reply.success:
        raise InstallFailed(f"loading model {cfg.name}: worker {node.name} replied with error: {reply.error}")
    return Installed(reply.address or node.address, reply.load_defaults)


async def _ask_until_answered(
    ctx: LoadContext,
    node: NodeSnapshot,
    request: BackendInstallRequest,
    events: InstallEvents,
    progress: LoadProgress | None,
) -> BackendInstallReply:
    absent = 0
    while True:
        try:
            return await bus.request(
                ctx.nc,
                subjects.backend_install(node.id),
                request,
                BackendInstallReply,
                ctx.install_timeout_s,
                INSTALL_TIMEOUT_KNOB,
                headers=tracing.headers(),
            )
        except bus.NoResponders:
            if absent < len(NO_RESPONDERS_RETRY_S):  # a worker subscribes just after registering; a reconnect
                await asyncio.sleep(
                    NO_RESPONDERS_RETRY_S[absent]
                )  # blips: absence must last before it counts
                absent += 1
                continue
            log.warning(
                "Scheduled node is not answering on the bus: node=%s id=%s; marking it unhealthy and "
                "trying the next node",
                node.name,
                node.id,
            )
            await placement_store.mark_unhealthy(ctx.pool, node.id)
            raise NodeLost(
                node.name, "not answering on the bus (NATS no responders); marked unhealthy"
            ) from None
        except bus.RequestTimeout as exc:
            if not events.heard_within(max(ctx.install_timeout_s, BUSY_WINDOW_MIN_S)):
                raise NodeLost(node.name, f"backend install: {exc}") from None
            log.info(
                "worker %s is still installing backend %s for %s (no reply within %gs, progress seen); "
                "worker busy, asking again",
                node.name,
                request.backend,
                request.model_id,
                ctx.install_timeout_s,
            )
            if progress is not None:
                progress.on_worker_busy(True)
        except bus.BusError as exc:
            raise NodeLost(node.name, f"backend install: {exc}") from None
