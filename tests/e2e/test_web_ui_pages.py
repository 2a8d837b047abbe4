"""The web UI's Dashboard, Settings, API keys, Model gallery and Backends pages and the operations strip
(issue 26) in a real browser (the distribution's Chromium, driven by Playwright) against a real cluster:
PostgreSQL, NATS, a frontend and two workers running the simulator engine, with a local backend gallery
(`simcopy`: the simulator in the reference's backend layout, installed by directory copy).

One browser and one cluster for the module; the tests run in order as an operator's session would.
Screenshots of every page at 1280×800 and 390 px, light and dark, go to $CORRAL_UI_SCREENSHOTS (default: a
pytest temporary directory). A worker that "takes its time" during an install is a real worker stopped with
SIGSTOP, so the operations strip's fan-out roll-up stays on screen long enough to be read.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster
from support.faults import write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
MIB = 1 << 20
UI_TIMEOUT_MS = 20_000
INSTALL_TIMEOUT_MS = 60_000
TRAFFIC_TIMEOUT_MS = 60_000  # a few 5 s buckets of the traffic ring, and the page's refresh
TIMEOUT_FLAGS = (
    "--backend-install-timeout",
    "4s",
    "--backend-upgrade-timeout",
    "10s",
    "--node-op-timeout",
    "5s",
)
SIMCOPY_RUN = (
    '#!/bin/sh\necho "simcopy backend starting"\n'
    'exec "${CORRAL_PYTHON:-python3}" -m corral backend simulator "$@"\n'
)
PAGES = [  # name, path, what shows once the page has read its data
    ("dashboard", "/app/dashboard", "[data-testid=node-charts], [data-testid=traffic-absent]"),
    ("settings", "/app/settings", "[data-setting=distributed_disk_headroom_check]"),
    ("keys", "/app/keys", "[data-testid=key-row]"),
    ("gallery", "/app/gallery", "[data-testid=gallery-model] [data-testid=fit]"),
    ("backends", "/app/backends", "[data-testid=backend-row]"),
]
WIDE = """[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > innerWidth + 1
  && ![...e.children].some((c) => c.getBoundingClientRect().right > innerWidth + 1))
  .slice(0, 5).map((e) => `${e.tagName}.${e.className} ${Math.round(e.getBoundingClientRect().right)}px`)"""

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is in the test extra: pip install -e '.[test]'"
)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(
        f"{CHROMIUM} is missing: install the Debian package `chromium` (scripts/install-system-deps.sh)",
        allow_module_level=True,
    )


@dataclass
class Env:
    cluster: Cluster
    shots: Path

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.cluster.frontend_url}{path}",
            headers=self.cluster.admin_headers,
            timeout=30,
            **kwargs,
        )

    def node_id(self, name: str) -> str:
        return str(next(n["id"] for n in self.admin("GET", "/api/nodes").json() if n["name"] == name))

    def backends(self, node: str) -> set[str]:
        return {b["name"] for b in self.admin("GET", f"/api/nodes/{self.node_id(node)}/backends").json()}

    def key(self, name: str) -> dict[str, Any]:
        return dict(next(k for k in self.admin("GET", "/api/keys").json() if k["name"] == name))


def _gallery(root: Path) -> Path:
    directory = root / "gallery" / "simcopy"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run.sh").write_text(SIMCOPY_RUN)
    (directory / "run.sh").chmod(0o755)
    (directory / "metadata.json").write_text(json.dumps({"name": "simcopy", "version": "1"}))
    index = root / "gallery" / "index.yaml"
    index.write_text("- name: simcopy\n  uri: simcopy\n  version: '1'\n")
    return index


def _model_gallery(root: Path) -> str:
    """LOCALAI_GALLERIES: one local model gallery, a simulator model and its variant, each with a file beside it."""
    directory = root / "model-gallery"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "weights.bin").write_bytes(b"gallery weights" * 1000)
    (directory / "weights-q8.bin").write_bytes(b"q8" * 1000)
    index = directory / "index.yaml"
    index.write_text(
        "- name: gallery-sim\n  description: a simulator model from a gallery\n  tags: [chat]\n"
        "  config_file: {backend: simulator}\n  files: [{filename: gallery-sim.bin, uri: weights.bin}]\n"
        "  variants: [{model: gallery-sim-q8}]\n"
        "- name: gallery-sim-q8\n  config_file: {backend: simulator}\n"
        "  files: [{filename: gallery-sim-q8.bin, uri: weights-q8.bin}]\n"
    )
    return json.dumps([{"name": "local", "url": str(index)}])


@pytest.fixture(scope="module")
def env(
    state_root: Path,
    make_database: Callable[[], str],
    nats_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    shots = Path(os.environ.get("CORRAL_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    root = state_root / "e2e-web-ui-pages"
    index = _gallery(root)
    c = Cluster(root=root, database_url=make_database(), nats_url=nats_url)
    write_sim_model(c.models_dir, "sim")
    write_sim_model(c.models_dir, "staged", file_bytes=4 * MIB)  # a known size: a sizing verdict
    c.frontend_env["LOCALAI_GALLERIES"] = _model_gallery(root)
    try:
        c.start_frontend(*TIMEOUT_FLAGS)
        for name in ("gpu-a", "gpu-b"):
            c.start_worker(name, "--backend-galleries", str(index))
        e = Env(c, shots)
        wait_for(lambda: len(e.admin("GET", "/api/nodes").json()) == 2, "both workers register", 30)
        yield e
    finally:
        c.stop()


@pytest.fixture(scope="module")
def browser(env: Env) -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def page(browser: Any, env: Env) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="light")
    context.set_default_timeout(UI_TIMEOUT_MS)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    console: list[str] = []  # only to explain a failed login (a 404 an optional read expects is logged too)
    pg.on("console", lambda msg: console.append(msg.text) if msg.type == "error" else None)
    try:
        try:
            _login(pg, env)
        except sync_api.TimeoutError as exc:
            raise AssertionError(f"cannot log in: {exc}; the console's errors: {console}") from exc
        yield pg
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def _shot(env: Env, page: Any, name: str) -> None:
    page.screenshot(path=str(env.shots / f"{name}.png"), full_page=True)


def _login(page: Any, env: Env, path: str = "/app") -> None:
    page.goto(f"{env.cluster.frontend_url}{path}")
    page.get_by_label("Admin API key").fill(env.cluster.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("[data-testid=live][data-status=live]").wait_for()


def _open(page: Any, env: Env, path: str) -> None:
    """Navigate inside the app (the session's key is in the tab's sessionStorage: a deep link keeps it)."""
    page.goto(f"{env.cluster.frontend_url}{path}")


def _confirm(page: Any, click: Callable[[], None]) -> None:
    """Click a destructive action and confirm it, in the page's own dialog or the browser's confirm()."""
    page.once("dialog", lambda dialog: dialog.accept())
    click()
    dialog = page.locator("dialog[open]")
    try:
        dialog.wait_for(timeout=3000)
    except sync_api.TimeoutError:
        return  # the browser's confirm(), accepted above
    dialog.get_by_role("button").last.click()


def test_settings_toggle_is_saved_read_back_and_the_last_change_wins(page: Any, env: Env) -> None:
    _open(page, env, "/app/settings")
    box = page.locator("[data-testid=setting-distributed_disk_headroom_check]")
    sync_api.expect(box).to_be_checked()  # on by default
    sync_api.expect(page.locator("[data-section=Distributed]")).to_contain_text("Disk headroom check")
    box.uncheck()
    page.locator("[data-testid=settings-save]").click()
    sync_api.expect(page.locator("[data-testid=settings-saved]")).to_contain_text("Disk headroom check off")
    assert env.admin("GET", "/api/settings").json()["distributed_disk_headroom_check"] is False
    _shot(env, page, "30-settings")
    # Another frontend (or the flag) turns it back on: the page shows the value every frontend now uses.
    assert (
        env.admin("POST", "/api/settings", json={"distributed_disk_headroom_check": True}).status_code == 200
    )
    page.locator("[data-testid=settings-reread]").click()
    sync_api.expect(box).to_be_checked()


def test_a_key_is_created_shown_once_scoped_and_revoked(page: Any, env: Env) -> None:
    _open(page, env, "/app/keys")
    sync_api.expect(page.locator("[data-testid=usage-link]")).to_have_attribute("href", "/app/usage")
    form = page.locator("[data-testid=key-create]")
    form.locator("input[name=name]").fill("team-a")
    form.locator("input[name=models]").fill("sim")
    form.locator("input[name=rpm]").fill("60")
    form.locator("[data-testid=key-create-submit]").click()
    secret_el = page.locator("[data-testid=new-key-secret]")
    sync_api.expect(secret_el).not_to_be_empty()
    secret = secret_el.inner_text().strip()
    created = env.key("team-a")
    assert (created["models"], created["rpm"], created["role"]) == (["sim"], 60, "user")
    assert secret.startswith(created["key_prefix"])
    auth = {"Authorization": f"Bearer {secret}"}
    url = env.cluster.frontend_url
    assert httpx.get(f"{url}/api/nodes", headers=auth, timeout=30).status_code == 403  # a valid user key
    _shot(env, page, "31-keys-created")
    page.locator("[data-testid=new-key-dismiss]").click()
    sync_api.expect(secret_el).to_have_count(0)  # shown once: gone for good
    row = page.locator("[data-testid=key-row][data-name=team-a]")
    row.locator("[data-testid=key-scope-edit]").click()
    scope = row.locator("[data-testid=key-scope-form]")
    scope.locator("input[name=tpm]").fill("1000")
    scope.locator("input[name=tokens_per_day]").fill("50000")
    scope.locator("select[name=priority]").select_option("low")
    scope.locator("[data-testid=key-scope-save]").click()
    sync_api.expect(row.locator("[data-testid=key-scope]")).to_contain_text("priority low")
    changed = env.key("team-a")
    assert (changed["tpm"], changed["tokens_per_day"], changed["priority"], changed["rpm"]) == (
        1000,
        50000,
        "low",
        60,
    )
    _shot(env, page, "32-keys-scoped")
    _confirm(page, lambda: row.locator("[data-testid=key-revoke]").click())
    sync_api.expect(page.locator("[data-testid=key-row][data-name=team-a]")).to_have_count(0)
    assert env.key("team-a")["revoked_at"]
    assert httpx.get(f"{url}/api/nodes", headers=auth, timeout=30).status_code == 401  # no longer a key


def test_the_gallery_names_the_node_a_model_fits_on_and_installs_it(page: Any, env: Env) -> None:
    _open(page, env, "/app/gallery")
    budget = env.admin("GET", "/api/models").json()["cluster"]["node_name"]
    sync_api.expect(page.locator("[data-testid=budget]")).to_contain_text(f"Sized against {budget}")
    card = page.locator("[data-testid=gallery-model][data-model=staged]")
    sync_api.expect(card.locator("[data-testid=fit]")).to_have_text(f"Fits on {budget}")
    card.locator("[data-testid=variants-toggle]").click()
    sync_api.expect(card.locator("[data-testid=variants] [data-variant=staged]")).to_contain_text("Fits on")
    card.locator("[data-testid=gallery-install]").click()
    sync_api.expect(card.locator("[data-testid=install-done]")).to_be_visible(timeout=INSTALL_TIMEOUT_MS)
    placed = env.admin("GET", "/api/nodes/models").json()
    assert any(r["model_name"] == "staged" for r in placed)
    _shot(env, page, "33-gallery")


def test_the_gallery_installs_a_model_from_a_configured_gallery(page: Any, env: Env) -> None:
    _open(page, env, "/app/gallery")
    budget = env.admin("GET", "/api/models").json()["cluster"]["node_name"]
    card = page.locator("[data-testid=catalog-model][data-model=gallery-sim]")
    sync_api.expect(card.locator("[data-testid=catalog-fit]")).to_have_text(f"Fits on {budget}")
    sync_api.expect(
        card.locator("[data-testid=catalog-variants] [data-variant=gallery-sim-q8]")
    ).to_contain_text("Fits on")
    card.locator("[data-testid=catalog-install]").click()
    sync_api.expect(card.locator("[data-testid=catalog-done]")).to_be_visible(timeout=INSTALL_TIMEOUT_MS)
    assert (env.cluster.models_dir / "gallery-sim.bin").read_bytes() == b"gallery weights" * 1000
    configured = page.locator("[data-testid=gallery-model][data-model=gallery-sim]")
    sync_api.expect(configured).to_be_visible(timeout=UI_TIMEOUT_MS)  # now a configured model too
    _shot(env, page, "34-gallery-installed")


def test_backends_install_on_two_nodes_with_the_strip_then_delete(page: Any, env: Env) -> None:
    _open(page, env, "/app/backends")
    node_a = page.locator("[data-testid=backend-node][data-node=gpu-a]")
    sync_api.expect(node_a.locator("[data-testid=backend-row][data-backend=simulator]")).to_contain_text(
        "built in"
    )
    sync_api.expect(page.locator("[data-testid=ops-strip]")).to_have_count(0)  # nothing runs: no strip
    slow = env.cluster.workers[1].popen  # gpu-b takes its time: the fan-out stays half done on screen
    os.kill(slow.pid, signal.SIGSTOP)
    try:
        page.locator("[data-testid=backend-install-name]").fill("simcopy")
        sync_api.expect(page.locator("[data-testid=backend-install-node]:checked")).to_have_count(2)
        page.locator("[data-testid=backend-install-submit]").click()
        strip = page.locator("[data-testid=ops-strip]")
        sync_api.expect(strip.locator("[data-testid=ops-rollup]")).to_contain_text(
            "1 of 2 nodes done", timeout=INSTALL_TIMEOUT_MS
        )
        sync_api.expect(strip).to_contain_text("Installing simcopy")
        _shot(env, page, "34-backends-installing")
    finally:
        os.kill(slow.pid, signal.SIGCONT)
    job = page.locator("[data-testid=backend-job]").first
    sync_api.expect(job).to_have_attribute("data-done", "true", timeout=INSTALL_TIMEOUT_MS)
    sync_api.expect(job).to_contain_text("2 of 2 nodes done")
    sync_api.expect(page.locator("[data-testid=ops-strip]")).to_have_count(0, timeout=INSTALL_TIMEOUT_MS)
    for name in ("gpu-a", "gpu-b"):
        row = page.locator(f"[data-testid=backend-node][data-node={name}] [data-backend=simcopy]")
        sync_api.expect(row).to_be_visible()
    assert "simcopy" in env.backends("gpu-b")
    _shot(env, page, "35-backends")
    row_b = page.locator(
        "[data-testid=backend-node][data-node=gpu-b] [data-testid=backend-row][data-backend=simcopy]"
    )
    _confirm(page, lambda: row_b.locator("[data-testid=backend-upgrade]").click())
    upgrade = page.locator("[data-testid=backend-job]").first  # the newest job is listed first
    sync_api.expect(upgrade).to_have_attribute("data-done", "true", timeout=INSTALL_TIMEOUT_MS)
    sync_api.expect(upgrade).not_to_contain_text("failed")
    assert "simcopy" in env.backends("gpu-b")
    row_a = node_a.locator("[data-testid=backend-row][data-backend=simcopy]")
    _confirm(page, lambda: row_a.locator("[data-testid=backend-delete]").click())
    sync_api.expect(row_a).to_have_count(0)
    assert "simcopy" not in env.backends("gpu-a")


def _traffic(env: Env, stop: threading.Event) -> None:
    """Chat requests to `sim` until told to stop: traffic for the charts."""
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with httpx.Client(headers=env.cluster.admin_headers, timeout=60) as client:
        while not stop.is_set():
            try:
                client.post(f"{env.cluster.frontend_url}/v1/chat/completions", json=body)
            except httpx.HTTPError:
                pass
            stop.wait(0.1)


def test_the_dashboard_requests_chart_moves_with_a_burst_of_requests(page: Any, env: Env) -> None:
    if env.admin("GET", "/api/traffic?window=3600").status_code == 404:
        pytest.skip("GET /api/traffic is not on this frontend yet (the traffic ring of issue 26 item 1)")
    _open(page, env, "/app/dashboard")
    page.locator("[data-testid=node-charts]").first.wait_for()
    chart = page.locator("[data-testid=chart-requests]")
    before = chart.get_attribute("data-last") if chart.count() else ""
    stop = threading.Event()
    sender = threading.Thread(target=_traffic, args=(env, stop), daemon=True)
    sender.start()
    try:
        page.wait_for_function(
            """(before) => {
              const el = document.querySelector('[data-testid=chart-requests]');
              return el && el.dataset.last !== '' && Number(el.dataset.last) > 0 && el.dataset.last !== before;
            }""",
            arg=before or "",
            timeout=TRAFFIC_TIMEOUT_MS,
        )
    finally:
        stop.set()
        sender.join(timeout=70)
    page.locator("[data-testid=model-select]").select_option(
        "sim"
    )  # a shared test NATS may list others' models
    sync_api.expect(page.locator("[data-testid=chart-model-requests] canvas")).to_have_count(1)
    assert page.locator("[data-testid=chart-model-requests]").get_attribute("data-last") not in (None, "")
    for chart_id in ("ttft", "latency", "tokens", "queue", "loads"):
        sync_api.expect(page.locator(f"[data-testid=chart-{chart_id}] canvas")).to_have_count(1)
    for name in (
        "gpu-a",
        "gpu-b",
    ):  # (a test NATS shared with other clusters may bring their nodes' rings too)
        sync_api.expect(page.locator(f"[data-testid=node-charts][data-node={name}]").first).to_be_visible()
    sync_api.expect(page.locator("[data-testid=chart-node-gpu-a-ram] canvas").first).to_be_visible()
    _shot(env, page, "36-dashboard")


@pytest.mark.parametrize(
    ("width", "scheme"),
    [(1280, "dark"), (390, "light"), (390, "dark")],
    ids=["wide-dark", "narrow-light", "narrow-dark"],
)
def test_every_page_renders_wide_and_narrow_in_light_and_dark(
    browser: Any, env: Env, width: int, scheme: str
) -> None:
    context = browser.new_context(
        viewport={"width": width, "height": 800 if width > 600 else 844}, color_scheme=scheme
    )
    context.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    try:
        pg = context.new_page()
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        _login(pg, env)
        for name, path, ready in PAGES:
            _open(pg, env, path)
            pg.locator(ready).first.wait_for(state="attached")
            overflow = pg.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, (
                f"{name}: the page scrolls sideways by {overflow}px at {width} px: {pg.evaluate(WIDE)}"
            )
            _shot(env, pg, f"37-{name}-{width}-{scheme}")
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def test_screenshots_were_written(env: Env) -> None:
    names = sorted(p.name for p in env.shots.glob("3*.png"))
    assert len(names) >= 15, names
    assert all((env.shots / n).stat().st_size > 5000 for n in names), "a screenshot is blank"
