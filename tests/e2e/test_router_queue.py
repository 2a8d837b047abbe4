"""The router queue on real parts (issue 25): a frontend with one slot per replica, a worker, a simulator backend
whose generations take about a second. A request that finds the slot taken waits and is served when it frees; one
past its wait budget, or past the queue's depth, gets 429 with Retry-After naming the setting."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.cluster import Cluster

pytestmark = pytest.mark.slow

TOKEN_S = 0.25  # each generated word takes this long
WAIT_BUDGET = "1500ms"
DEPTH = 2


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-router-queue", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "slow.yaml").write_text(
        "name: slow\nbackend: simulator\nparameters:\n  model: sim\n"
        f'options:\n  - "output_token_time_s:{TOKEN_S}"\n'
    )
    (c.models_dir / "par2.yaml").write_text(  # two sequences at once: three slots by default
        "name: par2\nbackend: simulator\nparameters:\n  model: sim\n"
        f'options:\n  - "output_token_time_s:{TOKEN_S}"\n  - "parallel:2"\n'
    )
    try:
        c.start_frontend(
            "--replica-slots", "1", "--queue-timeout", WAIT_BUDGET, "--queue-max-depth", str(DEPTH)
        )
        c.start_worker("w1")
        yield c
    finally:
        c.stop()


def _chat(words: int) -> dict[str, object]:
    return {"model": "slow", "messages": [{"role": "user", "content": "hi"}], "max_tokens": words}


async def _post(client: httpx.AsyncClient, url: str, words: int) -> httpx.Response:
    return await client.post(f"{url}/v1/chat/completions", json=_chat(words))


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_queued_requests_are_served_in_turn_when_the_slot_frees(cluster: Cluster) -> None:
    url = cluster.frontend_url
    async with httpx.AsyncClient(timeout=60) as client:
        warm = await _post(client, url, 1)  # the load happens here, not in the measured burst
        assert warm.status_code == 200, warm.text
        before = _metric(
            (await client.get(f"{url}/metrics")).text, "corral_queue_wait_seconds_count", model="slow"
        )
        first = asyncio.create_task(_post(client, url, 2))  # ~0.5 s on the one slot
        await asyncio.sleep(0.1)
        second = asyncio.create_task(_post(client, url, 2))  # waits ~0.4 s: within the 1.5 s budget
        answers = await asyncio.gather(first, second)
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        assert all(a.json()["choices"][0]["message"]["content"] for a in answers)
        after = _metric(
            (await client.get(f"{url}/metrics")).text, "corral_queue_wait_seconds_count", model="slow"
        )
        assert after - before >= 1  # the second one did wait in the queue, and was served


async def test_past_the_wait_budget_a_request_gets_429_naming_the_setting(cluster: Cluster) -> None:
    url = cluster.frontend_url
    async with httpx.AsyncClient(timeout=60) as client:
        busy = asyncio.create_task(_post(client, url, 12))  # ~3 s on the only slot
        await asyncio.sleep(0.2)
        late = await _post(client, url, 1)
        assert late.status_code == 429, late.text
        error = late.json()["error"]
        assert "CORRAL_QUEUE_TIMEOUT" in error["message"] and error["code"] == "rate_limit_exceeded"
        assert re.fullmatch(r"\d+", late.headers["retry-after"]) and int(late.headers["retry-after"]) >= 1
        assert (await busy).status_code == 200
        metrics = (await client.get(f"{url}/metrics")).text
        assert _metric(metrics, "corral_queue_refused_total", model="slow", reason="timeout") >= 1


async def test_past_the_queue_depth_a_request_is_refused_at_once_naming_the_setting(cluster: Cluster) -> None:
    url = cluster.frontend_url
    async with httpx.AsyncClient(timeout=60) as client:
        busy = asyncio.create_task(_post(client, url, 8))  # ~2 s on the only slot
        await asyncio.sleep(0.2)
        waiting = [asyncio.create_task(_post(client, url, 1)) for _ in range(DEPTH)]
        await asyncio.sleep(0.2)
        refused = await _post(client, url, 1)
        assert refused.status_code == 429, refused.text
        assert "CORRAL_QUEUE_MAX_DEPTH" in refused.json()["error"]["message"]
        assert "retry-after" in refused.headers
        await asyncio.gather(busy, *waiting)  # the waiting ones end either way (served or timed out)


async def test_by_default_a_replica_takes_its_models_parallel_plus_one(cluster: Cluster) -> None:
    """No --replica-slots: `parallel:2` gives each replica three slots, so of four requests at once exactly one
    waits in the router queue (where priorities and fairness apply) instead of in the backend's own line."""
    proc, url = cluster.spawn_frontend("frontend-auto-slots")
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"model": "par2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            warm = await client.post(f"{url}/v1/chat/completions", json=body)
            assert warm.status_code == 200, warm.text
            before = _metric(
                (await client.get(f"{url}/metrics")).text, "corral_queue_wait_seconds_count", model="par2"
            )
            four = {**body, "max_tokens": 4}  # ~1 s each: all four arrive before any ends
            answers = await asyncio.gather(
                *(client.post(f"{url}/v1/chat/completions", json=four) for _ in range(4))
            )
            assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
            after = _metric(
                (await client.get(f"{url}/metrics")).text, "corral_queue_wait_seconds_count", model="par2"
            )
            assert after - before == 1
    finally:
        proc.stop()
