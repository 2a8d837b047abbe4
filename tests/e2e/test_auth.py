"""Auth matrix: every admin route without, with wrong, with a user and with an admin key; worker
routes with missing/wrong registration token; `/v1/*` user keys when auth is enabled; revocation."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.cluster import Cluster

pytestmark = pytest.mark.slow

NODE = str(uuid.uuid4())  # a well-formed id nobody has: the right key gets past auth to a 404
ADMIN_ROUTES = [
    ("GET", "/api/nodes"),
    ("GET", "/api/nodes/models"),
    ("GET", f"/api/nodes/{NODE}"),
    ("DELETE", f"/api/nodes/{NODE}"),
    ("GET", f"/api/nodes/{NODE}/models"),
    ("POST", f"/api/nodes/{NODE}/drain"),
    ("POST", f"/api/nodes/{NODE}/resume"),
    ("POST", f"/api/nodes/{NODE}/approve"),
    ("GET", f"/api/nodes/{NODE}/labels"),
    ("PUT", f"/api/nodes/{NODE}/labels"),
    ("PATCH", f"/api/nodes/{NODE}/labels"),
    ("DELETE", f"/api/nodes/{NODE}/labels/zone"),
    ("PUT", f"/api/nodes/{NODE}/max-replicas-per-model"),
    ("DELETE", f"/api/nodes/{NODE}/max-replicas-per-model"),
    ("GET", "/api/nodes/scheduling"),
    ("GET", "/api/settings"),
    ("POST", "/api/settings"),
    ("GET", "/api/keys"),
    ("DELETE", f"/api/keys/{NODE}"),
    ("GET", "/api/nodes/labels"),
]
WORKER_ROUTES = [
    ("POST", "/api/node/register"),
    ("POST", f"/api/node/{NODE}/heartbeat"),
    ("POST", f"/api/node/{NODE}/drain"),
    ("POST", f"/api/node/{NODE}/resume"),
    ("POST", f"/api/node/{NODE}/deregister"),
    ("DELETE", f"/api/node/{NODE}"),
    ("GET", f"/api/node/{NODE}/models"),
]


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-auth", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    try:
        c.start_frontend()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def user_key(cluster: Cluster) -> str:
    reply = httpx.post(
        f"{cluster.frontend_url}/api/keys",
        headers=cluster.admin_headers,
        json={"name": "tests", "role": "user"},
    )
    assert reply.status_code == 201
    return str(reply.json()["key"])


def _call(cluster: Cluster, method: str, path: str, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    body = {"value": 2} if "max-replicas" in path else {"zone": "a"}
    return httpx.request(method, f"{cluster.frontend_url}{path}", headers=headers, json=body, timeout=10)


@pytest.mark.parametrize("method, path", ADMIN_ROUTES)
def test_admin_routes_need_an_admin_key(cluster: Cluster, user_key: str, method: str, path: str) -> None:
    missing = _call(cluster, method, path, None)
    assert missing.status_code == 401 and "admin API key required" in missing.text
    wrong = _call(cluster, method, path, "corral-not-a-key")
    assert wrong.status_code == 401 and "corral-not-a-key" not in wrong.text  # secrets are never echoed
    assert _call(cluster, method, path, user_key).status_code == 403
    assert _call(cluster, method, path, cluster.admin_key).status_code not in (401, 403)


@pytest.mark.parametrize("method, path", WORKER_ROUTES)
def test_worker_routes_need_the_registration_token(cluster: Cluster, method: str, path: str) -> None:
    missing = httpx.request(method, f"{cluster.frontend_url}{path}", json={})
    assert missing.status_code == 401
    wrong = httpx.request(
        method, f"{cluster.frontend_url}{path}", json={}, headers={"Authorization": "Bearer wrong-token"}
    )
    assert wrong.status_code == 401 and "wrong-token" not in wrong.text
    right = httpx.request(
        method,
        f"{cluster.frontend_url}{path}",
        json={"name": "n", "address": "h:1", "token": cluster.token},
        headers={"Authorization": f"Bearer {cluster.token}"},
    )
    assert right.status_code != 401


def test_the_ui_event_stream_needs_an_admin_key(cluster: Cluster, user_key: str) -> None:
    url = f"{cluster.frontend_url}/api/events"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {user_key}"}).status_code == 403
    with httpx.stream("GET", url, headers=cluster.admin_headers, timeout=10) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        assert next(stream.iter_lines()) == "event: hello"


def test_keys_are_listed_without_secrets(cluster: Cluster, user_key: str) -> None:
    listing = httpx.get(f"{cluster.frontend_url}/api/keys", headers=cluster.admin_headers).text
    assert user_key not in listing and cluster.admin_key not in listing and "key_hash" not in listing


def test_v1_needs_a_live_user_key_when_auth_is_enabled_and_revocation_applies_at_once(
    cluster: Cluster, user_key: str
) -> None:
    proc, url = cluster.spawn_frontend("frontend-auth", "--auth")
    try:
        assert httpx.get(f"{url}/v1/models").status_code == 401
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert (
            httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {user_key}"}).status_code == 200
        )
        assert httpx.get(f"{cluster.frontend_url}/v1/models").status_code == 200  # auth off on the other one
        key = httpx.post(f"{url}/api/keys", headers=cluster.admin_headers, json={"role": "user"}).json()
        auth = {"Authorization": f"Bearer {key['key']}"}
        assert httpx.get(f"{url}/v1/models", headers=auth).status_code == 200  # now cached on frontend-auth
        revoked = httpx.delete(f"{cluster.frontend_url}/api/keys/{key['id']}", headers=cluster.admin_headers)
        assert revoked.status_code == 200  # revoked through the *other* frontend
        deadline = time.monotonic() + 5  # NATS invalidation, well inside the 10 s cache TTL
        while httpx.get(f"{url}/v1/models", headers=auth).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{url}/v1/models", headers=auth).status_code == 401
    finally:
        proc.stop()


OPEN_ONLY_WITHOUT_AUTH = [
    ("GET", "/api/models"),
    ("GET", "/api/models/anything/load-status"),
    ("GET", "/api/models/variants/anything"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    ("GET", "/v1/models"),
    ("GET", "/metrics"),
    ("GET", "/no-such-route"),
]
SCRAPE_TOKEN = "corral-test-scrape-token"


def test_with_auth_every_route_but_the_health_checks_needs_a_key(cluster: Cluster, user_key: str) -> None:
    proc, url = cluster.spawn_frontend("frontend-auth-all", "--auth")
    try:
        for method, path in OPEN_ONLY_WITHOUT_AUTH:
            assert httpx.request(method, f"{cluster.frontend_url}{path}").status_code != 401, path  # auth off
            refused = httpx.request(method, f"{url}{path}")
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"] == "Bearer"
            allowed = httpx.request(method, f"{url}{path}", headers={"Authorization": f"Bearer {user_key}"})
            assert allowed.status_code != 401, path
        assert httpx.get(f"{url}/api/models").json()["error"]["message"] == (
            "API key required: send Authorization: Bearer <key> (auth is enabled: LOCALAI_AUTH)"
        )
        for path in ("/healthz", "/readyz", "/app", "/app/nodes/anything", "/app/assets/app.css"):
            assert httpx.get(f"{url}{path}").status_code == 200, path  # the web UI's pages hold no data
        worker_route = httpx.post(
            f"{url}/api/node/register",
            headers={"Authorization": f"Bearer {cluster.token}"},
            json={"name": "auth-n", "address": "h:1", "token": cluster.token},
        )
        assert (
            worker_route.status_code == 201
        )  # workers authenticate with the registration token, not API keys
    finally:
        proc.stop()


def test_metrics_take_the_scrape_token(cluster: Cluster) -> None:
    proc, url = cluster.spawn_frontend("frontend-scrape", "--metrics-token", SCRAPE_TOKEN)
    try:
        missing = httpx.get(f"{url}/metrics")
        assert missing.status_code == 401 and missing.json()["error"]["message"] == (
            "metrics need the scrape token (CORRAL_METRICS_TOKEN) or an API key: send Authorization: Bearer <token>"
        )
        wrong = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"})
        assert (
            wrong.status_code == 401 and wrong.json()["error"]["message"] == "invalid scrape token or API key"
        )
        scraped = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
        assert scraped.status_code == 200 and "# HELP" in scraped.text
        assert httpx.get(f"{url}/api/models").status_code == 200  # auth is off: only /metrics is guarded
        assert SCRAPE_TOKEN not in (proc.log() + missing.text + wrong.text)
    finally:
        proc.stop()
