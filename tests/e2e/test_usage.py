"""Usage accounting on the real stack (issue 25): the counts stored per API key x model x hour are the engine's,
exactly as the responses reported them (simulator and the tiny llama GGUF), reach /api/usage and /metrics, and a
frontend that stops writes what it had not flushed yet."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import openai
import pytest

from corral.models.defaults import write_tiny_model_config
from support.cluster import Cluster
from support.faults import write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

SIM = "usage-sim"
TINY = "usage-tiny"


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-usage", database_url=make_database(), nats_url=nats_url)
    write_sim_model(c.models_dir, SIM)
    write_tiny_model_config(c.models_dir, TINY)
    yield from c.serving("w1", frontend_args=("--auth", "--usage-flush-interval", "0.2s"))


@pytest.fixture(scope="module")
def user_key(cluster: Cluster) -> tuple[str, str]:
    """(key id, key) of a user key created through the admin API."""
    created = httpx.post(
        f"{cluster.frontend_url}/api/keys",
        json={"name": "usage-test", "role": "user"},
        headers=cluster.admin_headers,
    )
    assert created.status_code == 201, created.text
    return created.json()["id"], created.json()["key"]


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def _stored(cluster: Cluster, key_id: str, model: str) -> tuple[int, int, int, int] | None:
    async def read() -> asyncpg.Record | None:
        conn = await asyncpg.connect(cluster.database_url)
        try:
            return await conn.fetchrow(
                "SELECT sum(requests)::bigint AS r, sum(prompt_tokens)::bigint AS p, "
                "sum(completion_tokens)::bigint AS c, sum(cached_tokens)::bigint AS k "
                "FROM usage WHERE key_id = $1 AND model = $2 HAVING count(*) > 0",
                key_id,
                model,
            )
        finally:
            await conn.close()

    row = asyncio.run(read())
    return None if row is None else (row["r"], row["p"], row["c"], row["k"])


def test_stored_usage_equals_the_engines_counts_in_the_responses(
    cluster: Cluster, user_key: tuple[str, str]
) -> None:
    key_id, key = user_key
    with _client(cluster.frontend_url, key) as client:
        plain = client.chat.completions.create(
            model=SIM, messages=[{"role": "user", "content": "count my tokens"}], max_tokens=12
        )
        stream = client.chat.completions.create(
            model=SIM,
            messages=[{"role": "user", "content": "and these, streamed"}],
            max_tokens=7,
            stream=True,
            stream_options={"include_usage": True},
        )
        streamed = [chunk.usage for chunk in stream if chunk.usage is not None]
        tiny = client.chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": "hello"}], max_tokens=8
        )
    assert plain.usage is not None and tiny.usage is not None and len(streamed) == 1
    sim_prompt = plain.usage.prompt_tokens + streamed[0].prompt_tokens
    sim_completion = plain.usage.completion_tokens + streamed[0].completion_tokens
    assert sim_prompt > 0 and sim_completion > 0
    sim_expected = (2, sim_prompt, sim_completion, 0)
    wait_for(lambda: _stored(cluster, key_id, SIM) == sim_expected, f"{SIM} usage {sim_expected} stored", 30)
    tiny_expected = (1, tiny.usage.prompt_tokens, tiny.usage.completion_tokens, 0)
    wait_for(
        lambda: _stored(cluster, key_id, TINY) == tiny_expected, f"{TINY} usage {tiny_expected} stored", 30
    )

    report = httpx.get(
        f"{cluster.frontend_url}/api/usage",
        params={"key": key_id, "group_by": "key,model"},
        headers=cluster.admin_headers,
    )
    assert report.status_code == 200, report.text
    by_model = {entry["model"]: entry for entry in report.json()["usage"]}
    assert by_model[SIM]["key_name"] == "usage-test"
    assert (by_model[SIM]["prompt_tokens"], by_model[SIM]["completion_tokens"]) == (
        sim_prompt,
        sim_completion,
    )
    assert by_model[TINY]["total_tokens"] == tiny.usage.total_tokens

    metrics = httpx.get(f"{cluster.frontend_url}/metrics", headers=cluster.admin_headers).text
    assert f'corral_usage_tokens_total{{kind="completion",model="{SIM}"}} {float(sim_completion)}' in metrics
    assert f'corral_usage_requests_total{{model="{SIM}"}} 2.0' in metrics


def test_the_usage_api_is_for_admins_only(cluster: Cluster, user_key: tuple[str, str]) -> None:
    url = f"{cluster.frontend_url}/api/usage"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {user_key[1]}"}).status_code == 403
    bad = httpx.get(url, params={"since": "soon"}, headers=cluster.admin_headers)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"


def test_a_stopping_frontend_writes_the_usage_it_had_not_flushed(
    cluster: Cluster, user_key: tuple[str, str]
) -> None:
    key_id, key = user_key
    proc, url = cluster.spawn_frontend("frontend-slow-flush", "--auth", "--usage-flush-interval", "1h")
    before = _stored(cluster, key_id, SIM) or (0, 0, 0, 0)
    with _client(url, key) as client:
        reply = client.chat.completions.create(
            model=SIM, messages=[{"role": "user", "content": "counted at shutdown"}], max_tokens=5
        )
    assert reply.usage is not None
    assert (_stored(cluster, key_id, SIM) or (0, 0, 0, 0)) == before  # an hour's interval: not flushed yet
    assert proc.stop() == 0  # SIGTERM: a graceful stop
    after = _stored(cluster, key_id, SIM) or (0, 0, 0, 0)
    added = tuple(a - b for a, b in zip(after, before, strict=True))
    assert added == (1, reply.usage.prompt_tokens, reply.usage.completion_tokens, 0)


CHROMIUM = "/usr/bin/chromium"


def test_the_usage_page_lists_the_keys_usage_per_model(cluster: Cluster, user_key: tuple[str, str]) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: install the Debian package `chromium`")
    key_id = user_key[0]
    stored = _stored(cluster, key_id, SIM)
    assert stored is not None  # the first test's calls
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.set_default_timeout(20_000)
            page.goto(f"{cluster.frontend_url}/app/usage")
            page.get_by_label("Admin API key").fill(cluster.admin_key)
            page.get_by_role("button", name="Sign in").click()
            row = page.locator(f"[data-testid=usage-table] tr[data-key='{key_id}'][data-model='{SIM}']")
            sync_api.expect(row.locator("[data-count=total_tokens]")).to_have_text(
                f"{stored[1] + stored[2]:,}"
            )
            sync_api.expect(row).to_contain_text("usage-test")  # the key's name
            page.get_by_label("Group by").select_option("model")
            sync_api.expect(page.locator(f"[data-testid=usage-table] tr[data-model='{TINY}']")).to_have_count(
                1
            )
            assert page.locator("nav [data-nav=usage]").count() == 1
            if os.environ.get("CORRAL_UI_SCREENSHOTS"):
                page.screenshot(path=f"{os.environ['CORRAL_UI_SCREENSHOTS']}/usage.png", full_page=True)
            assert not errors, errors
        finally:
            browser.close()
