"""Registration and auth that cannot be flooded (issue 21 item 5), against real frontends and PostgreSQL.

New nodes past the pending cap get 429 naming it; registrations past the per-source rate get 429 with
Retry-After; a pending node that never comes back expires; wrong API keys in a row from one source end
in 429 with Retry-After, counted in a metric, and the refused ones cost no PostgreSQL lookup — proven by
holding an exclusive lock on `api_keys` (any lookup would wait for it) while they are answered. Knobs
are small (set by their env vars) so the tests run fast; no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
import httpx
import pytest

from support.cluster import Cluster
from support.prometheus import metric_value
from support.waiting import wait_for

pytestmark = pytest.mark.slow

PENDING_CAP = 5
FAILURE_LIMIT = 6
FAILURE_WINDOW_S = 6.0
CALL_TIMEOUT_S = 10.0  # a refused key that waited on the locked table would time out here instead


def _cluster(root: Path, database_url: str, nats_url: str, **env: str) -> Cluster:
    c = Cluster(
        root=root / f"e2e-admission-{uuid.uuid4().hex[:6]}",
        database_url=database_url,
        nats_url=nats_url,
        auto_approve=False,
        frontend_env=env,
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    c.start_frontend()
    return c


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = _cluster(
        state_root,
        make_database(),
        nats_url,
        CORRAL_MAX_PENDING_NODES=str(PENDING_CAP),
        CORRAL_AUTH_FAILURE_LIMIT=str(FAILURE_LIMIT),
        CORRAL_AUTH_FAILURE_WINDOW=f"{FAILURE_WINDOW_S:g}s",
    )
    try:
        yield c
    finally:
        c.stop()


def _register(c: Cluster, name: str, node_token: str = "") -> httpx.Response:
    headers = {"Authorization": f"Bearer {c.token}", **({"X-Node-Token": node_token} if node_token else {})}
    return httpx.post(
        f"{c.frontend_url}/api/node/register",
        headers=headers,
        timeout=CALL_TIMEOUT_S,
        json={"name": name, "address": "127.0.0.1:1", "token": c.token},
    )


def _nodes(c: Cluster) -> list[dict[str, object]]:
    return list(
        httpx.get(f"{c.frontend_url}/api/nodes", headers=c.admin_headers, timeout=CALL_TIMEOUT_S).json()
    )


def test_registrations_past_the_pending_cap_get_429_naming_the_setting(cluster: Cluster) -> None:
    names = [f"flood-{i:02d}" for i in range(PENDING_CAP + 15)]
    with ThreadPoolExecutor(8) as pool:  # concurrently: the cap must hold under a race too
        replies = dict(zip(names, pool.map(lambda n: _register(cluster, n), names), strict=True))
    accepted = sorted(n for n, r in replies.items() if r.status_code == 201)
    refused = [r for r in replies.values() if r.status_code == 429]
    assert len(accepted) == PENDING_CAP and len(refused) == 15
    assert refused[0].json()["error"]["message"] == (
        f"{PENDING_CAP} nodes are already waiting for approval (CORRAL_MAX_PENDING_NODES): approve them (POST "
        "/api/nodes/<id>/approve) or delete them (DELETE /api/nodes/<id>), or raise CORRAL_MAX_PENDING_NODES; "
        "never-approved nodes that stop registering expire after CORRAL_PENDING_NODE_EXPIRY"
    )
    assert sorted(str(n["name"]) for n in _nodes(cluster) if n["status"] == "pending") == accepted
    again = _register(cluster, accepted[0], node_token=replies[accepted[0]].json()["node_token"])
    assert again.status_code == 201  # a pending node registering again is no new node
    approved = replies[accepted[1]].json()["id"]
    assert (
        httpx.post(
            f"{cluster.frontend_url}/api/nodes/{approved}/approve",
            headers=cluster.admin_headers,
            timeout=CALL_TIMEOUT_S,
        ).status_code
        == 200
    )
    assert _register(cluster, "flood-after-approval").status_code == 201  # approving one frees a place
    assert (
        metric_value(cluster.frontend_url, 'corral_node_registrations_refused_total{reason="pending_cap"}')
        >= 15
    )


def test_registrations_past_the_rate_of_one_source_get_429_with_retry_after(
    state_root: Path, make_database: Callable[[], str], nats_url: str
) -> None:
    c = _cluster(state_root, make_database(), nats_url, CORRAL_NODE_REGISTER_RATE="3")
    try:
        first = _register(c, "rate-node")
        again = [_register(c, "rate-node", node_token=first.json()["node_token"]) for _ in range(2)]
        over = _register(c, "rate-node", node_token=first.json()["node_token"])
        wrong_token = httpx.post(
            f"{c.frontend_url}/api/node/register",
            headers={"Authorization": "Bearer guess"},
            json={"name": "x", "address": "127.0.0.1:1", "token": "guess"},
            timeout=10,
        )
    finally:
        c.stop()
    assert [r.status_code for r in [first, *again]] == [201] * 3
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
    assert over.json()["error"]["message"].startswith(
        "too many registrations from this address: at most 3 a minute (CORRAL_NODE_REGISTER_RATE); retry after "
    )
    assert wrong_token.status_code == 429  # token guesses are registrations too


def test_a_pending_node_that_never_comes_back_expires(
    state_root: Path, make_database: Callable[[], str], nats_url: str
) -> None:
    c = _cluster(
        state_root,
        make_database(),
        nats_url,
        CORRAL_PENDING_NODE_EXPIRY="2s",
        CORRAL_HEALTH_CHECK_INTERVAL="0.3s",
    )
    try:
        silent = _register(c, "silent-pending").json()["id"]
        kept = _register(c, "approved-then-silent").json()["id"]
        assert (
            httpx.post(
                f"{c.frontend_url}/api/nodes/{kept}/approve", headers=c.admin_headers, timeout=CALL_TIMEOUT_S
            ).status_code
            == 200
        )
        assert {n["id"] for n in _nodes(c)} == {silent, kept}
        wait_for(lambda: silent not in {n["id"] for n in _nodes(c)}, "the silent pending node to expire", 30)
        assert {n["id"] for n in _nodes(c)} == {kept}  # an approved node is never expired
        assert c.frontend is not None
        assert "never approved and silent for" in c.frontend.log()
        assert "CORRAL_PENDING_NODE_EXPIRY" in c.frontend.log()
    finally:
        c.stop()


async def _admin_get(http: httpx.AsyncClient, url: str, key: str) -> httpx.Response:
    return await http.get(
        f"{url}/api/nodes", headers={"Authorization": f"Bearer {key}"}, timeout=CALL_TIMEOUT_S
    )


async def test_wrong_admin_keys_in_a_row_end_in_429_with_retry_after_and_cost_no_lookup_each(
    cluster: Cluster,
) -> None:
    url = cluster.frontend_url
    async with httpx.AsyncClient() as http:
        assert (await _admin_get(http, url, cluster.admin_key)).status_code == 200  # seen valid: known good
        new_key = (
            await http.post(
                f"{url}/api/keys",
                headers=cluster.admin_headers,
                timeout=CALL_TIMEOUT_S,
                json={"name": "later", "role": "admin"},
            )
        ).json()["key"]
        lookups_before = metric_value(url, "corral_api_key_lookups_total")
        guesses = [await _admin_get(http, url, f"corral-guess-{i}") for i in range(FAILURE_LIMIT)]
        assert [r.status_code for r in guesses] == [401] * FAILURE_LIMIT
        conn = await asyncpg.connect(cluster.database_url)
        try:
            async with conn.transaction():  # from here, a key lookup would wait for this lock
                await conn.execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
                refused = [await _admin_get(http, url, f"corral-more-{i}") for i in range(20)]
                repeated = await _admin_get(http, url, "corral-guess-0")  # known wrong: answered from memory
                first_use = await _admin_get(http, url, new_key)  # never seen here: waits like the guesses
        finally:
            await conn.close()
        lookups = (
            metric_value(url, "corral_api_key_lookups_total") - lookups_before
        )  # before the re-check below
        # Seen valid before: not locked out by the guesses (re-checked in PostgreSQL every 10 s, so after the lock).
        known_good = await _admin_get(http, url, cluster.admin_key)
        assert {r.status_code for r in refused} == {429} and repeated.status_code == 401
        assert known_good.status_code == 200 and first_use.status_code == 429
        retry_after_s = int(refused[0].headers["Retry-After"])
        assert 1 <= retry_after_s <= FAILURE_WINDOW_S
        assert refused[0].json()["error"] == {
            "code": 429,
            "type": "auth_error",
            "message": (
                f"too many unknown API keys from this address: {FAILURE_LIMIT} in {FAILURE_WINDOW_S:g}s "
                f"(CORRAL_AUTH_FAILURE_LIMIT, CORRAL_AUTH_FAILURE_WINDOW); retry after {retry_after_s}s with a valid key"
            ),
        }
        assert lookups == FAILURE_LIMIT
        assert metric_value(url, 'corral_auth_failures_total{outcome="unknown"}') >= FAILURE_LIMIT
        assert metric_value(url, 'corral_auth_failures_total{outcome="throttled"}') >= 21
        await asyncio.sleep(retry_after_s)  # the window ends: a client behind the same address gets its turn
        assert (await _admin_get(http, url, new_key)).status_code == 200
