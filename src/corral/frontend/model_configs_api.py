"""Admin: edit model configs — raw YAML, structured patch, rename, disable/enable.

Every edit answers with the new `config_revision` and `pending_cleanup` (old replicas not yet
confirmed stopped). From the moment the response returns, no frontend routes to an old replica.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral.control.config_revisions import ConfigRevisions, dump_yaml
from corral.frontend.errors import envelope
from corral.models.aliases import AliasConfigError, is_alias_document, parse_alias
from corral.models.config import ModelConfigError
from corral.models.names import name_problem


def _bad(message: str, field: str = "body") -> JSONResponse:
    return JSONResponse(envelope(message, "invalid_request_error", "invalid_value", field), status_code=400)


def _missing(name: str) -> JSONResponse:
    return JSONResponse(envelope(f"model {name!r} is not configured", "not_found_error", 404), status_code=404)


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386): objects merge recursively, null deletes, anything else replaces."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _bad_name(name: str, field: str = "name") -> JSONResponse | None:
    """400 naming `field` when `name` is not a plain model/alias name (it becomes a file name)."""
    problem = name_problem(name)
    return None if problem is None else _bad(f"field {field!r} {problem}", field)


async def apply(revs: ConfigRevisions, name: str, raw: Any) -> JSONResponse:
    refused = _bad_name(name)
    if refused is not None:
        return refused
    if not isinstance(raw, dict):
        return _bad("the configuration must be a mapping (name, backend, parameters.model, …)")
    if is_alias_document(raw):
        return await apply_alias(revs, name, raw)
    if raw.get("name") != name:
        return _bad(f"field 'name' must be {name!r} (use POST /api/model-configs/{name}/rename to rename)", "name")
    try:
        cfg, pending = await revs.apply(name, raw)
    except ModelConfigError as exc:
        return _bad(str(exc))
    return JSONResponse({"name": name, "config_revision": cfg.revision, "pending_cleanup": pending,
                         "disabled": cfg.disabled})


async def apply_alias(revs: ConfigRevisions, name: str, raw: dict[str, Any]) -> JSONResponse:
    try:
        alias, target = parse_alias(raw, Path(f"{name}.yaml"))
        if alias != name:
            return _bad(f"field 'name' must be {name!r}", "name")
        await revs.set_alias(name, target)
    except (AliasConfigError, ModelConfigError) as exc:
        return _bad(str(exc), "alias")
    return JSONResponse({"name": name, "alias": target})


async def _json_object(request: Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def patch_config(revs: ConfigRevisions, name: str, request: Request) -> JSONResponse:
    cfg = revs.configs.get(name)
    if cfg is None:
        return _missing(name)
    body = await _json_object(request)
    if body is None:
        return _bad('send a JSON merge patch object, e.g. {"context_size": 4096}')
    return await apply(revs, name, merge(cfg.raw, body))


async def set_disabled(revs: ConfigRevisions, name: str, disabled: bool) -> JSONResponse:
    cfg = revs.configs.get(name)
    if cfg is None:
        return _missing(name)
    return await apply(revs, name, {**cfg.raw, "disabled": disabled})


async def rename_config(revs: ConfigRevisions, name: str, request: Request) -> JSONResponse:
    cfg = revs.configs.get(name)
    if cfg is None:
        return _missing(name)
    body = await _json_object(request)
    new_name = body.get("name") if body else None
    if not isinstance(new_name, str) or not new_name.strip():
        return _bad('send {"name": "<new model name>"}', "name")
    refused = _bad_name(new_name)
    if refused is not None:
        return refused
    if new_name in revs.configs:
        return JSONResponse(envelope(f"model {new_name!r} already exists", "invalid_request_error", 409),
                            status_code=409)
    response = await apply(revs, new_name, {**cfg.raw, "name": new_name})
    if response.status_code == 200:
        await revs.remove(name)
    return response


def build_model_configs_router(revs: ConfigRevisions) -> APIRouter:
    router = APIRouter(prefix="/api/model-configs")

    @router.get("/{name}")
    async def get_config(name: str) -> JSONResponse:
        cfg = revs.configs.get(name)
        if cfg is None:
            return _missing(name)
        return JSONResponse({"name": name, "config_revision": cfg.revision, "disabled": cfg.disabled,
                             "yaml": dump_yaml(cfg.raw), "config": cfg.raw})

    @router.put("/{name}")
    async def put_yaml(name: str, request: Request) -> JSONResponse:
        try:
            raw = yaml.safe_load(await request.body())
        except yaml.YAMLError as exc:
            return _bad(f"the body is not valid YAML: {exc}")
        return await apply(revs, name, raw)

    @router.patch("/{name}")
    async def patch(name: str, request: Request) -> JSONResponse:
        return await patch_config(revs, name, request)

    @router.post("/{name}/disable")
    async def disable(name: str) -> JSONResponse:
        return await set_disabled(revs, name, True)

    @router.post("/{name}/enable")
    async def enable(name: str) -> JSONResponse:
        return await set_disabled(revs, name, False)

    @router.post("/{name}/rename")
    async def rename(name: str, request: Request) -> JSONResponse:
        return await rename_config(revs, name, request)

    return router
