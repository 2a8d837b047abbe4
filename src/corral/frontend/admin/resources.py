"""Cluster-aware sizing: `GET /api/resources`, `GET /api/models`, `GET /api/models/variants/<id>`.

The aggregate and `ram*` fields report the frontend's own host (what the resource monitor shows);
the additive `cluster` object sizes against the largest single healthy backend node
(`placement.cluster_budget`). It is absent when no healthy backend node is registered (there is
nothing but this host to run on) or when the registry cannot be read; every verdict then falls
back to the local host.

Variants of a model are the model itself and every configured model declaring `variant_of: <id>`;
a variant may require a worker capability with `capability: <name>` (e.g. `nvidia`, `nvidia-cuda-12`;
empty, `cpu` or `default` run anywhere).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse

from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import envelope
from corral.frontend.state import FrontendState
from corral.models import capabilities as model_capabilities
from corral.models.aliases import resolve
from corral.models.config import ModelConfig
from corral.models.vram import estimate_vram_bytes
from corral.placement.cluster_budget import (
    ClusterBudget,
    NodeMemory,
    capabilities,
    cluster_budget,
    compatible,
    verdict,
)
from corral.placement.governance import governing_rule
from corral.placement.rules import SchedulingRule
from corral.store import cluster as cluster_store
from corral.store import scheduling as scheduling_store

log = logging.getLogger(__name__)

REGISTRY_READ_TIMEOUT_S = 3.0
MEMINFO = Path("/proc/meminfo")


def local_memory(meminfo: Path = MEMINFO) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        for line in meminfo.read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.split():
                values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    total = values.get("MemTotal", 0)
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return {"total": total, "available": available, "used": max(0, total - available)}


def local_fields() -> dict[str, Any]:
    """The frontend host's own memory, in the reference's `ram*` / `aggregate` shape."""
    ram = local_memory()
    percent = round(100.0 * ram["used"] / ram["total"], 1) if ram["total"] else 0.0
    return {
        "ram_total": ram["total"],
        "ram_available": ram["available"],
        "ram_used": ram["used"],
        "aggregate": {
            "total_memory": ram["total"],
            "used_memory": ram["used"],
            "free_memory": ram["available"],
            "usage_percent": percent,
            "gpu_count": 0,
        },
    }


def model_memory_bytes(cfg: ModelConfig) -> int:
    """Estimated memory a replica needs: weights + KV cache for a GGUF, else the checkpoint size; 0 if unknown."""
    try:
        return estimate_vram_bytes(cfg.model_file, cfg.context_size) or cfg.checkpoint_bytes()
    except OSError:
        return 0


async def read_registry(state: FrontendState) -> tuple[list[NodeMemory], list[SchedulingRule]] | None:
    """Healthy backend nodes and the rules, or None when the registry cannot be read."""
    try:
        async with asyncio.timeout(REGISTRY_READ_TIMEOUT_S):
            return await cluster_store.node_memory(state.pool), await scheduling_store.all_rules(state.pool)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
        log.warning("cannot read the node registry for model sizing (falling back to this host): %s", exc)
        return None


def _selector(state: FrontendState, cfg: ModelConfig, rules: list[SchedulingRule]) -> dict[str, str]:
    rule = governing_rule(cfg.name, rules, lambda name: resolve(name, set(state.configs), state.aliases))
    return {**cfg.node_selector, **(rule.node_selector if rule else {})}


def _model_entry(
    cfg: ModelConfig, need: int, budget: ClusterBudget | None, local_bytes: int
) -> dict[str, Any]:
    return {
        "name": cfg.name,
        "backend": cfg.backend,
        "capabilities": model_capabilities.listed(cfg),
        "memory_bytes": need,
        **verdict(need, budget, local_bytes),
    }


def build_resources_router(state: FrontendState) -> APIRouter:
    router = APIRouter()

    @router.get("/api/resources")
    async def resources() -> JSONResponse:
        fields = local_fields()
        body: dict[str, Any] = {
            "type": "ram",
            "available": True,
            "gpus": [],
            "ram": {
                "total": fields["ram_total"],
                "available": fields["ram_available"],
                "used": fields["ram_used"],
            },
            "aggregate": fields["aggregate"],
            "storage_size": await asyncio.to_thread(_storage_bytes, state),
            "reclaimer_enabled": False,
            "reclaimer_threshold": 0,
            "watchdog_interval": "",
        }
        registry = await read_registry(state)
        budget = cluster_budget(registry[0]) if registry else None
        if budget is not None:
            body["cluster"] = budget.as_json()
        return JSONResponse(body)

    @router.get("/api/models")
    async def models() -> JSONResponse:
        local = local_fields()
        registry = await read_registry(state)
        nodes, rules = registry if registry else ([], [])
        overall = cluster_budget(nodes)
        entries = []
        configs = sorted(state.configs.values(), key=lambda c: c.name)
        needs = await asyncio.to_thread(lambda: [model_memory_bytes(cfg) for cfg in configs])  # file reads
        for cfg, need in zip(configs, needs, strict=True):
            budget = cluster_budget(nodes, _selector(state, cfg, rules)) if overall else None
            entry = _model_entry(cfg, need, budget, local["ram_total"])
            if overall and budget is None:
                entry.update(fits=False, fits_on=None, verdict="no healthy node matches its node_selector")
            entries.append(entry)
        body: dict[str, Any] = {"models": entries, "aliases": dict(sorted(state.aliases.items())), **local}
        if overall is not None:
            body["cluster"] = overall.as_json()
        return JSONResponse(body)

    @router.get("/api/models/variants/{model_id:path}")
    async def variants(model_id: Annotated[str, PathParam(max_length=NAME_MAX)]) -> JSONResponse:
        target = resolve(model_id, set(state.configs), state.aliases).model or model_id
        found = [c for c in state.configs.values() if c.name == target or c.raw.get("variant_of") == target]
        if not found:
            return JSONResponse(
                envelope(
                    f"model {model_id!r} not found; GET /api/models lists the configured models",
                    "not_found_error",
                    404,
                    "model",
                ),
                status_code=404,
            )
        local = local_fields()
        registry = await read_registry(state)
        nodes = registry[0] if registry else []
        budget = cluster_budget(nodes)
        present = capabilities(nodes) if budget else {"cpu"}
        entries = []
        found.sort(key=lambda c: (c.name != target, c.name))
        sizes = await asyncio.to_thread(lambda: [model_memory_bytes(cfg) for cfg in found])  # file reads
        for cfg, size in zip(found, sizes, strict=True):
            needs = str(cfg.raw.get("capability") or "")
            entry = {
                **_model_entry(cfg, size, budget, local["ram_total"]),
                "capability": needs,
                "compatible": compatible(needs, present),
            }
            entries.append(entry)
        usable = [e for e in entries if e["compatible"] and e["fits"] is not False]
        best = max(
            usable,
            key=lambda e: (e["capability"] not in ("", "cpu", "default"), e["memory_bytes"]),
            default=None,
        )
        body: dict[str, Any] = {
            "model": target,
            "capabilities": sorted(present),
            "variants": entries,
            "recommended": best["name"] if best else None,
        }
        if budget is not None:
            body["cluster"] = budget.as_json()
        return JSONResponse(body)

    return router


def _storage_bytes(state: FrontendState) -> int:
    """Bytes of model files in the frontend's models directory."""
    roots = {cfg.models_dir for cfg in state.configs.values()}
    total = 0
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                try:
                    total += os.stat(os.path.join(folder, name)).st_size
                except OSError:
                    continue
    return total
