"""The web UI's small things (issue 26 item 5) in a real browser (the distribution's Chromium, Playwright)
against a real cluster: the live badge says what it waits for, Chat offers only chat models and remembers the
last one, a destructive action asks first (and does nothing when cancelled), and every page fits 390 px in
light and dark. Screenshots go to $CORRAL_UI_SCREENSHOTS (default: a pytest temporary directory).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster
from support.faults import write_sim_model

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
UI_TIMEOUT_MS = 20_000
RECONNECT_TIMEOUT_MS = 30_000  # the badge's backoff is capped at 10 s (+ jitter)
# The elements sticking out on the right, innermost first (as in test_web_ui.py).
WIDE = """[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > innerWidth + 1
  && ![...e.children].some((c) => c.getBoundingClientRect().right > innerWidth + 1))
  .slice(0, 5).map((e) => `${e.tagName}.${e.className} ${Math.round(e.getBoundingClientRect().right)}px`)"""
# Each page, and what shows once its data has arrived (a page may widen with its data: it must fit then).
PAGES = [
    ("/app", "[data-testid=node-charts], [data-testid=traffic-absent]"),  # the Dashboard
    ("/app/nodes", "[data-testid=node-card]"),
    ("/app/nodes/{node}", "#labels li"),
    ("/app/models", "tr[data-model]"),
    ("/app/gallery", "[data-testid=gallery-model] [data-testid=fit]"),
    ("/app/backends", "[data-testid=backend-row]"),
    ("/app/scheduling", "[data-testid=explain-model] option"),
    ("/app/activity", "[data-testid=op], main p.empty"),
    ("/app/usage", "[data-testid=usage] table, [data-testid=usage] p.empty"),
    ("/app/keys", "[data-testid=key-row]"),
    ("/app/chat", "[data-testid=chat-model] option"),
    ("/app/settings", "[data-setting=distributed_disk_headroom_check]"),
]

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
    c = Cluster(root=state_root / "e2e-web-ui-small", database_url=make_database(), nats_url=nats_url)
    write_sim_model(c.models_dir, "sim")
    write_sim_model(c.models_dir, "other")
    (c.models_dir / "assistant.yaml").write_text("name: assistant\nalias: sim\n")
    (c.models_dir / "embedder.yaml").write_text(
        "name: embedder\nbackend: simulator\nparameters:\n  model: embedder\nknown_usecases: [embeddings]\n"
    )
    yield from c.serving("gpu-a")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = Path(os.environ.get("CORRAL_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui-screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(cluster: Cluster) -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


def _context(browser: Any, width: int = 1280, scheme: str = "light") -> Any:
    context = browser.new_context(viewport={"width": width, "height": 844}, color_scheme=scheme)
    context.set_default_timeout(UI_TIMEOUT_MS)
    return context


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = _context(browser)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def _admin(cluster: Cluster, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, f"{cluster.frontend_url}{path}", headers=cluster.admin_headers, timeout=30, **kwargs
    )


def _sign_in(page: Any, cluster: Cluster) -> None:
    page.get_by_label("Admin API key").fill(cluster.admin_key)
    page.get_by_role("button", name="Sign in").click()


def _login(page: Any, cluster: Cluster, path: str = "/app/nodes") -> None:
    page.goto(f"{cluster.frontend_url}{path}")
    _sign_in(page, cluster)
    page.locator("[data-testid=live][data-status=live]").wait_for()


def test_the_live_badge_says_what_it_waits_for(page: Any, cluster: Cluster) -> None:
    page.goto(f"{cluster.frontend_url}/app/nodes")
    badge = page.locator("[data-testid=live]")
    sync_api.expect(badge).to_have_text("○ waiting for login")
    page.route("**/api/events", lambda route: route.abort())  # the event stream cannot be reached
    _sign_in(page, cluster)
    sync_api.expect(badge).to_have_attribute("data-status", "reconnecting")
    sync_api.expect(badge).to_contain_text("○ reconnecting to /api/events…")
    page.unroute("**/api/events")
    sync_api.expect(badge).to_have_attribute("data-status", "live", timeout=RECONNECT_TIMEOUT_MS)
    sync_api.expect(badge).to_have_text("● live")
    page.get_by_role("button", name="Log out").click()
    sync_api.expect(page.locator("[data-testid=live]")).to_have_text("○ waiting for login")


def test_chat_offers_only_chat_models_and_remembers_the_last_one(page: Any, cluster: Cluster) -> None:
    _login(page, cluster, "/app/chat")
    select = page.locator("[data-testid=chat-model]")
    page.locator("[data-testid=chat-model] option[value=other]").wait_for(state="attached")
    offered = page.locator("[data-testid=chat-model] option").evaluate_all("(os) => os.map((o) => o.value)")
    assert sorted(offered) == ["assistant", "other", "sim"]  # not the embedding model
    select.select_option("other")
    page.reload()
    page.locator("[data-testid=chat-model] option[value=other]").wait_for(state="attached")
    sync_api.expect(select).to_have_value("other")  # remembered in this browser
    page.goto(f"{cluster.frontend_url}/app/chat?model=sim")  # a link naming a model wins
    page.locator("[data-testid=chat-model] option[value=sim]").wait_for(state="attached")
    sync_api.expect(select).to_have_value("sim")
    assert page.evaluate("localStorage.getItem('corral.chatModel')") == "other"  # a link does not pick


def test_a_destructive_action_asks_first_and_a_cancel_does_nothing(page: Any, cluster: Cluster) -> None:
    rule = {"model_name": "sim", "node_selector": {}, "min_replicas": 0, "max_replicas": 0}
    assert _admin(cluster, "POST", "/api/nodes/scheduling", json=rule).status_code in (200, 201)
    _login(page, cluster, "/app/scheduling")
    row = page.locator("tr[data-rule=sim]")
    row.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    sync_api.expect(dialog).to_contain_text("Delete the scheduling rule for sim?")
    dialog.get_by_role("button", name="Cancel").click()
    sync_api.expect(page.get_by_role("dialog")).to_have_count(0)
    assert _admin(cluster, "GET", "/api/nodes/scheduling/sim").status_code == 200  # still there
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    sync_api.expect(row).to_have_count(0)
    assert _admin(cluster, "GET", "/api/nodes/scheduling/sim").status_code == 404

    node = next(n for n in _admin(cluster, "GET", "/api/nodes").json() if n["name"] == "gpu-a")
    page.goto(f"{cluster.frontend_url}/app/nodes/{node['id']}")
    page.get_by_role("button", name="Drain").click()
    dialog = page.get_by_role("dialog")
    sync_api.expect(dialog).to_contain_text("Drain gpu-a?")
    dialog.get_by_role("button", name="Cancel").click()
    sync_api.expect(page.get_by_role("dialog")).to_have_count(0)
    assert _admin(cluster, "GET", f"/api/nodes/{node['id']}").json()["status"] == "healthy"  # not drained


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_fits_390_px(browser: Any, cluster: Cluster, shots: Path, scheme: str) -> None:
    node = next(n for n in _admin(cluster, "GET", "/api/nodes").json() if n["name"] == "gpu-a")
    context = _context(browser, width=390, scheme=scheme)
    errors: list[str] = []
    try:
        pg = context.new_page()
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        _login(pg, cluster)
        for path, ready in PAGES:
            url = path.format(node=node["id"])
            pg.goto(f"{cluster.frontend_url}{url}")  # a deep link: the server answers index.html
            pg.locator(ready).first.wait_for(state="attached")
            overflow = pg.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, (
                f"{url} ({scheme}) scrolls sideways by {overflow}px at 390 px: {pg.evaluate(WIDE)}"
            )
            name = url.strip("/").replace("/", "-").replace(node["id"], "node")
            pg.screenshot(path=str(shots / f"30-narrow-{scheme}-{name}.png"), full_page=True)
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
