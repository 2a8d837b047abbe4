"""`corral up` approves the workers it started itself, through the admin API; any other node
that registers with the same frontend stays pending until an admin approves it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx

APPROVE_TIMEOUT_S = 120.0
POLL_S = 0.1


class ApprovalError(Exception):
    """A worker started by `corral up` did not register (or could not be approved) in time; see its log."""


class NodeApprover:
    def __init__(self, frontend_url: str, admin_key: str) -> None:
        self.frontend_url = frontend_url
        self._headers = {"Authorization": f"Bearer {admin_key}"}

    def _nodes(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.frontend_url}/api/nodes", headers=self._headers, timeout=5.0)
        if response.status_code != 200:
            raise ApprovalError(
                f"GET /api/nodes answered HTTP {response.status_code}: the admin key in the "
                "data dir does not match the frontend's"
            )
        return list(response.json())

    def approve_own(self, child: Any, name: str, address: str, stopping: Callable[[], bool]) -> None:
        """Wait until the node `name` registered at `address` (the one we started) appears, then approve it."""
        deadline = time.monotonic() + APPROVE_TIMEOUT_S
        while time.monotonic() < deadline and not stopping():
            if child.popen.poll() is not None:
                return  # the caller's readiness wait reports the exit with the log tail
            with contextlib.suppress(httpx.HTTPError):
                for node in self._nodes():
                    if node["name"] != name or node["address"] != address:
                        continue
                    if node["approved"]:
                        return
                    response = httpx.post(
                        f"{self.frontend_url}/api/nodes/{node['id']}/approve",
                        headers=self._headers,
                        timeout=5.0,
                    )
                    if response.status_code in (200, 400):  # 400: someone approved it meanwhile
                        return
            time.sleep(POLL_S)
        if not stopping():
            raise ApprovalError(f"worker {name} did not register within {APPROVE_TIMEOUT_S:g}s; see its log")
