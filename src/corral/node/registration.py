"""HTTP calls from the worker to the frontend's `/api/node/*` (reference §4.2).

Every call carries the registration token (`Authorization: Bearer`) and, once the node has one,
its own credential (`X-Node-Token`, see `node_credential`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote

import httpx

from corral.node.errors import FrontendUnreachable, RegistrationRefused
from corral.runtime import loops

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 10.0
NODE_TOKEN_HEADER = "X-Node-Token"
REGISTER_ATTEMPTS = 10
BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 30.0


def backoff_s(attempt: int) -> float:
    """Delay before attempt n≥2: 2s, 4s, 8s … capped at 30s (the project's one backoff policy)."""
    return loops.backoff_s(max(1, attempt - 1), BACKOFF_FIRST_S, BACKOFF_MAX_S)


class FrontendClient:
    def __init__(self, base_url: str, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=HTTP_TIMEOUT_S)
        self.base_url = base_url

    def use_node_token(self, node_token: str) -> None:
        """Send this node's own credential on every call from now on."""
        if node_token:
            self._http.headers[NODE_TOKEN_HEADER] = node_token

    async def close(self) -> None:
        await self._http.aclose()

    async def register(self, body: dict[str, Any], *, attempts: int = REGISTER_ATTEMPTS) -> dict[str, Any]:
        last_error = ""
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                await asyncio.sleep(backoff_s(attempt))
            try:
                response = await self._http.post("/api/node/register", json=body)
            except httpx.HTTPError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "registration attempt %d/%d to %s failed: %s",
                    attempt,
                    attempts,
                    self.base_url,
                    last_error,
                )
                continue
            if response.status_code == 201:
                return dict(response.json())
            message = _error_text(response)
            if response.status_code in (400, 401, 403, 409):  # 409: the name is another credential's node
                raise RegistrationRefused(
                    f"frontend {self.base_url} refused registration (HTTP {response.status_code}): {message}"
                    + (
                        "; check --registration-token / LOCALAI_REGISTRATION_TOKEN"
                        if response.status_code == 401
                        else ""
                    )
                )
            last_error = f"HTTP {response.status_code}: {message}"
        raise FrontendUnreachable(
            f"could not register with {self.base_url} after {attempts} attempts: {last_error}; "
            "check --register-to / LOCALAI_REGISTER_TO"
        )

    async def heartbeat(self, node_id: str, body: dict[str, Any]) -> tuple[int, str]:
        """(HTTP status, error message or "")."""
        response = await self._http.post(f"/api/node/{node_id}/heartbeat", json=body)
        return response.status_code, "" if response.status_code == 200 else _error_text(response)

    async def nats_credentials(self, node_id: str) -> dict[str, Any]:
        """Fresh minted NATS credentials for this node (raises FrontendUnreachable with the reason)."""
        try:
            response = await self._http.post(f"/api/node/{node_id}/nats-credentials")
        except httpx.HTTPError as exc:
            raise FrontendUnreachable(
                f"NATS credential refresh at {self.base_url} failed: {type(exc).__name__}: {exc}"
            ) from None
        if response.status_code != 200:
            raise FrontendUnreachable(
                f"NATS credential refresh refused (HTTP {response.status_code}): {_error_text(response)}"
            )
        return dict(response.json())

    async def mcp_servers(self, node_id: str, model: str) -> dict[str, Any]:
        """A model's MCP servers as the frontend's config has them (agent nodes only); raises with the reason."""
        try:
            response = await self._http.get(f"/api/node/{node_id}/mcp-servers/{quote(model, safe='')}")
        except httpx.HTTPError as exc:
            raise FrontendUnreachable(
                f"reading the MCP servers of {model} from {self.base_url} failed: {type(exc).__name__}: {exc}"
            ) from None
        if response.status_code != 200:
            raise RegistrationRefused(
                f"the frontend gave no MCP servers for {model} "
                f"(HTTP {response.status_code}): {_error_text(response)}"
            )
        return dict(response.json())

    async def deregister(self, node_id: str) -> None:
        await self._http.post(f"/api/node/{node_id}/deregister")

    async def drain(self, node_id: str) -> None:
        await self._http.post(f"/api/node/{node_id}/drain")


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(error or body)
