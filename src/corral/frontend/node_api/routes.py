"""`/api/node/*`: worker self-service (register, heartbeat, drain, resume, deregister, models, NATS credentials).

Every route needs the registration token; every `/api/node/<id>/*` route and a re-registration of a known
name also need the node's own credential (`node_identity`: `X-Node-Token`, issued once at first registration).
"""

from __future__ import annotations

import hmac
import logging
from typing import Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError

from corral.frontend.bounds import (
    LABELS_MAX,
    NAME_MAX,
    TOKEN_MAX,
    ByteCount,
    LabelKey,
    LabelValue,
    ReplicasPerModel,
)
from corral.frontend.inference.openai import configured
from corral.frontend.node_api.admission import pending_cap_message
from corral.frontend.node_api.identity import (
    NODE_TOKEN_HEADER,
    NodeCredentials,
    credential_hash,
    new_credential,
    node_error,
    presented,
    rekey_hint,
)
from corral.frontend.node_api.token import check_registration_token
from corral.frontend.sources import source_of
from corral.frontend.state import FrontendState
from corral.nodes.heartbeat_rules import Beat
from corral.store import api_keys, vram_budget
from corral.store import nodes as node_store
from corral.store import replicas as replica_store
from corral.telemetry.families import NODE_REGISTRATIONS_REFUSED

log = logging.getLogger(__name__)

REGISTER_PATH = "/api/node/register"


class RegisterNodeRequest(BaseModel):
    """Each bound is its backend_nodes / node_labels column's (varchar(N), bigint)."""

    name: str = Field(min_length=1, max_length=NAME_MAX)
    node_type: Literal["backend", "agent"] = "backend"
    address: str = Field(default="", max_length=NAME_MAX)
    http_address: str = Field(default="", max_length=NAME_MAX)
    token: str = Field(default="", max_length=TOKEN_MAX)
    total_vram: ByteCount = 0
    available_vram: ByteCount = 0
    total_ram: ByteCount = 0
    available_ram: ByteCount = 0
    total_disk: ByteCount = 0
    available_disk: ByteCount = 0
    gpu_vendor: str = Field(default="", max_length=32)
    gpu_compute_capability: str = Field(default="", max_length=16)
    capability: str = Field(default="", max_length=64)
    labels: dict[LabelKey, LabelValue] = Field(default={}, max_length=LABELS_MAX)
    max_replicas_per_model: ReplicasPerModel = 1
    vram_budget: str = Field(default="", max_length=32)


class HeartbeatUpdate(BaseModel):
    available_vram: ByteCount | None = None
    total_vram: ByteCount | None = None
    available_ram: ByteCount | None = None
    available_disk: ByteCount | None = None
    total_disk: ByteCount | None = None
    gpu_vendor: str | None = Field(default=None, max_length=32)


def jsonable(row: Any) -> dict[str, Any]:
    out = {}
    for key, value in dict(row).items():
        if key in ("model_opts_blob", "token_hash", "credential_hash"):
            continue
        out[key] = value.isoformat() if hasattr(value, "isoformat") else value
    return out


def _token_refusal(state: FrontendState, presented: str) -> JSONResponse | None:
    if not state.registration_token:
        return None
    if not presented:
        return node_error(401, "registration token required")
    if not hmac.compare_digest(
        node_store.token_hash(presented), node_store.token_hash(state.registration_token)
    ):
        return node_error(401, "invalid registration token")
    return None


async def _register(
    state: FrontendState, body: RegisterNodeRequest, secret: str, credentials: NodeCredentials
) -> JSONResponse:
    refused = _token_refusal(state, body.token)
    if refused is not None:
        return refused
    if body.node_type == "backend" and not body.address:
        return node_error(400, "field 'address' is required for backend nodes (the worker's gRPC host:port)")
    facts = node_store.NodeFacts(**body.model_dump(exclude={"token", "labels"}))
    issued, issued_hash = new_credential()
    try:
        row = await node_store.register(
            state.pool,
            facts,
            body.token,
            body.labels,
            auto_approve=state.auto_approve_nodes,
            credential_hash=credential_hash(secret),
            new_credential_hash=issued_hash,
            max_pending=state.admission.max_pending_nodes,
        )
    except node_store.PendingCapReached as exc:
        NODE_REGISTRATIONS_REFUSED.labels("pending_cap").inc()
        log.warning(
            "refused a registration as new node %r: %d nodes already pending approval "
            "(CORRAL_MAX_PENDING_NODES)",
            body.name,
            exc.cap,
        )
        return node_error(429, pending_cap_message(exc.cap))
    except node_store.CredentialMismatch as exc:
        node = exc.node
        log.warning(
            "refused a registration as node %s (%s) from %s: %s",
            node["name"],
            node["id"],
            body.address or "-",
            "wrong node credential" if secret else "no node credential",
        )
        return node_error(
            409,
            f"node name {node['name']!r} is already registered (id {node['id']}) and this "
            f"registration did not present its credential ({NODE_TOKEN_HEADER} header, issued at its "
            f"first registration and kept in the worker's state directory); {rekey_hint(node['id'])}",
        )
    credentials.forget(row["id"])
    await vram_budget.refresh(state.pool, row["id"])  # resolve the (possibly sticky) budget against this VRAM
    state.router.view.remove_node(row["id"])
    await node_changed(state, row["id"], row["status"])
    log.info(
        "node %s (%s) registered at %s, status %s", row["name"], row["id"], row["address"], row["status"]
    )
    reply = {
        "id": row["id"],
        "name": row["name"],
        "node_type": row["node_type"],
        "status": row["status"],
        "created_at": row["created_at"].isoformat(),
    }
    if row["credential_hash"] == issued_hash:
        reply["node_token"] = issued  # returned this once; only its hash is kept
    if state.lifecycle is not None and state.lifecycle.minter is not None:
        reply.update(state.lifecycle.minter.credentials(row))
    reply.update(await agent_api_token(state, row))
    return JSONResponse(reply, status_code=201)


async def agent_api_token(state: FrontendState, row: Any) -> dict[str, str]:
    """An approved agent node gets a fresh API key (its previous one revoked) for calling the inference API:
    `api_token`, returned once, stored hashed (reference §4.2 register step 5)."""
    if row["node_type"] != "agent" or row["status"] == node_store.PENDING or not row["approved"]:
        return {}
    return {"api_token": await api_keys.provision_node_key(state.pool, row["id"], row["name"])}


async def node_changed(state: FrontendState, node_id: str, status: str) -> None:
    """A node's status changed here: stop routing to it unless healthy, and tell every frontend."""
    if status != node_store.HEALTHY:
        state.router.view.remove_node(node_id)
    if state.lifecycle is not None:
        await state.lifecycle.node_changed(node_id, status)


async def set_status(state: FrontendState, node_id: str, status: str, message: str, drop: bool) -> Any:
    if not await node_store.set_status(state.pool, node_id, status, drop_replicas=drop):
        return node_error(404, f"node {node_id} not found")
    await node_changed(state, node_id, status)
    return {"message": message}


async def record_heartbeat(state: FrontendState, node_id: str, update: HeartbeatUpdate) -> bool:
    if state.lifecycle is None:
        return (
            await node_store.heartbeat(state.pool, node_id, update.model_dump(exclude_none=True)) is not None
        )
    return bool(await state.lifecycle.checkpointer.beat(node_id, Beat(**update.model_dump())))


def build_node_router(state: FrontendState, credentials: NodeCredentials) -> APIRouter:
    router = APIRouter(prefix="/api/node")

    async def as_itself(node_id: str, request: Request) -> None:
        """Every `/api/node/<id>/*` route: the caller must present node <id>'s own credential."""
        refused = await credentials.refusal(node_id, presented(request))
        if refused is not None:
            raise _Refused(refused)

    own = [Depends(as_itself)]

    @router.post("/register", status_code=201)
    async def register(body: RegisterNodeRequest, request: Request) -> Any:
        return await _register(state, body, presented(request), credentials)

    @router.post("/{node_id}/heartbeat", dependencies=own)
    async def heartbeat(node_id: str, request: Request) -> Any:
        raw = await request.body()
        try:
            update = HeartbeatUpdate.model_validate_json(raw) if raw.strip() else HeartbeatUpdate()
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ())) or "body"
            return node_error(400, f"invalid heartbeat: field '{field}': {first.get('msg', 'invalid value')}")
        if not await record_heartbeat(state, node_id, update):
            return node_error(404, f"node {node_id} not found; register again")
        return {"message": "heartbeat received"}

    _add_status_routes(router, state, own)
    _add_self_service_routes(router, state, own)
    return router


def _add_status_routes(router: APIRouter, state: FrontendState, own: list[Any]) -> None:
    @router.post("/{node_id}/drain", dependencies=own)
    async def drain(node_id: str) -> Any:
        if not await node_store.drain(state.pool, node_id, by=node_store.WORKER):
            return node_error(404, f"node {node_id} not found")
        await node_changed(state, node_id, node_store.DRAINING)
        return {"message": "node set to draining"}

    @router.post("/{node_id}/resume", dependencies=own)
    async def resume(node_id: str) -> Any:
        node = await node_store.get(state.pool, node_id)
        if node is None:
            return node_error(404, f"node {node_id} not found")
        if not node["approved"]:
            return node_error(409, f"node {node_id} is pending approval; an admin must approve it first")
        if not await node_store.resume(state.pool, node_id, by_admin=False):
            return node_error(
                409,
                f"node {node_id} was drained by an admin and stays draining until an admin "
                f"resumes it (POST /api/nodes/{node_id}/resume)",
            )
        await node_changed(state, node_id, node_store.HEALTHY)
        return {"message": "node resumed"}

    @router.post("/{node_id}/deregister", dependencies=own)
    async def deregister(node_id: str) -> Any:
        return await set_status(state, node_id, node_store.OFFLINE, "node set to offline", True)

    @router.delete("/{node_id}", dependencies=own)
    async def delete(node_id: str) -> Any:
        return await set_status(state, node_id, node_store.OFFLINE, "node set to offline", True)


def _add_self_service_routes(router: APIRouter, state: FrontendState, own: list[Any]) -> None:
    @router.get("/{node_id}/models", dependencies=own)
    async def models(node_id: str) -> Any:
        return [jsonable(r) for r in await replica_store.of_node(state.pool, node_id)]

    @router.get("/{node_id}/mcp-servers/{model}", dependencies=own)
    async def mcp_servers(node_id: str, model: str) -> Any:
        """The MCP servers of a model's current config, for an agent worker to run: the only source it trusts
        (a server config on the bus could name any command; this one is what an admin configured)."""
        node = await node_store.get(state.pool, node_id)
        if node is None or node["node_type"] != "agent":
            return node_error(403, f"node {node_id} is not an agent node; only agent workers run MCP servers")
        cfg = configured(state, model)
        if cfg is None or not cfg.mcp:
            return node_error(404, f"model {model!r} has no MCP servers (an `mcp:` block in its config)")
        return {"model": cfg.name, **cfg.mcp.wire()}

    @router.post("/{node_id}/nats-credentials", dependencies=own)
    async def nats_credentials(node_id: str) -> Any:
        """Fresh NATS credentials for a live, approved node (a deleted node gets none: its JWT runs out)."""
        node = await node_store.get(state.pool, node_id)
        if node is None:
            return node_error(404, f"node {node_id} not found; register again")
        minter = state.lifecycle.minter if state.lifecycle is not None else None
        if minter is None:
            return node_error(409, "this frontend mints no NATS credentials (set LOCALAI_NATS_ACCOUNT_SEED)")
        minted = minter.credentials(node)
        if not minted:
            return node_error(
                409,
                f"node {node_id} is {node['status']} and not approved: no NATS credentials "
                f"until an admin approves it (POST /api/nodes/{node_id}/approve)",
            )
        return {"id": node["id"], "status": node["status"], **minted}


class _Refused(Exception):
    def __init__(self, response: JSONResponse) -> None:
        self.response = response


def install_node_api(app: FastAPI, state: FrontendState, credentials: NodeCredentials) -> NodeCredentials:
    """`credentials`: the node-credential cache; its `forget` hears every node event (re-key, deletion,
    re-registration on any frontend: checked afresh), subscribed when the node lifecycle is built."""

    async def within_register_rate(request: Request) -> None:
        """Registrations per source address, counted before the token is checked (a guess is a registration)."""
        if request.scope["path"] != REGISTER_PATH:
            return
        wait_s = state.admission.register_rate.take(source_of(request.scope))
        if wait_s > 0:
            NODE_REGISTRATIONS_REFUSED.labels("rate").inc()
            message, retry_after_s = state.admission.register_rate.refusal(wait_s)
            refused = node_error(429, message)
            refused.headers["Retry-After"] = str(retry_after_s)
            raise _Refused(refused)

    async def require_token(request: Request) -> None:
        refused = check_registration_token(request, state.registration_token)
        if refused is not None:
            raise _Refused(refused)

    @app.exception_handler(_Refused)
    async def _refused(_request: Request, exc: _Refused) -> Response:
        return exc.response

    app.include_router(
        build_node_router(state, credentials),
        dependencies=[Depends(within_register_rate), Depends(require_token)],
    )
    return credentials
