"""Model config edits and their revision lifecycle, across frontends.

An edit is validated, written to the models directory, made current in PostgreSQL (which
quarantines every replica of another revision as `unloading`), announced on NATS
(`cache.invalidate.models`) and acknowledged by every live frontend before the edit's response
returns — so from then on no frontend routes to an old replica. Old replicas get an acknowledged
exact stop from the cleanup loop, retried with durable backoff.

The NATS message is only a hint: a frontend that receives one re-reads the element's state from
PostgreSQL and acts on that (anyone on the bus can publish). Aliases are stored there too (their
revision is `alias-<hash>`), so an alias change, like a model edit, is adopted from the database.
Every name is validated as a name before it becomes a file in the models directory.
"""

from __future__ import annotations

import asyncio
import hashlib
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

from corral.models.aliases import AliasConfigError, is_alias_document, parse_alias
from corral.models.config import ModelConfig, ModelConfigError, parse_model_config
from corral.models.names import name_problem
from corral.routing.router import Router
from corral.store import revisions

log = logging.getLogger(__name__)

SUBJECT = "cache.invalidate.models"
ACK_TIMEOUT_S = 10.0
TOMBSTONE_PREFIX = "removed-"
ALIAS_PREFIX = "alias-"


def dump_yaml(raw: dict[str, Any]) -> str:
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def alias_revision(yaml_text: str) -> str:
    return ALIAS_PREFIX + hashlib.sha256(yaml_text.encode()).hexdigest()[:32]


class ConfigRevisions:
    def __init__(self, pool: asyncpg.Pool, nc: Client, router: Router, configs: dict[str, ModelConfig],
                 models_dir: Path, aliases: dict[str, str] | None = None, *,
                 extra_roots: tuple[Path, ...] = ()) -> None:
        self.pool, self.nc, self.router, self.configs, self.models_dir = pool, nc, router, configs, models_dir
        self.extra_roots = extra_roots  # CORRAL_MODEL_PATH_ROOTS: where configs may name files besides models_dir
        self.aliases = aliases if aliases is not None else {}  # shared in place with routing and the reconciler
        self.cleanup_kick: Callable[[], Awaitable[None]] | None = None
        self.on_config: Callable[[ModelConfig], None] | None = None  # a config became current (pre-hashing)

    async def start(self) -> None:
        await self.nc.subscribe(SUBJECT, cb=self._on_event)
        await self.reconcile_at_startup()

    def _current(self, cfg: ModelConfig) -> None:
        self.configs[cfg.name] = cfg
        if self.on_config is not None:
            self.on_config(cfg)

    # ---- files --------------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        """The YAML file of `name`; ModelConfigError when `name` is not a plain name (never a path)."""
        problem = name_problem(name)
        if problem is not None:
            raise ModelConfigError(f"field 'name' {problem}")
        cfg = self.configs.get(name)
        if cfg is not None and cfg.source is not None:
            return cfg.source
        path = self.models_dir / f"{name}.yaml"
        if path.resolve().parent != self.models_dir.resolve():
            raise ModelConfigError(f"field 'name': {name!r} does not name a file in the models directory")
        return path

    def _write(self, path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def _adopt(self, name: str, yaml_text: str) -> None:
        """Take the cluster's current config of `name` (edited elsewhere) as ours, on disk too."""
        data = yaml.safe_load(yaml_text)
        if is_alias_document(data):
            self._adopt_alias(name, data)
            return
        path = self._path(name)
        cfg = parse_model_config(data, path, self.models_dir, self.extra_roots)
        if cfg.name != name:
            raise ModelConfigError(f"the stored configuration of {name!r} names another model ({cfg.name!r})")
        self._write(path, yaml_text)
        self._current(cfg)
        log.info("adopted the cluster's configuration of %s (revision %s)", name, cfg.revision[:12])

    def _adopt_alias(self, name: str, data: dict[str, Any]) -> None:
        alias, target = parse_alias(data, Path(f"{name}.yaml"))
        if alias != name:
            raise AliasConfigError(f"the stored alias {name!r} names another alias ({alias!r})")
        if name in self.configs:
            raise AliasConfigError(f"{name!r} is a model here, not an alias; not adopting the cluster's alias")
        if self.aliases.get(name) != target:
            self._write(self._path(name), dump_yaml({"name": name, "alias": target}))
            self.aliases[name] = target
            log.info("alias %s now points at %s (adopted from the cluster)", name, target)

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
                    self._adopt_logged(name, state["config_yaml"])
                else:
                    await self._advance_and_announce(name, cfg)
        for name, target in list(self.aliases.items()):
            text = dump_yaml({"name": name, "alias": target})
            state = states.get(name)
            if state is None:
                await revisions.establish(self.pool, name, alias_revision(text), text)
            elif state["config_revision"] != alias_revision(text):
                path = self.models_dir / f"{name}.yaml"
                mtime_s = path.stat().st_mtime if path.exists() else 0.0
                if not (state["updated_s"] > mtime_s and state["config_yaml"]):  # the file was edited last
                    await revisions.advance(self.pool, name, alias_revision(text), text)
                    del states[name]
        for name, state in states.items():
            if name not in self.configs and state["config_yaml"] and not state["config_revision"].startswith(
                    TOMBSTONE_PREFIX):
                self._adopt_logged(name, state["config_yaml"])

    def _adopt_logged(self, name: str, yaml_text: str) -> None:
        try:
            self._adopt(name, yaml_text)
        except (ModelConfigError, AliasConfigError, yaml.YAMLError, OSError) as exc:
            log.error("not adopting the cluster's configuration of %r: %s", name, exc)

    # ---- edits --------------------------------------------------------------------------------

    async def apply(self, name: str, raw: dict[str, Any]) -> tuple[ModelConfig, int]:
        """Validate (ModelConfigError), persist and make current; returns (config, pending_cleanup)."""
        path = self._path(name)
        cfg = parse_model_config(raw, path, self.models_dir, self.extra_roots)
        self._write(path, dump_yaml(raw))
        self._current(cfg)
        await self._advance_and_announce(name, cfg)
        return cfg, await revisions.pending_cleanup(self.pool, name)

    async def set_alias(self, name: str, target: str) -> None:
        """Point alias `name` at model `target` (a scheduling rule keyed by the alias follows it)."""
        for field, value in (("name", name), ("alias", target)):
            problem = name_problem(value)
            if problem is not None:
                raise ModelConfigError(f"field {field!r} {problem}")
        if name in self.configs:
            raise ModelConfigError(f"{name!r} is a model, not an alias; choose another alias name")
        if target not in self.configs:
            raise ModelConfigError(f"field 'alias': {target!r} is not a configured model (aliases point at models)")
        text = dump_yaml({"name": name, "alias": target})
        self._write(self._path(name), text)
        self.aliases[name] = target
        await revisions.advance(self.pool, name, alias_revision(text), text)
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
        """A hint that `element` changed: re-read its state from PostgreSQL and follow that, never the message."""
        try:
            body = json.loads(msg.data)
            name, mark = str(body["element"]), str(body.get("mark") or "")
        except (ValueError, KeyError, TypeError):
            return
        if mark in self.router.inflight.acks:
            return  # our own announcement
        try:
            problem = name_problem(name)
            if problem is not None:
                log.warning("ignoring a config invalidation: field 'element' %s", problem)
                return
            await self._follow_database(name)
            self._drop_view(name)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("config invalidation of %s not applied (PostgreSQL unavailable: %s)", name, exc)
        finally:
            if mark:
                self.router.inflight.acks.add(mark[:64])

    async def _follow_database(self, name: str) -> None:
        state = await revisions.get(self.pool, name)
        if state is None:
            return
        revision = state["config_revision"]
        if revision.startswith(TOMBSTONE_PREFIX):
            self.configs.pop(name, None)
        elif revision.startswith(ALIAS_PREFIX) or name not in self.configs or \
                self.configs[name].revision != revision:
            if state["config_yaml"]:
                self._adopt_logged(name, state["config_yaml"])
