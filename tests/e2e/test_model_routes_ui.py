"""The Scheduling page's Model routes panel in a real browser (headless Chromium, Playwright) against a real
frontend (PostgreSQL, NATS): a route is created with a 90/10 split, shown with its shares, refused with the
server's message naming the field, edited and deleted (issue 25 item 4)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
UI_TIMEOUT_MS = 20_000

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is in the test extra: pip install -e '.[test]'"
)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(
        f"{CHROMIUM} is missing: install the Debian package `chromium` (scripts/install-system-deps.sh)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-model-routes-ui", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name in ("stable", "canary", "small"):
        (c.models_dir / f"{name}.yaml").write_text(
            f"name: {name}\nbackend: simulator\nparameters:\n  model: {name}\n"
        )
    yield from c.serving()  # no worker: the panel only reads and edits routes


@pytest.fixture(scope="module")
def page(cluster: Cluster) -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(UI_TIMEOUT_MS)
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            yield pg
        finally:
            browser.close()
        assert not errors, f"uncaught errors in the page: {errors}"


def _route(cluster: Cluster, name: str) -> httpx.Response:
    return httpx.get(f"{cluster.frontend_url}/api/routes/{name}", headers=cluster.admin_headers, timeout=30)


def test_a_route_is_created_edited_refused_and_deleted_on_the_scheduling_page(
    page: Any, cluster: Cluster
) -> None:
    page.goto(f"{cluster.frontend_url}/app/scheduling")
    page.get_by_label("Admin API key").fill(cluster.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("[data-testid=new-route]").click()
    form = page.locator("[data-testid=route-form]")
    form.get_by_label("Route name").fill("chat")
    form.get_by_label("Targets (model=weight, …)").fill("stable=90, canary=10")
    form.get_by_label("Fallbacks, in order").fill("small")
    form.get_by_role("button", name="Create route").click()
    row = page.locator("tr[data-route=chat]")
    sync_api.expect(row.locator("[data-target=stable]")).to_contain_text("stable · 90%")
    sync_api.expect(row.locator("[data-target=canary]")).to_contain_text("canary · 10%")
    sync_api.expect(row).to_contain_text("small")
    stored = _route(cluster, "chat").json()
    assert [(t["model"], t["weight"]) for t in stored["targets"]] == [("stable", 90.0), ("canary", 10.0)]
    assert stored["fallbacks"] == ["small"]

    row.get_by_role("button", name="Edit").click()
    form = page.locator("[data-testid=route-form]")
    form.get_by_label("Targets (model=weight, …)").fill("stable=50, nope=50")
    form.get_by_role("button", name="Save route").click()
    sync_api.expect(form.locator(".form-error")).to_contain_text(
        "'nope' is neither a model, an alias nor a route"
    )
    form.get_by_label("Targets (model=weight, …)").fill("stable=50, canary=50")
    form.get_by_role("button", name="Save route").click()
    sync_api.expect(row.locator("[data-target=canary]")).to_contain_text("canary · 50%")

    row.get_by_role("button", name="Delete").click()
    page.get_by_role("button", name="Delete", exact=True).last.click()
    sync_api.expect(page.locator("tr[data-route=chat]")).to_have_count(0)
    assert _route(cluster, "chat").status_code == 404
