"""The model gallery (issue 26): browse the configured galleries with the cluster's answer to "will it run
here", and install a model — its files downloaded into the models directory, its config committed like
any model-config edit — with progress.

Routes, as the reference's (wire-compatible names and fields):

- `GET /models/available`: every gallery model (the reference's metadata: name, description, license,
  urls, tags, files, gallery, installed) plus corral's sizing, computed as `GET /api/models` sizes a
  configured model (admin/resources.py `read_registry`, placement/cluster_budget.py `cluster_budget` and
  `verdict`, the model's node_selector and governing scheduling rule): `memory_bytes` (the files'
  declared or local sizes), `fits`, `fits_on`, `verdict`, `budget_bytes`, `budget_node`, and `variants`
  (the entries it lists under `variants:`, each sized). A gallery that cannot be read is skipped when
  another can; when none can, 502 naming each gallery and its fault.
- `GET /api/gallery/models` (admin, the web UI's): the same models with the cluster budget, the
  galleries and each unreadable gallery's error.
- `POST /models/apply` (admin): `{"id": "<gallery>@<name>" or "<name>", "name": optional install name,
  "overrides": optional mapping}` → `{"uuid", "status": "<base>/models/jobs/<uuid>"}`. Everything is
  checked before the job starts (a bad file name, uri or config is a 400 naming the field).
- `GET /models/jobs/<uuid>` (admin): the reference's `GalleryOpStatus` — `processed`, `error`,
  `message`, `progress` (percent of the current file), `file_name`, `file_size`, `downloaded_size`,
  `gallery_element_name` — plus `status` and `phase`. `GET /models/jobs`: every recent install.
- `GET /models/galleries` (admin): the configured galleries.

The files land in this frontend's models directory (`LOCALAI_MODELS_PATH`), where loads stage model files
to workers from; the config reaches every frontend through PostgreSQL, the files do not, so frontends on
separate hosts need that directory shared to load the model from any of them.

A job is a `model_install` row of the activity record (`gallery_operations`), so the operations strip
and Activity page show it and every frontend answers its status. Its frontend touches the row every
`HEARTBEAT_S`; a job nobody touched for `STALE_S` (its frontend stopped or died) is failed when
asked about, naming the cause, and its partial files are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import asyncpg
import yaml
from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse

from corral.bus.messages import BackendInstallProgressEvent
from corral.config.model_gallery import FrontendModelGallerySettings
from corral.frontend.admin import model_configs
from corral.frontend.admin.resources import local_fields, read_registry
from corral.frontend.errors import envelope
from corral.frontend.json_body import json_body
from corral.frontend.state import FrontendState
from corral.gallery.index import GalleryError, GalleryRef, is_url
from corral.gallery.models_index import (
    GalleryModel,
    LocationRefused,
    ModelIndexCache,
    base_config_location,
    configured_galleries,
    file_location,
    gallery_roots,
    read_location,
)
from corral.gallery.models_install import (
    InstallError,
    PlannedFile,
    check_targets,
    download_file,
    model_config,
    plan_files,
    remove_parts,
)
from corral.gallery.progress import ProgressDebouncer, progress_event
from corral.models.aliases import resolve
from corral.models.config import ModelConfigError, parse_model_config
from corral.models.names import name_problem
from corral.placement.cluster_budget import ClusterBudget, NodeMemory, cluster_budget, verdict
from corral.placement.governance import governing_rule
from corral.placement.rules import SchedulingRule
from corral.revisions.edits import ConfigRevisions
from corral.store import operations
from corral.store.queries import q

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
STALE_S = 30.0  # six missed heartbeats: the frontend running the job is gone
JOBS_LISTED = 100
BASE_CONFIG_MAX_BYTES = 1 << 20
JobId = Annotated[str, PathParam(max_length=64)]


def _bad(message: str, field: str) -> JSONResponse:
    return JSONResponse(envelope(message, "invalid_request_error", "invalid_value", field), status_code=400)


@dataclass
class ModelGallery:
    """The configured galleries, their cached indexes and this frontend's running installs."""

    pool: asyncpg.Pool
    revs: ConfigRevisions
    settings: FrontendModelGallerySettings
    frontend_id: str
    refs: list[GalleryRef] = field(default_factory=list)
    config_error: str = ""
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    cache: ModelIndexCache = field(init=False)

    def __post_init__(self) -> None:
        try:
            self.refs = configured_galleries(self.settings.galleries)
        except GalleryError as exc:
            self.config_error = str(exc)
            log.error("model galleries: %s", exc)
        self.roots = gallery_roots(self.refs)
        self.cache = ModelIndexCache(
            self.settings.model_gallery_timeout_s,
            self.settings.model_gallery_index_max_bytes,
            self.settings.model_gallery_cache_ttl_s,
        )

    @property
    def models_dir(self) -> Path:
        return self.revs.models_dir

    async def all_models(self) -> tuple[list[GalleryModel], list[dict[str, str]]]:
        """Every readable gallery's models, in gallery order, and each unreadable gallery's error."""
        models: list[GalleryModel] = []
        errors: list[dict[str, str]] = []
        if self.config_error:
            errors.append({"gallery": "", "error": self.config_error})
        for ref in self.refs:
            try:
                models.extend(await self.cache.models(ref))
            except GalleryError as exc:
                errors.append({"gallery": ref.name, "error": str(exc)})
        return models, errors

    def find(self, models: list[GalleryModel], wanted: str) -> GalleryModel | None:
        """`<gallery>@<name>` exactly, or the first gallery's entry called `<name>` (case-insensitive)."""
        lowered = wanted.lower()
        for model in models:
            if model.id.lower() == lowered:
                return model
        return next((m for m in models if m.entry.name.lower() == lowered), None)

    # --- sizing -------------------------------------------------------------------------------------------

    def memory_bytes(self, model: GalleryModel) -> int:
        """The files' sizes: declared (`size`), else a local file's own; 0 when any is unknown (blocking)."""
        total = 0
        for item in model.entry.files:
            size = item.size_bytes()
            if not size:
                try:
                    location = file_location(model.gallery, item.uri, self.roots)
                    size = 0 if is_url(location) else Path(location).stat().st_size
                except (LocationRefused, OSError):
                    size = 0
            if not size:
                return 0
            total += size
        return total

    # --- installs -----------------------------------------------------------------------------------------

    async def start(self, model: GalleryModel, name: str, overrides: dict[str, Any]) -> str:
        """Check everything, record the job and start it; InstallError naming the field when refused."""
        planned = plan_files(model, self.roots)
        await asyncio.to_thread(check_targets, planned, self.models_dir)
        base_location = ""
        if model.entry.url:
            try:
                base_location = base_config_location(model.gallery, model.entry.url, self.roots)
            except LocationRefused as exc:
                raise InstallError(f"{model.id}: field 'url' {exc}", "url") from None
        self._check_config(model_config(model, name, overrides, {}), name)
        row = await operations.insert(
            self.pool,
            operations.NewOperation(
                name, operations.MODEL_INSTALL, frontend_id=self.frontend_id, message=f"from {model.id}"
            ),
        )
        job_id = str(row["id"])
        task = asyncio.create_task(
            self._run(job_id, model, name, overrides, planned, base_location), name=f"model-install:{name}"
        )
        self.running[job_id] = task
        task.add_done_callback(lambda _t: self.running.pop(job_id, None))
        return job_id

    def _check_config(self, config: dict[str, Any], name: str) -> None:
        try:
            parse_model_config(config, Path(f"{name}.yaml"), self.models_dir, self.revs.extra_roots)
        except ModelConfigError as exc:
            raise InstallError(
                f"the gallery config of {name!r} is refused: {exc}", exc.field or "config_file"
            ) from None

    async def _run(
        self,
        job_id: str,
        model: GalleryModel,
        name: str,
        overrides: dict[str, Any],
        planned: list[PlannedFile],
        base_location: str,
    ) -> None:
        beat = asyncio.create_task(self._heartbeat(job_id))
        try:
            await operations.start(
                self.pool, job_id, self.frontend_id, f"installing {model.id}: {len(planned)} file(s)"
            )
            base = await self._base_config(base_location) if base_location else {}
            await self._download(job_id, name, planned)
            config = model_config(model, name, overrides, base)
            answer = await model_configs.apply(self.revs, name, config)
            if answer.status_code != 200:
                raise InstallError(
                    f"the model config was refused: {bytes(answer.body).decode(errors='replace')}"
                )
            await operations.finish(
                self.pool,
                job_id,
                operations.COMPLETED,
                message=f"installed {name} from {model.id}: {len(planned)} file(s) and its config",
            )
        except InstallError as exc:
            await self._fail(job_id, str(exc))
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self._fail(job_id, "the frontend stopped during the install; apply again")
                )
            raise
        except Exception as exc:
            log.exception("model install %s (%s) failed unexpectedly", job_id, model.id)
            await self._fail(job_id, f"unexpected error: {exc}")
        finally:
            beat.cancel()

    async def _fail(self, job_id: str, error: str) -> None:
        await asyncio.to_thread(remove_parts, self.models_dir, job_id)
        await operations.finish(self.pool, job_id, operations.FAILED, error=error, message=error)

    async def _heartbeat(self, job_id: str) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                await self.pool.execute(q("model_gallery_touch"), job_id)

    async def _base_config(self, location: str) -> dict[str, Any]:
        """The `config_file` of the entry's base config (its `url`)."""
        try:
            data = await asyncio.to_thread(
                read_location, location, BASE_CONFIG_MAX_BYTES, self.settings.model_gallery_timeout_s
            )
            doc = yaml.safe_load(data)
            config = doc.get("config_file") if isinstance(doc, dict) else None
            if isinstance(config, str):
                config = yaml.safe_load(config)
        except (GalleryError, yaml.YAMLError) as exc:
            raise InstallError(f"the base config {location} cannot be used: {exc}", "url") from None
        return config if isinstance(config, dict) else {}

    async def _download(self, job_id: str, name: str, planned: list[PlannedFile]) -> None:
        loop = asyncio.get_running_loop()

        async def publish(event: BackendInstallProgressEvent) -> None:
            await operations.progress(
                self.pool,
                job_id,
                phase=event.phase or "",
                fraction=event.percentage / 100.0,
                file_name=event.file_name or "",
                current=event.current or "",
                total=event.total or "",
            )

        for n, item in enumerate(planned, 1):
            phase = f"file {n} of {len(planned)}"

            def make(
                _phase: str, file_name: str, current: int, total: int, is_bytes: bool
            ) -> BackendInstallProgressEvent:
                return progress_event(job_id, "", name, _phase, file_name, current, total, is_bytes)

            debouncer = ProgressDebouncer(loop, publish, make)

            def report(
                file_name: str, done: int, total: int, deb: ProgressDebouncer = debouncer, ph: str = phase
            ) -> None:
                deb.report(ph, file_name, done, total, True)

            try:
                await asyncio.to_thread(
                    download_file,
                    item,
                    self.models_dir,
                    job_id,
                    self.settings.model_gallery_timeout_s,
                    self.settings.model_gallery_max_download_bytes,
                    report,
                )
            finally:
                await debouncer.flush()

    async def close(self) -> None:
        """This frontend stops: its running installs fail now, naming why (while PostgreSQL is still open)."""
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def fail_if_stale(self, job_id: str) -> None:
        """A job whose frontend stopped heart-beating: failed, its partial files removed."""
        if job_id in self.running:
            return
        error = (
            "the frontend running this install stopped (restarted or died) before it finished; "
            "its partial files were removed; apply again"
        )
        failed = await self.pool.fetchval(q("model_gallery_job_stale"), job_id, STALE_S, error)
        if failed:
            await asyncio.to_thread(remove_parts, self.models_dir, job_id)


def job_status(row: asyncpg.Record) -> dict[str, Any]:
    """The reference's GalleryOpStatus of an activity row (progress: percent of the current file)."""
    finished = row["finished_at"] is not None
    failed = row["status"] in (operations.FAILED, operations.CANCELLED) and finished
    return {
        "uuid": row["id"],
        "deletion": False,
        "file_name": row["file_name"],
        "error": (row["error"] or row["status"]) if failed else None,
        "processed": finished,
        "message": row["message"],
        "progress": round(100.0 * float(row["progress"]), 1),
        "file_size": row["total_file_size"],
        "downloaded_size": row["downloaded_file_size"],
        "gallery_element_name": row["gallery_element_name"],
        "cancelled": row["status"] == operations.CANCELLED,
        "status": row["status"],
        "phase": row["phase"],
    }


@dataclass
class _Sizing:
    """What every verdict of one listing is computed from (a snapshot: the listing runs in a thread)."""

    nodes: list[NodeMemory]
    rules: list[SchedulingRule]
    overall: ClusterBudget | None
    local_bytes: int
    configured: frozenset[str]
    aliases: dict[str, str]


def _selector(sizing: _Sizing, model: GalleryModel) -> dict[str, str]:
    """The node_selector the installed config would have, with its governing rule's (as resources.py)."""
    raw = model_config(model, model.entry.name, {}, {}).get("node_selector")
    own = {str(k): "" if v is None else str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    known = set(sizing.configured)
    rule = governing_rule(model.entry.name, sizing.rules, lambda n: resolve(n, known, sizing.aliases))
    return {**own, **(rule.node_selector if rule else {})}


def _fit(sizing: _Sizing, model: GalleryModel, need: int) -> dict[str, Any]:
    budget = cluster_budget(sizing.nodes, _selector(sizing, model)) if sizing.overall else None
    answer = verdict(need, budget, sizing.local_bytes)
    if sizing.overall and budget is None:
        answer.update(fits=False, fits_on=None, verdict="no healthy node matches its node_selector")
    answer["budget_bytes"] = budget.total_memory if budget else sizing.local_bytes
    answer["budget_node"] = budget.node_name if budget else "this host"
    return answer


def _entry_json(sizing: _Sizing, roots: list[Path], model: GalleryModel) -> dict[str, Any]:
    e = model.entry
    problem = None
    try:
        plan_files(model, roots)
    except InstallError as exc:
        problem = str(exc)
    config = model_config(model, e.name, {}, {})
    return {
        "id": model.id,
        "name": e.name,
        "description": e.description,
        "license": e.license,
        "icon": e.icon,
        "url": e.url,
        "urls": e.urls,
        "tags": e.tags,
        "files": [{"filename": f.filename, "uri": f.uri, "sha256": f.sha256} for f in e.files],
        "gallery": {"name": model.gallery.name, "url": model.gallery.url},
        "installed": e.name in sizing.configured,
        "backend": str(config.get("backend") or ""),
        "installable": problem is None,
        "problem": problem,
    }


def _entries(gallery: ModelGallery, models: list[GalleryModel], sizing: _Sizing) -> list[dict[str, Any]]:
    """Every model's listing entry with its verdict and its variants' (blocking: stats local files)."""
    needs = {m.id: gallery.memory_bytes(m) for m in models}
    by_id: dict[str, GalleryModel] = {}
    by_name: dict[tuple[str, str], GalleryModel] = {}
    for m in models:
        by_id.setdefault(m.id.lower(), m)
        by_name.setdefault((m.gallery.name, m.entry.name.lower()), m)
        by_name.setdefault(("", m.entry.name.lower()), m)
    entries = []
    for model in models:
        need = needs[model.id]
        entry = {
            **_entry_json(sizing, gallery.roots, model),
            "memory_bytes": need,
            **_fit(sizing, model, need),
        }
        variants = []
        for ref in model.entry.variants:
            key = ref.model.lower()
            target = by_id.get(key) or by_name.get((model.gallery.name, key)) or by_name.get(("", key))
            if target is None or target.id == model.id:
                continue
            size = needs[target.id]
            variants.append(
                {
                    "id": target.id,
                    "name": target.entry.name,
                    "memory_bytes": size,
                    **_fit(sizing, target, size),
                }
            )
        entry["variants"] = variants
        entries.append(entry)
    return entries


async def listing(
    state: FrontendState, gallery: ModelGallery
) -> tuple[list[dict[str, Any]], list[dict[str, str]], ClusterBudget | None]:
    models, errors = await gallery.all_models()
    registry = await read_registry(state)
    nodes, rules = registry if registry else ([], [])
    sizing = _Sizing(
        nodes,
        rules,
        cluster_budget(nodes),
        local_fields()["ram_total"],
        frozenset(state.configs),
        dict(state.aliases),
    )
    entries = await asyncio.to_thread(_entries, gallery, models, sizing)  # a large index: off the loop
    return entries, errors, sizing.overall


async def apply_request(gallery: ModelGallery, request: Request) -> JSONResponse:
    """POST /models/apply: check the request and the entry, then start the job."""
    try:
        body = await json_body(request)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _bad('send a JSON object {"id": "<gallery>@<model>"}', "body")
    for unsupported in ("config_url", "url"):
        if body.get(unsupported):
            return _bad(
                f'field {unsupported!r}: installing from a config URL is not supported; send "id"',
                unsupported,
            )
    wanted = body.get("id")
    if not isinstance(wanted, str) or not wanted.strip():
        return _bad(
            'field \'id\' is required: "<gallery>@<model>" or "<model>" (GET /models/available)', "id"
        )
    overrides = body.get("overrides") or {}
    if not isinstance(overrides, dict):
        return _bad("field 'overrides' must be a mapping of config fields", "overrides")
    if model_configs.depth(overrides) > model_configs.DEPTH_MAX:
        return _bad(
            f"field 'overrides' is nested more than {model_configs.DEPTH_MAX} levels deep", "overrides"
        )
    models, errors = await gallery.all_models()
    model = gallery.find(models, wanted.strip())
    if model is None:
        unread = "; ".join(e["error"] for e in errors)
        message = f"no configured gallery lists {wanted!r}; GET /models/available lists them"
        return JSONResponse(
            envelope(message + (f" (unreadable: {unread})" if unread else ""), "not_found_error", 404, "id"),
            status_code=404,
        )
    name = body.get("name") or model.entry.name
    problem = name_problem(name)
    if problem is not None:
        field_name = "name" if body.get("name") else "id"
        return _bad(f"field {field_name!r}: the model name {problem}", field_name)
    try:
        job_id = await gallery.start(model, str(name), overrides)
    except InstallError as exc:
        return _bad(str(exc), exc.field)
    base = str(request.base_url)
    return JSONResponse({"uuid": job_id, "status": f"{base}models/jobs/{job_id}"})


def build_model_gallery_router(state: FrontendState, gallery: ModelGallery) -> APIRouter:
    router = APIRouter()

    @router.get("/models/available")
    async def available() -> JSONResponse:
        entries, errors, _overall = await listing(state, gallery)
        if errors and not entries and (gallery.refs or gallery.config_error):
            message = "no model gallery could be read: " + "; ".join(e["error"] for e in errors)
            return JSONResponse(envelope(message, "gallery_error", 502, "galleries"), status_code=502)
        return JSONResponse(entries)

    @router.get("/api/gallery/models")
    async def admin_listing() -> JSONResponse:
        entries, errors, overall = await listing(state, gallery)
        body: dict[str, Any] = {
            "models": entries,
            "errors": errors,
            "galleries": [{"name": r.name, "url": r.url} for r in gallery.refs],
        }
        if overall is not None:
            body["cluster"] = overall.as_json()
        return JSONResponse(body)

    @router.get("/models/galleries")
    async def galleries() -> JSONResponse:
        return JSONResponse([{"name": r.name, "url": r.url} for r in gallery.refs])

    @router.post("/models/apply")
    async def apply(request: Request) -> JSONResponse:
        return await apply_request(gallery, request)

    @router.get("/models/jobs")
    async def jobs() -> JSONResponse:
        rows = await state.pool.fetch(q("model_gallery_jobs"), JOBS_LISTED)
        return JSONResponse({row["id"]: job_status(row) for row in rows})

    @router.get("/models/jobs/{job_id}")
    async def job(job_id: JobId) -> JSONResponse:
        with contextlib.suppress(ValueError):
            uuid.UUID(job_id)
            await gallery.fail_if_stale(job_id)
            row = await operations.get(state.pool, job_id)
            if row is not None and row["op_type"] == operations.MODEL_INSTALL:
                return JSONResponse(job_status(row))
        return JSONResponse(
            envelope(
                f"no model install job {job_id!r}; GET /models/jobs lists them",
                "not_found_error",
                404,
                "uuid",
            ),
            status_code=404,
        )

    return router


def install_model_gallery(
    state: FrontendState, settings: FrontendModelGallerySettings, frontend_id: str
) -> ModelGallery | None:
    """The gallery over the frontend's config revisions (none without them: nothing to commit a config to)."""
    if state.config_revisions is None:
        return None
    return ModelGallery(state.pool, state.config_revisions, settings, frontend_id)
