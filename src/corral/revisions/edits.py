"""Model config edits and their revision lifecycle, across frontends, in commit order.

An edit is made in PostgreSQL first: under the model's row lock (edits to one model, on every
frontend, serialise there) its base is checked (`If-Match`), the new config is validated and made
current, which gives it the next commit number (`config_seq`) and quarantines every replica of
another revision as `unloading`. Only then does any frontend touch its files and memory: each
applies the committed row, and only a row whose number is above the one it holds, so every frontend
takes the edits in the order they committed. The editing frontend re-reads the committed row after
its own commit too (another edit may have committed after it), announces the change on NATS
(`cache.invalidate.models`, with the number) and waits until every live frontend acknowledged it
before the edit's response returns — so from then on no frontend routes to an old replica, and every
frontend and the database agree. A frontend ignores an event older than what it holds; a missed one
is healed by a periodic check of the numbers (`RESYNC_INTERVAL_S`). At start, the committed row
wins over the file on disk, whatever its mtime.

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
import uuid
from collections.abc import Awaitable, Callable, Collection
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
from corral.runtime.atomic_write import replace_file
from corral.runtime.loops import run_periodic
from corral.store import revisions

log = logging.getLogger(__name__)

SUBJECT = "cache.invalidate.models"
ACK_TIMEOUT_S = 10.0
RESYNC_INTERVAL_S = 10.0  # a frontend that missed an event takes the committed row within this
TOMBSTONE_PREFIX = "removed-"
ALIAS_PREFIX = "alias-"
ANY_REVISION = "*"  # If-Match: * — any committed configuration of the model

Edit = Callable[[dict[str, Any] | None], dict[str, Any]]  # the committed config (None: none) -> the new one


class StaleBase(Exception):
    """An edit was based on a revision (If-Match) that is no longer the committed one: re-read the model
    (GET answers its current revision) and apply the change to that."""

    def __init__(self, name: str, current: str | None) -> None:
        if current:
            message = (
                f"model {name!r} changed since the revision in If-Match: its current revision is {current}; "
                f'GET /api/model-configs/{name}, apply your change to it and send If-Match: "{current}"'
            )
        else:
            message = (
                f"model {name!r} has no committed configuration for If-Match to match; send the edit "
                "without If-Match to create it"
            )
        super().__init__(message)
        self.current = current


class ModelMissing(Exception):
    """The model an edit changes (patch, disable, enable) is not configured."""


def dump_yaml(raw: dict[str, Any]) -> str:
    text: str = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)
    return text


def alias_revision(yaml_text: str) -> str:
    return ALIAS_PREFIX + hashlib.sha256(yaml_text.encode()).hexdigest()[:32]


def _committed_revision(row: asyncpg.Record | None) -> str | None:
    if row is None or row["config_revision"].startswith(TOMBSTONE_PREFIX):
        return None
    return str(row["config_revision"])


def _committed_model(row: asyncpg.Record) -> dict[str, Any] | None:
    """The committed model config of a row; None for a removed model or an alias."""
    if (
        _committed_revision(row) is None
        or row["config_revision"].startswith(ALIAS_PREFIX)
        or not row["config_yaml"]
    ):
        return None
    data = yaml.safe_load(row["config_yaml"])
    return data if isinstance(data, dict) and not is_alias_document(data) else None


def _unchanged(committed: dict[str, Any] | None) -> dict[str, Any]:
    """The edit that changes nothing (re-hashes the committed config)."""
    if committed is None:
        raise ModelMissing("the model was removed")
    return committed


class ConfigRevisions:
    def __init__(
        self,
        pool: asyncpg.Pool,
        nc: Client,
        router: Router,
        configs: dict[str, ModelConfig],
        models_dir: Path,
        aliases: dict[str, str] | None = None,
        *,
        extra_roots: tuple[Path, ...] = (),
        cleanup_kick: Callable[[], Awaitable[None]] | None = None,
        on_config: Callable[[ModelConfig], None] | None = None,
    ) -> None:
        self.pool, self.nc, self.router, self.configs, self.models_dir = pool, nc, router, configs, models_dir
        self.extra_roots = (
            extra_roots  # CORRAL_MODEL_PATH_ROOTS: where configs may name files besides models_dir
        )
        self.aliases = (
            aliases if aliases is not None else {}
        )  # shared in place with routing and the reconciler
        self.cleanup_kick = cleanup_kick  # a revision left a model: its old replicas' cleanup runs now
        self.on_config = on_config  # a config became current (pre-hashing)
        self.held: dict[str, int] = {}  # model -> commit number its file and memory here reflect
        self._applying = asyncio.Lock()  # committed rows are applied one at a time, in order

    async def start(self) -> None:
        await self.nc.subscribe(SUBJECT, cb=self._on_event)
        await self.reconcile_at_startup()

    async def run(self, stop: asyncio.Event) -> None:
        """Heal a missed event: take every committed row whose number is above the one held here."""
        await run_periodic("config resync", self.resync, RESYNC_INTERVAL_S, stop, delay_first=True)

    async def resync(self) -> None:
        for name, seq in (await revisions.all_seqs(self.pool)).items():
            if seq > self.held.get(name, 0) and name_problem(name) is None:
                log.info(
                    "config of %s: edit #%d committed without its event reaching here; applying it", name, seq
                )
                await self._follow_database(name)
                self._drop_view(name)

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

    def _write(self, name: str, path: Path, text: str) -> None:
        """Replace the file; a failure is logged (memory still follows the database; a restart rewrites it)."""
        try:
            replace_file(path, text.encode())
        except OSError as exc:
            log.error(
                "could not write %s, the committed configuration of %s: %s; this frontend serves it from "
                "memory and writes the file again at its next start (check the models directory's space "
                "and permissions)",
                path,
                name,
                exc,
            )

    # ---- applying committed rows, in commit order ----------------------------------------------

    async def _follow_database(self, name: str) -> None:
        """Make this frontend's file and memory of `name` the committed row, unless it holds that or newer."""
        async with self._applying:
            state = await revisions.get(self.pool, name)
            if state is None or state["config_seq"] <= self.held.get(name, 0):
                return
            self._apply_logged(name, state)

    def _apply_logged(self, name: str, state: asyncpg.Record) -> None:
        """Apply a committed row; one that does not parse here is logged once (held: not retried until the next)."""
        try:
            self._apply_row(name, state)
        except (ModelConfigError, AliasConfigError, yaml.YAMLError) as exc:
            log.error(
                "not adopting the cluster's configuration of %r (edit #%d): %s",
                name,
                state["config_seq"],
                exc,
            )
        self.held[name] = int(state["config_seq"])

    def _apply_row(self, name: str, state: asyncpg.Record) -> None:
        revision, text = str(state["config_revision"]), str(state["config_yaml"])
        if revision.startswith(TOMBSTONE_PREFIX):
            self._retire(name)
            return
        if not text:
            return
        data = yaml.safe_load(text)
        if is_alias_document(data):
            self._adopt_alias(name, data)
            return
        held = self.configs.get(name)
        if held is not None and held.revision == revision:
            return  # already so here (the file keeps its own formatting and comments)
        path = self._path(name)
        cfg = parse_model_config(data, path, self.models_dir, self.extra_roots)
        if cfg.name != name:
            raise ModelConfigError(f"the stored configuration of {name!r} names another model ({cfg.name!r})")
        self._write(name, path, text)
        self.aliases.pop(name, None)
        self._current(cfg)
        log.info(
            "took the committed configuration of %s (revision %s, edit #%d; held here: %s)",
            name,
            revision[:12],
            state["config_seq"],
            held.revision[:12] if held else "none",
        )

    def _adopt_alias(self, name: str, data: dict[str, Any]) -> None:
        alias, target = parse_alias(data, Path(f"{name}.yaml"))
        if alias != name:
            raise AliasConfigError(f"the stored alias {name!r} names another alias ({alias!r})")
        if self.aliases.get(name) == target and name not in self.configs:
            return
        self._write(name, self._path(name), dump_yaml({"name": name, "alias": target}))
        self.configs.pop(name, None)
        self.aliases[name] = target
        log.info("alias %s now points at %s (committed)", name, target)

    def _retire(self, name: str) -> None:
        cfg = self.configs.pop(name, None)
        if cfg is None:
            return
        if cfg.source is not None:
            try:
                cfg.source.unlink(missing_ok=True)
            except OSError as exc:
                log.error("could not remove %s, the file of retired model %s: %s", cfg.source, name, exc)
        log.info("model %s was retired (renamed or removed)", name)

    # ---- startup ------------------------------------------------------------------------------

    async def reconcile_at_startup(self) -> None:
        """A model PostgreSQL has never seen is established from its file; every other takes the committed row,
        whatever the file says or its mtime (an older edit written late must not win). A stored revision that
        is not the hash of its own stored configuration (a release that hashed differently) is republished."""
        states = await revisions.all_states(self.pool)
        for name, cfg in list(self.configs.items()):
            if name not in states:
                await revisions.establish(self.pool, name, cfg.revision, dump_yaml(cfg.raw))
        for name, target in list(self.aliases.items()):
            if name not in states:
                text = dump_yaml({"name": name, "alias": target})
                await revisions.establish(self.pool, name, alias_revision(text), text)
        for name, state in (
            await revisions.all_states(self.pool)
        ).items():  # again: a peer may have established first
            if name_problem(name) is not None:
                continue
            async with self._applying:
                if str(state["config_revision"]).startswith(TOMBSTONE_PREFIX):
                    self._skip_retired(name, state)
                else:
                    self._apply_logged(name, state)
            await self._heal_stored_revision(name, state)

    def _skip_retired(self, name: str, state: asyncpg.Record) -> None:
        """A file of a model the cluster retired (renamed or removed, maybe while this frontend was down): not
        served, and left on disk (it may be an operator's new file that reuses the name)."""
        self.held[name] = int(state["config_seq"])
        cfg = self.configs.pop(name, None)
        if cfg is not None:
            log.warning(
                "not serving %s from %s: the cluster retired model %s (renamed or removed, edit #%d); to "
                "serve it again, PUT it to /api/model-configs/%s, or delete the file",
                name,
                cfg.source,
                name,
                state["config_seq"],
                name,
            )

    async def _heal_stored_revision(self, name: str, state: asyncpg.Record) -> None:
        cfg = self.configs.get(name)
        if (
            cfg is None
            or self.held.get(name) != state["config_seq"]
            or cfg.revision == state["config_revision"]
        ):
            return
        log.info(
            "model %s: stored revision %s is not the hash of its stored configuration; republishing it as %s",
            name,
            str(state["config_revision"])[:12],
            cfg.revision[:12],
        )
        try:  # based on the row read above: an edit committed meanwhile carries its own revision and wins
            await self._commit(name, _unchanged, "edit", {str(state["config_revision"])})
        except (StaleBase, ModelMissing, ModelConfigError) as exc:
            log.info("model %s: not republished (%s)", name, exc or "edited meanwhile")

    # ---- edits --------------------------------------------------------------------------------

    async def apply(
        self, name: str, edit: Edit, expected: Collection[str] | None = None
    ) -> tuple[ModelConfig, int]:
        """Commit `edit` of the committed config (StaleBase when `expected` revisions do not include the committed
        one; ModelConfigError when invalid), then apply it here; returns (config, pending_cleanup)."""
        cfg = await self._commit(name, edit, "edit", expected)
        return cfg, await revisions.pending_cleanup(self.pool, name)

    async def _commit(
        self, name: str, edit: Edit, op: str, expected: Collection[str] | None = None
    ) -> ModelConfig:
        path = self._path(name)
        async with revisions.locked(self.pool, name) as (conn, row):
            self._check_base(name, row, expected)
            base = (
                _committed_model(row)
                if row is not None
                else (dict(self.configs[name].raw) if name in self.configs else None)
            )
            raw = edit(base)
            # off the loop: path checks stat every file-naming option (a 1 MiB body can name 40,000 of them)
            cfg = await asyncio.to_thread(parse_model_config, raw, path, self.models_dir, self.extra_roots)
            seq, quarantined = await revisions.advance_on(conn, name, cfg.revision, dump_yaml(raw))
        await self._after_commit(name, op, cfg.revision, seq)
        log.info(
            "model %s is at revision %s (edit #%d); %d old replica(s) to stop",
            name,
            cfg.revision[:12],
            seq,
            len(quarantined),
        )
        return cfg

    def _check_base(self, name: str, row: asyncpg.Record | None, expected: Collection[str] | None) -> None:
        if expected is None:
            return
        current = (
            _committed_revision(row)
            if row is not None
            else (self.configs[name].revision if name in self.configs else None)
        )
        if current is None or (current not in expected and ANY_REVISION not in expected):
            raise StaleBase(name, current)

    async def set_alias(self, name: str, target: str, expected: Collection[str] | None = None) -> None:
        """Point alias `name` at model `target` (a scheduling rule keyed by the alias follows it)."""
        for field, value in (("name", name), ("alias", target)):
            problem = name_problem(value)
            if problem is not None:
                raise ModelConfigError(f"field {field!r} {problem}")
        if target not in self.configs:
            raise ModelConfigError(
                f"field 'alias': {target!r} is not a configured model (aliases point at models)"
            )
        text = dump_yaml({"name": name, "alias": target})
        self._path(name)
        async with revisions.locked(self.pool, name) as (conn, row):
            self._check_base(name, row, expected)
            if (_committed_model(row) if row is not None else self.configs.get(name)) is not None:
                raise ModelConfigError(f"{name!r} is a model, not an alias; choose another alias name")
            seq, _ = await revisions.advance_on(conn, name, alias_revision(text), text)
        await self._after_commit(name, "alias", target, seq)
        log.info("alias %s now points at %s (edit #%d)", name, target, seq)

    async def remove(self, name: str) -> int:
        """Retire a model name (rename's old name): its replicas stop, peers forget the config."""
        self._path(name)
        async with revisions.locked(self.pool, name) as (conn, _row):
            seq, rows = await revisions.advance_on(conn, name, f"{TOMBSTONE_PREFIX}{uuid.uuid4().hex}", "")
        await self._after_commit(name, "delete", "", seq)
        log.info("retired model %s (edit #%d): %d replica(s) to stop", name, seq, len(rows))
        return await revisions.pending_cleanup(self.pool, name)

    async def _after_commit(self, name: str, op: str, revision: str, seq: int) -> None:
        """Apply the committed row here (it, or a newer one), then have every frontend do the same."""
        await self._follow_database(name)
        self._drop_view(name)
        await self._announce(name, op, revision, seq)
        await self._kick()

    async def _kick(self) -> None:
        if self.cleanup_kick is not None:
            await self.cleanup_kick()

    def _drop_view(self, name: str) -> None:
        for replica in [r for r in self.router.view.all() if r.model == name]:
            self.router.view.remove(replica)

    async def _announce(self, name: str, op: str, revision: str, seq: int) -> None:
        mark = uuid.uuid4().hex
        self.router.inflight.acks.add(mark)
        body = {"element": name, "op": op, "config_revision": revision, "config_seq": seq, "mark": mark}
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
        """A hint that `element` changed: unless it is older than what this frontend holds, re-read the element's
        committed row from PostgreSQL and follow that, never the message."""
        try:
            body = json.loads(msg.data)
            name, mark, seq = str(body["element"]), str(body.get("mark") or ""), body.get("config_seq")
        except (ValueError, KeyError, TypeError):
            return
        if mark in self.router.inflight.acks:
            return  # our own announcement
        try:
            problem = name_problem(name)
            if problem is not None:
                log.warning("ignoring a config invalidation: field 'element' %s", problem)
                return
            if isinstance(seq, int) and not isinstance(seq, bool) and seq <= self.held.get(name, 0):
                return  # this frontend already holds that edit or a later one
            await self._follow_database(name)
            self._drop_view(name)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("config invalidation of %s not applied (PostgreSQL unavailable: %s)", name, exc)
        finally:
            if mark:
                self.router.inflight.acks.add(mark[:64])
