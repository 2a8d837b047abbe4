"""Which MCP servers an agent worker may run: asked of the frontend, kept for CACHE_S, bounded."""

from __future__ import annotations

from typing import Any

import pytest

from corral.agents import authority
from corral.agents.authority import CACHE_S, ServerAuthority
from corral.models.mcp import MCPConfigError


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class Frontend:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.remote: dict[str, Any] = {"mcpServers": {"docs": {"url": "https://mcp.example/docs"}}}

    async def __call__(self, model: str) -> dict[str, Any]:
        self.asked.append(model)
        if model == "unknown":
            raise LookupError("model 'unknown' has no MCP servers")
        return {"stdio_servers": None, "remote_servers": self.remote}


async def test_servers_are_asked_once_then_served_from_the_cache_until_it_expires() -> None:
    clock, frontend = Clock(), Frontend()
    auth = ServerAuthority(frontend, clock)
    first = await auth.servers("m")
    clock.now_s = CACHE_S - 0.01
    assert await auth.servers("m") is first
    assert frontend.asked == ["m"]
    clock.now_s = CACHE_S
    await auth.servers("m")
    assert frontend.asked == ["m", "m"]


async def test_an_edit_reaches_the_worker_after_the_cache_time() -> None:
    clock, frontend = Clock(), Frontend()
    auth = ServerAuthority(frontend, clock)
    assert [r.name for r in (await auth.servers("m")).remote] == ["docs"]
    frontend.remote = {}
    clock.now_s = CACHE_S + 1
    assert (await auth.servers("m")).remote == ()


async def test_the_frontends_refusal_reaches_the_caller_and_is_not_cached() -> None:
    frontend = Frontend()
    auth = ServerAuthority(frontend, Clock())
    for _ in range(2):
        with pytest.raises(LookupError, match="no MCP servers"):
            await auth.servers("unknown")
    assert frontend.asked == ["unknown", "unknown"]


async def test_a_payload_the_model_config_rules_refuse_is_refused_by_the_worker() -> None:
    frontend = Frontend()
    frontend.remote = {"mcpServers": {"docs": {"url": "file:///etc/passwd"}}}
    with pytest.raises(MCPConfigError, match="must be an http:// or https:// URL"):
        await ServerAuthority(frontend, Clock()).servers("m")


async def test_the_cache_keeps_at_most_cache_models_dropping_the_oldest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(authority, "CACHE_MODELS", 2)
    frontend = Frontend()
    auth = ServerAuthority(frontend, Clock())
    for model in ("a", "b", "c", "b", "a"):
        await auth.servers(model)
    assert frontend.asked == ["a", "b", "c", "a"]  # 'b' was still cached, 'a' had been dropped
