"""Admin: edit model configs — raw YAML, structured patch, rename, disable/enable.

Every edit answers with the new `config_revision` (also as its `ETag`) and `pending_cleanup` (old
replicas not yet confirmed stopped). From the moment the response returns, no frontend routes to an
old replica. PUT and PATCH take `If-Match: <config_revision>`: an edit based on a revision that is no
longer the committed one is a 409 that names the current revision (edits commit one at a time per
model, revisions/edits.py). Text that is not valid Unicode is a 400 naming its field.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path as FilePath
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import envelope
from corral.frontend.json_body import InvalidText, documented_body, json_body
from corral.models.aliases import AliasConfigError, is_alias_document, parse_alias
from corral.models.config import ModelConfigError
from corral.models.names import name_problem
from corral.models.text import invalid_text, text_problem
from corral.revisions.edits import ConfigRevisions, Edit, ModelMissing, StaleBase, dump_yaml
from corral.store import operations, revisions

DEPTH_MAX = 32  # a model config nests 3-4 levels; the revision hash and YAML dump recurse per level
ConfigName = Annotated[str, Path(max_length=NAME_MAX)]  # model_config_states.model_name varchar(255)


class _NoAliasLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """YAML without anchors and aliases: `*a` repeated a few levels deep expands to billions of nodes when
    the config is hashed or dumped (a "billion laughs" body of a few hundred bytes)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                "YAML aliases (*name) are not accepted in a model config; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def parse_yaml(raw: bytes) -> Any:
    try:
        return yaml.load(raw, Loader=_NoAliasLoader)
    except RecursionError:
        raise yaml.YAMLError(f"it is nested more than {DEPTH_MAX} levels deep") from None


def depth(value: Any) -> int:
    """How deeply mappings and lists nest (iterative: a deep value must not exhaust the stack here)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= DEPTH_MAX:
                todo.extend(
                    (child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
                )
    return deepest


def _iso(state: Any) -> str | None:
    if state is None or state["updated_s"] is None:
        return None
    return dt.datetime.fromtimestamp(state["updated_s"], dt.UTC).isoformat()


def _bad(message: str, field: str = "body") -> JSONResponse:
    return JSONResponse(envelope(message, "invalid_request_error", "invalid_value", field), status_code=400)


def _missing(name: str) -> JSONResponse:
    return JSONResponse(
        envelope(f"model {name!r} is not configured", "not_found_error", 404), status_code=404
    )


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


def etag(revision: str) -> str:
    return f'"{revision}"'


def if_match(request: Request) -> set[str] | None:
    """The revisions an `If-Match` header accepts (quotes and `W/` dropped; `*` kept); None without one."""
    header = request.headers.get("if-match")
    if header is None:
        return None
    return {tag.strip().removeprefix("W/").strip('"') for tag in header.split(",") if tag.strip()}


def _stale(exc: StaleBase) -> JSONResponse:
    body = {**envelope(str(exc), "invalid_request_error", 409, "If-Match"), "config_revision": exc.current}
    return JSONResponse(body, status_code=409, headers={"ETag": etag(exc.current)} if exc.current else None)


async def apply(revs: ConfigRevisions, name: str, raw: Any, expected: set[str] | None = None) -> JSONResponse:
    """PUT: `raw` replaces the configuration (a model's or an alias's)."""
    refused = _bad_name(name)
    if refused is not None:
        return refused
    if not isinstance(raw, dict):
        return _bad("the configuration must be a mapping (name, backend, parameters.model, …)")
    if depth(raw) > DEPTH_MAX:
        return _bad(f"the configuration is nested more than {DEPTH_MAX} levels deep")
    field = invalid_text(raw)
    if field is not None:
        return _bad(text_problem(field), field)
    if is_alias_document(raw):
        return await apply_alias(revs, name, raw, expected)
    if raw.get("name") != name:
        return _bad(
            f"field 'name' must be {name!r} (use POST /api/model-configs/{name}/rename to rename)", "name"
        )
    return await commit(revs, name, lambda _committed: raw, expected)


async def commit(
    revs: ConfigRevisions, name: str, edit: Edit, expected: set[str] | None = None
) -> JSONResponse:
    """Commit `edit` of the model's committed configuration and answer its revision."""
    try:
        cfg, pending = await revs.apply(name, edit, expected)
    except StaleBase as exc:
        return _stale(exc)
    except ModelMissing:
        return _missing(name)
    except ModelConfigError as exc:
        return _bad(str(exc), exc.field or "body")
    await operations.record_done(
        revs.pool,
        operations.NewOperation(
            name,
            operations.CONFIG_EDIT,
            message=f"config revision {cfg.revision}; {pending} old replica(s) to stop",
        ),
    )
    return JSONResponse(
        {"name": name, "config_revision": cfg.revision, "pending_cleanup": pending, "disabled": cfg.disabled},
        headers={"ETag": etag(cfg.revision)},
    )


async def apply_alias(
    revs: ConfigRevisions, name: str, raw: dict[str, Any], expected: set[str] | None = None
) -> JSONResponse:
    try:
        alias, target = parse_alias(raw, FilePath(f"{name}.yaml"))
        if alias != name:
            return _bad(f"field 'name' must be {name!r}", "name")
        await revs.set_alias(name, target, expected)
    except StaleBase as exc:
        return _stale(exc)
    except (AliasConfigError, ModelConfigError) as exc:
        return _bad(str(exc), "alias")
    return JSONResponse({"name": name, "alias": target})


async def _json_object(request: Request) -> dict[str, Any] | JSONResponse | None:
    try:
        body = await json_body(request)
    except InvalidText as exc:
        return _bad(str(exc), exc.field)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _patched(body: dict[str, Any]) -> Edit:
    def edit(committed: dict[str, Any] | None) -> dict[str, Any]:
        if committed is None:
            raise ModelMissing()
        return merge(committed, body)

    return edit


async def patch_config(revs: ConfigRevisions, name: str, request: Request) -> JSONResponse:
    """PATCH: a JSON merge patch of the committed configuration (merged under the model's lock)."""
    if name not in revs.configs:
        return _missing(name)
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    if body is None:
        return _bad('send a JSON merge patch object, e.g. {"context_size": 4096}')
    if depth(body) > DEPTH_MAX:
        return _bad(f"the patch is nested more than {DEPTH_MAX} levels deep")
    if "name" in body and body["name"] != name:
        return _bad(
            f"field 'name' must be {name!r} (use POST /api/model-configs/{name}/rename to rename)", "name"
        )
    return await commit(revs, name, _patched(body), if_match(request))


async def set_disabled(revs: ConfigRevisions, name: str, disabled: bool) -> JSONResponse:
    if name not in revs.configs:
        return _missing(name)
    return await commit(revs, name, _patched({"disabled": disabled}))


async def rename_config(revs: ConfigRevisions, name: str, request: Request) -> JSONResponse:
    cfg = revs.configs.get(name)
    if cfg is None:
        return _missing(name)
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    new_name = body.get("name") if body else None
    if not isinstance(new_name, str) or not new_name.strip():
        return _bad('send {"name": "<new model name>"}', "name")
    refused = _bad_name(new_name)
    if refused is not None:
        return refused
    if new_name in revs.configs:
        return JSONResponse(
            envelope(f"model {new_name!r} already exists", "invalid_request_error", 409), status_code=409
        )
    response = await apply(revs, new_name, {**cfg.raw, "name": new_name})
    if response.status_code == 200:
        await revs.remove(name)
    return response


def build_model_configs_router(revs: ConfigRevisions) -> APIRouter:
    router = APIRouter(prefix="/api/model-configs")

    @router.get("")
    async def list_configs() -> JSONResponse:
        """Every configured model's revision, disabled flag and last edit (the YAML is per model: GET …/<name>)."""
        states = await revisions.all_states(revs.pool)
        return JSONResponse(
            {
                "configs": [
                    {
                        "name": name,
                        "config_revision": cfg.revision,
                        "disabled": cfg.disabled,
                        "updated_at": _iso(states.get(name)),
                    }
                    for name, cfg in sorted(revs.configs.items())
                ]
            }
        )

    @router.get("/{name}")
    async def get_config(name: ConfigName) -> JSONResponse:
        cfg = revs.configs.get(name)
        if cfg is None:
            return _missing(name)
        return JSONResponse(
            {
                "name": name,
                "config_revision": cfg.revision,
                "disabled": cfg.disabled,
                "yaml": dump_yaml(cfg.raw),
                "config": cfg.raw,
            },
            headers={"ETag": etag(cfg.revision)},
        )

    @router.put("/{name}", openapi_extra=documented_body({"type": "object"}, "application/yaml"))
    async def put_yaml(name: ConfigName, request: Request) -> JSONResponse:
        body = await request.body()
        try:
            raw = await asyncio.to_thread(
                parse_yaml, body
            )  # up to CORRAL_MODEL_CONFIG_MAX_BODY: off the loop
        except yaml.YAMLError as exc:
            return _bad(f"the body is not valid YAML: {exc}")
        return await apply(revs, name, raw, if_match(request))

    @router.patch("/{name}", openapi_extra=documented_body({"type": "object"}))
    async def patch(name: ConfigName, request: Request) -> JSONResponse:
        return await patch_config(revs, name, request)

    @router.post("/{name}/disable")
    async def disable(name: ConfigName) -> JSONResponse:
        return await set_disabled(revs, name, True)

    @router.post("/{name}/enable")
    async def enable(name: ConfigName) -> JSONResponse:
        return await set_disabled(revs, name, False)

    @router.post(
        "/{name}/rename",
        openapi_extra=documented_body(
            {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
        ),
    )
    async def rename(name: ConfigName, request: Request) -> JSONResponse:
        return await rename_config(revs, name, request)

    return router
