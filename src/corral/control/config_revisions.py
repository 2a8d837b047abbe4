"""Model config edits and their revision lifecycle, across frontends.

An edit is validated, written to the models directory, made current in PostgreSQL (which
quarantines every replica of another revision as `unloading`), announced on NATS
(`cache.invalidate.models`) and acknowledged by every live frontend before the edit's response
returns — so from then on no frontend routes to an old replica. Old replicas get an acknowledged
exact stop from the cleanup loop, retried with durable backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import yaml
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.models.config import ModelConfig, ModelConfigError, parse_model_config
from corral.routing.router import Router
from corral.store import revisions

log = logging.getLogger(__name__)

SUBJECT = "cache.invalidate.models"
ACK_TIMEOUT_S = 10.0
TOMBSTONE_PREFIX = "removed-"


def dump_yaml(raw: dict[str, Any]) -> str:
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


class ConfigRevisions:
    def __init__(self, pool: asyncpg.Pool, nc: Client, router: Router, configs: dict[str, ModelConfig],
                 models_dir: Path, aliases: dict[str, str] | None = None) -> None:
        self.pool, self.nc, self.router, self.configs, self.models_dir = pool, nc, router, configs, models_dir
        self.aliases = aliases if aliases is not None else {}  # shared in place with routing and the reconciler
        self.cleanup_kick: Callable[[], Awaitable[None]] | None = None

    async def start(self) -> None:
        await self.nc.subscribe(SUBJECT, cb=self._on_event)
        await self.reconcile_at_startup()

    # ---- files --------------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        cfg = self.configs.get(name)
        return cfg.source if cfg is not None and cfg.source is not None else self.models_dir / f"{name}.yaml"

    def _write(self, path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def _adopt(self, name: str, yaml_text: str) -> None:
        """Take the cluster's current config of `name` (edited elsewhere) as ours, on disk too."""
        path = self._path(name)
        cfg = parse_model_config(yaml.safe_load(yaml_text), path, self.models_dir)
        self._write(path, yaml_text)
        self.configs[name] = cfg
        log.info("adopted the cluster's configuration of %s (revision %s)", name, cfg.revision[:12])

    # ---- startup ------------------------------------------------------------------------------

    async def reconcile_at_startup(self) -> None:
        """Stored revision vs. config on disk: the newer one wins; only drifted models are republished."""
        states = await revisions.all_states(self.pool)
        for name, cfg in list(self.configs.items()):
            state = states.get(name)
            if state is None:
                await revisions.establish(self.pool, name, cfg.revision, dump_yaml(cfg.raw))
            elif state["config_revision"] != cfg.revision:
                mtime_s = cfg.source.stat().st_mtime if cfg.source and cfg.source.exists() else 0.0
                if state["updated_s"] > mtime_s and state["config_yaml"]:
                    self._adopt(name, state["config_yaml"])
                else:
                    await self._advance_and_announce(name, cfg)
        for name, state in states.items():
            if name not in self.configs and state["config_yaml"] and not state["config_revision"].startswith(
                    TOMBSTONE_PREFIX):
                self._adopt(name, state["config_yaml"])

    # ---- edits --------------------------------------------------------------------------------

    async def apply(self, name: str, raw: dict[str, Any]) -> tuple[ModelConfig, int]:
        """Validate (ModelConfigError), persist and make current; returns (config, pending_cleanup)."""
        path = self._path(name)
        cfg = parse_model_config(raw, path, self.models_dir)
        self._write(path, dump_yaml(raw))
        self.configs[name] = cfg
        await self._advance_and_announce(name, cfg)
        return cfg, await revisions.pending_cleanup(self.pool, name)

    async def set_alias(self, name: str, target: str) -> None:
        """Point alias `name` at model `target` (a scheduling rule keyed by the alias follows it)."""
        if name in self.configs:
            raise ModelConfigError(f"{name!r} is a model, not an alias; choose another alias name")
        if target not in self.configs:
            raise ModelConfigError(f"field 'alias': {target!r} is not a configured model (aliases point at models)")
        self._write(self.models_dir / f"{name}.yaml", dump_yaml({"name": name, "alias": target}))
        self.aliases[name] = target
        await self._announce(name, "alias", target)
        log.info("alias %s now points at %s", name, target)

    async def remove(self, name: str) -> int:
        """Retire a model name (rename's old name): its replicas stop, peers forget the config."""
        path = self._path(name)
        self.configs.pop(name, None)
        if path.exists():
            path.unlink()
        rows = await revisions.advance(self.pool, name, f"{TOMBSTONE_PREFIX}{uuid.uuid4().hex}", "")
        await self._announce(name, "delete", "")
        await self._kick()
        log.info("retired model %s: %d replica(s) to stop", name, len(rows))
        return await revisions.pending_cleanup(self.pool, name)

    async def _advance_and_announce(self, name: str, cfg: ModelConfig) -> None:
        rows = await revisions.advance(self.pool, name, cfg.revision, dump_yaml(cfg.raw))
        self._drop_view(name)
        await self._announce(name, "edit", cfg.revision)
        await self._kick()
        log.info("model %s is at revision %s; %d old replica(s) to stop", name, cfg.revision[:12], len(rows))

    async def _kick(self) -> None:
        if self.cleanup_kick is not None:
            await self.cleanup_kick()

    def _drop_view(self, name: str) -> None:
        for replica in [r for r in self.router.view.all() if r.model == name]:
            self.router.view.remove(replica)

    async def _announce(self, name: str, op: str, revision: str) -> None:
        mark = uuid.uuid4().hex
        self.router.inflight.acks.add(mark)
        body = {"element": name, "op": op, "config_revision": revision, "mark": mark}
        await self.nc.publish(SUBJECT, json.dumps(body).encode())
        await self._wait_acks(mark)

    async def _wait_acks(self, mark: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ACK_TIMEOUT_S
        await asyncio.sleep(self.router.inflight.interval_s * 1.5)
        while not self.router.inflight.all_acked(mark):
            if loop.time() >= deadline:
                log.warning("not every frontend acknowledged the config change within %.0fs", ACK_TIMEOUT_S)
                return
            await asyncio.sleep(0.05)

    async def _on_event(self, msg: Msg) -> None:
        try:
            body = json.loads(msg.data)
            name, mark = str(body["element"]), str(body.get("mark") or "")
        except (ValueError, KeyError, TypeError):
            return
        if mark in self.router.inflight.acks:
            return  # our own announcement
        try:
            if body.get("op") == "alias":
                target = str(body.get("config_revision") or "")
                self._write(self.models_dir / f"{name}.yaml", dump_yaml({"name": name, "alias": target}))
                self.aliases[name] = target
            elif body.get("op") == "delete":
                self.configs.pop(name, None)
            else:
                state = await revisions.get(self.pool, name)
                current = self.configs.get(name)
                if state is not None and state["config_yaml"] and (
                        current is None or current.revision != state["config_revision"]):
                    self._adopt(name, state["config_yaml"])
            self._drop_view(name)
        finally:
            if mark:
                self.router.inflight.acks.add(mark)
