"""The web UI in a real browser (headless Chromium from the distribution, driven by Playwright) against a
real cluster: PostgreSQL, NATS, a frontend and two workers running the simulator engine.

One browser and one cluster for the module; the tests run in order as an operator's session would
(log in, approve, label, schedule, load, chat, try each modality on the Models page). Screenshots of every
page are written to $CORRAL_UI_SCREENSHOTS (default: a pytest temporary directory).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.faults import write_sim_model
from support.proxy import ThrottlingProxy
from support.waiting import wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
MIB = 1 << 20
STAGED_BYTES = 12 * MIB  # staged at 3 MiB/s through the proxy: a progress bar that moves for ~4 s
UI_TIMEOUT_MS = 20_000
MODALITY_TIMEOUT_MS = 60_000  # a cold simulator load, then the call itself
SENTENCE = (
    "the quick brown fox jumps over the lazy dog"  # the simulator transcribes its own speech back to this
)
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

    def find_node(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self.admin("GET", "/api/nodes").json() if n["name"] == name), None)

    def node(self, name: str) -> dict[str, Any]:
        node = self.find_node(name)
        assert node is not None, f"node {name} is not listed"
        return node


def _sim_config(models_dir: Path, name: str, *lines: str) -> None:
    (models_dir / f"{name}.yaml").write_text(
        "\n".join([f"name: {name}", "backend: simulator", "parameters:", f"  model: {name}", *lines]) + "\n"
    )


def _worker(c: Cluster, name: str, *extra: str) -> tuple[Proc, int]:
    base = free_port_pair()
    proc = spawn(name, [*c.worker_argv(name, base), *extra], c.root / "logs")
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", proc)
    c.workers.append(proc)
    c.worker_ports.append(base)
    return proc, base


@pytest.fixture(scope="module")
def env(
    state_root: Path,
    make_database: Callable[[], str],
    nats_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    shots = Path(os.environ.get("CORRAL_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    c = Cluster(
        root=state_root / "e2e-web-ui", database_url=make_database(), nats_url=nats_url, auto_approve=False
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    write_sim_model(c.models_dir, "sim")
    write_sim_model(c.models_dir, "staged", file_bytes=STAGED_BYTES)
    write_sim_model(c.models_dir, "coldchat", "load_time_s:2.5")
    (c.models_dir / "assistant.yaml").write_text("name: assistant\nalias: sim\n")
    _sim_config(
        c.models_dir, "media"
    )  # the simulator's every modality: chat, embeddings, transcription, tts, image
    _sim_config(c.models_dir, "embedder", "known_usecases: [embeddings]")
    _sim_config(
        c.models_dir, "ranker", "reranking: true", "known_usecases: [rerank]"
    )  # the simulator cannot rerank
    proxy: ThrottlingProxy | None = None
    try:
        c.start_frontend("--model-load-wait", "1s", "--stale-node-threshold", "30s")
        base_a = (
            free_port_pair()
        )  # picked after the frontend started: its outgoing connections take ports too
        proxy = ThrottlingProxy(base_a - 1, upload_bytes_per_s=3 * MIB)  # gpu-a's file server, slowed
        proxy.__enter__()
        proc = spawn(
            "gpu-a",
            [
                *c.worker_argv("gpu-a", base_a),
                "--advertise-http-addr",
                f"127.0.0.1:{proxy.port}",
                "--node-labels",
                "gpu=sim",
            ],
            c.root / "logs",
        )
        wait_http(f"http://127.0.0.1:{base_a - 1}/readyz", proc)
        c.workers.append(proc)
        c.worker_ports.append(base_a)
        _worker(c, "gpu-b", "--node-labels", "gpu=sim,zone=us-2")
        e = Env(c, shots)
        wait_for(
            lambda: e.find_node("gpu-a") is not None and e.find_node("gpu-b") is not None,
            "both workers register",
            30,
        )
        assert (
            e.admin("POST", f"/api/nodes/{e.node('gpu-a')['id']}/approve").status_code == 200
        )  # gpu-b: in the UI
        yield e
    finally:
        c.stop()
        if proxy is not None:
            proxy.__exit__()


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
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def _shot(env: Env, page: Any, name: str) -> None:
    page.screenshot(path=str(env.shots / f"{name}.png"), full_page=True)


def _login(page: Any, env: Env, path: str = "/app/nodes") -> None:
    page.goto(f"{env.cluster.frontend_url}{path}")
    page.get_by_label("Admin API key").fill(env.cluster.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("[data-testid=live][data-status=live]").wait_for()


def test_login_refuses_a_wrong_key_then_shows_both_workers(page: Any, env: Env) -> None:
    page.goto(f"{env.cluster.frontend_url}/app")
    _shot(env, page, "00-login")
    page.get_by_label("Admin API key").fill("not-a-key")
    page.get_by_role("button", name="Sign in").click()
    sync_api.expect(page.get_by_role("alert")).to_contain_text("not a valid admin key")
    _login(page, env)
    cards = page.locator("[data-testid=node-card]")
    sync_api.expect(cards).to_have_count(2)
    sync_api.expect(page.locator("[data-testid=node-card][data-node=gpu-a] .pill")).to_have_text("healthy")
    assert page.evaluate("sessionStorage.getItem('corral.adminKey')") == env.cluster.admin_key
    assert page.evaluate("localStorage.getItem('corral.adminKey')") is None


def test_a_pending_node_is_approved_inline_and_the_roster_updates_live(page: Any, env: Env) -> None:
    callout = page.locator("[data-testid=attention]")
    sync_api.expect(callout).to_contain_text("gpu-b is waiting for approval")
    sync_api.expect(page.locator("[data-testid=pulse]")).to_contain_text("1 pending")
    _shot(env, page, "01-nodes-pending")
    page.locator("[data-testid=approve-gpu-b]").click()
    sync_api.expect(page.locator("[data-testid=node-card][data-node=gpu-b] .pill")).to_have_text("healthy")
    sync_api.expect(callout).to_have_count(0)
    assert env.node("gpu-b")["status"] == "healthy"
    page.get_by_role("button", name="Agent").click()
    sync_api.expect(page.locator("[data-testid=node-card]")).to_have_count(0)
    page.get_by_role("button", name="Backend").click()
    sync_api.expect(page.locator("[data-testid=node-card]")).to_have_count(2)
    # A change made elsewhere (the API, another frontend) arrives through /api/events, no reload.
    gpu_b = env.node("gpu-b")["id"]
    assert env.admin("POST", f"/api/nodes/{gpu_b}/drain").status_code == 200
    sync_api.expect(page.locator("[data-testid=node-card][data-node=gpu-b] .pill")).to_have_text("draining")
    assert env.admin("POST", f"/api/nodes/{gpu_b}/resume").status_code == 200
    sync_api.expect(page.locator("[data-testid=node-card][data-node=gpu-b] .pill")).to_have_text("healthy")
    _shot(env, page, "02-nodes")


def test_node_detail_edits_a_label(page: Any, env: Env) -> None:
    page.locator("[data-testid=node-card][data-node=gpu-a] h3 a").click()
    page.wait_for_url("**/app/nodes/*")
    sync_api.expect(page.locator("h1")).to_have_text("gpu-a")
    form = page.locator("[data-testid=label-form]")
    form.get_by_label("Label key").fill("zone")
    form.get_by_label("Label value").fill("eu-1")
    form.get_by_role("button", name="Set label").click()
    sync_api.expect(page.locator("[data-testid=labels] [data-label=zone]")).to_contain_text("zone=eu-1")
    labels = env.admin("GET", f"/api/nodes/{env.node('gpu-a')['id']}/labels").json()
    assert labels["zone"] == "eu-1" and labels["gpu"] == "sim"
    page.get_by_label("Max replicas per model").fill("2")
    page.locator(".field", has_text="Max replicas per model").get_by_role("button", name="Save").click()
    sync_api.expect(page.locator(".field", has_text="Max replicas per model")).to_contain_text(
        "set by an admin"
    )
    assert env.node("gpu-a")["max_replicas_per_model"] == 2
    backends_api = env.admin("GET", f"/api/nodes/{env.node('gpu-a')['id']}/backends").status_code != 404
    if backends_api:
        sync_api.expect(page.locator("#backends")).to_be_visible()
    else:
        assert page.locator("#backends").count() == 0  # no backend-management API on this frontend: hidden
    _shot(env, page, "03-node-detail")


def test_a_scheduling_rule_is_created_with_label_completion(page: Any, env: Env) -> None:
    page.get_by_role("link", name="Scheduling").click()
    page.locator("[data-testid=new-rule]").click()
    form = page.locator("[data-testid=rule-form]")
    form.get_by_label("Model or alias").fill("staged")
    selector = form.locator("[data-testid=selector]")
    selector.click()
    selector.press_sequentially("zo")
    page.locator("[data-testid=suggestion][data-value=zone]").click()
    assert selector.input_value() == "zone="
    values = page.locator("[data-testid=suggestion]")
    sync_api.expect(values).to_have_count(2)  # eu-1 (set in the UI) and us-2 (gpu-b's own)
    _shot(env, page, "04-scheduling-completion")
    page.locator("[data-testid=suggestion][data-value=eu-1]").click()
    assert selector.input_value() == "zone=eu-1"
    form.get_by_role("button", name="Create rule").click()
    row = page.locator("tr[data-rule=staged]")
    sync_api.expect(row).to_contain_text("zone=eu-1")
    sync_api.expect(row.locator(".pill").first).to_have_text("on_demand")
    rule = env.admin("GET", "/api/nodes/scheduling/staged").json()
    assert rule["node_selector"] == '{"zone":"eu-1"}' or rule["node_selector"] == '{"zone": "eu-1"}'
    page.locator("[data-testid=explain-model]").select_option("staged")
    page.locator("[data-testid=explain]").click()
    explain = page.locator("[data-testid=explain-result]")
    sync_api.expect(explain).to_contain_text("goes to gpu-a")
    sync_api.expect(explain.locator("tr[data-node=gpu-b]")).to_contain_text("rejected")
    _shot(env, page, "05-scheduling")


def test_a_cold_load_progress_bar_reaches_ready_and_shows_in_activity(page: Any, env: Env) -> None:
    page.get_by_role("link", name="Models").click()
    sync_api.expect(page.locator("tr[data-model=staged] [data-testid=fit]")).to_contain_text("Fits on")
    outcome: list[int] = []
    request = threading.Thread(
        target=lambda: outcome.append(
            httpx.post(
                f"{env.cluster.frontend_url}/v1/chat/completions",
                timeout=60,
                json={"model": "staged", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            ).status_code
        )
    )
    request.start()
    try:
        load = page.locator("tr[data-model=staged] [data-testid=load]")
        sync_api.expect(load).to_have_attribute("data-state", "staging")
        sync_api.expect(load).to_contain_text("on gpu-a")
        _shot(env, page, "06-models-loading")
        sync_api.expect(load).to_have_attribute("data-state", "ready", timeout=30_000)
        assert load.locator("[role=progressbar]").get_attribute("aria-valuenow") == "100"
        sync_api.expect(page.locator("tr[data-model=staged] .chip[data-node=gpu-a]")).to_be_visible()
    finally:
        request.join(60)
    assert outcome and outcome[0] in (200, 503)  # a 503 `model_loading` after the 1 s wait budget is fine
    _shot(env, page, "07-models")
    page.get_by_role("link", name="Activity").click()
    card = page.locator(
        "[data-testid=op][data-title=staged][data-tone=ok]"
    ).first  # a finished load of staged
    sync_api.expect(card).to_contain_text("gpu-a")
    _shot(env, page, "08-activity")
    assert (
        env.admin("GET", "/api/operations/history").status_code == 200
    )  # the activity record's API is there
    page.locator("[data-testid=clear-history]").click()
    page.get_by_role("dialog").get_by_role("button", name="Clear").click()
    sync_api.expect(page.get_by_text("history cleared")).to_be_visible()
    assert env.admin("GET", "/api/operations/history").json()["operations"] == []


def test_a_config_edit_shows_its_revision_and_pending_cleanup(page: Any, env: Env) -> None:
    page.get_by_role("link", name="Models").click()
    row = page.locator("tr[data-model=staged]")
    row.get_by_role("button", name="Edit").click()
    editor = page.locator("[data-testid=editor] textarea")
    wait_for(lambda: "name: staged" in editor.input_value(), "the YAML loads into the editor", 10)
    editor.fill(editor.input_value() + "context_size: 512\n")
    page.locator("[data-testid=editor]").get_by_role("button", name="Save").click()
    result = page.locator("[data-testid=save-result]")
    sync_api.expect(result).to_contain_text("pending cleanup")
    sync_api.expect(result).to_contain_text("revision")
    _shot(env, page, "09-models-config-edit")
    page.locator("[data-testid=editor]").get_by_role("button", name="Close").click()
    sim = page.locator("tr[data-model=sim]")
    sim.get_by_role("button", name="Disable").click()
    page.get_by_role("dialog").get_by_role("button", name="Disable").click()  # it asks first
    sync_api.expect(sim.locator(".pill[data-status=disabled]")).to_be_visible()
    assert env.admin("GET", "/api/model-configs/sim").json()["disabled"] is True
    sim.get_by_role("button", name="Enable").click()
    sync_api.expect(sim.locator(".pill[data-status=disabled]")).to_have_count(0)


def test_chat_streams_a_reply_after_an_inline_cold_load(page: Any, env: Env) -> None:
    page.get_by_role("link", name="Chat").click()
    page.locator("[data-testid=chat-model]").select_option("coldchat")
    page.get_by_label("Message").fill("hello there")
    page.get_by_role("button", name="Send").click()
    reply = page.locator(".bubble.assistant").last
    sync_api.expect(reply).to_have_attribute("data-state", "loading")  # the 503 `model_loading`, shown inline
    sync_api.expect(reply.locator("[data-testid=load]")).to_be_visible()
    _shot(env, page, "10-chat-loading")
    sync_api.expect(reply).to_have_attribute("data-state", "done", timeout=30_000)  # retried by itself
    assert reply.inner_text().strip()
    _shot(env, page, "11-chat")


def test_chat_offers_only_chat_models_and_their_aliases(page: Any, env: Env) -> None:
    capabilities = {m["name"]: m["capabilities"] for m in env.admin("GET", "/api/models").json()["models"]}
    assert capabilities["embedder"] == ["embeddings"] and "chat" in capabilities["media"]
    page.get_by_role("link", name="Chat").click()
    page.locator("[data-testid=chat-model] option[value=media]").wait_for(state="attached")
    offered = page.locator("[data-testid=chat-model] option").evaluate_all(
        "(options) => options.map((o) => o.value)"
    )
    assert sorted(offered) == ["assistant", "coldchat", "media", "sim", "staged"]  # not embedder, not ranker


def _try_panel(page: Any, model: str) -> Any:
    """The Models page's Try panel of `model`, opened from its row."""
    page.get_by_role("link", name="Models").click()
    page.locator(f"tr[data-model={model}] [data-testid=try]").click()
    panel = page.locator(f"[data-testid=try][data-model={model}]")
    sync_api.expect(panel).to_be_visible()
    return panel


def _run(form: Any, button: str) -> None:
    form.get_by_role("button", name=button).click()
    sync_api.expect(form).to_have_attribute("data-state", "done", timeout=MODALITY_TIMEOUT_MS)


def test_the_models_page_speaks_a_sentence_into_an_audio_player(page: Any, env: Env) -> None:
    panel = _try_panel(page, "media")
    tags = page.locator("tr[data-model=media] [data-testid=capabilities] .tag")
    sync_api.expect(tags).to_have_text(["chat", "embeddings", "transcription", "tts", "image"])
    assert [f.get_attribute("data-capability") for f in panel.locator("form").all()] == [
        "transcription",
        "tts",
        "image",
        "embeddings",
    ]  # one form per capability; chat links to the Chat page
    form = panel.locator("[data-testid=try-tts]")
    form.get_by_label("Text to speak").fill(SENTENCE)
    _run(form, "Speak")
    audio = form.locator("audio[data-testid=speech]")
    assert audio.get_attribute("src").startswith("blob:")
    assert int(audio.get_attribute("data-bytes")) > 16000  # a WAV of more than half a second at 16 kHz
    page.wait_for_function("(a) => a.readyState >= 1 && a.duration > 0.5", arg=audio.element_handle())
    download = form.get_by_role("link", name="Download WAV")
    assert download.get_attribute("href") == audio.get_attribute("src")
    assert download.get_attribute("download") == "media-speech.wav"


def test_the_models_page_transcribes_an_uploaded_wav_to_its_words(
    page: Any, env: Env, tmp_path: Path
) -> None:
    speech = env.admin(
        "POST",
        "/v1/audio/speech",
        json={"model": "media", "input": SENTENCE, "voice": "default", "response_format": "wav"},
    )
    assert speech.status_code == 200, speech.text
    wav = tmp_path / "sentence.wav"
    wav.write_bytes(speech.content)
    form = page.locator("[data-testid=try][data-model=media] [data-testid=try-transcription]")
    form.get_by_label("Audio file").set_input_files(str(wav))
    _run(form, "Transcribe")
    sync_api.expect(form.locator("[data-testid=transcript]")).to_have_text(SENTENCE)


def test_the_models_page_generates_an_image(page: Any, env: Env) -> None:
    form = page.locator("[data-testid=try][data-model=media] [data-testid=try-image]")
    form.get_by_label("Prompt").fill("a red fox in the snow")
    form.get_by_label("Size").select_option("128x128")
    _run(form, "Generate")
    image = form.locator("img[data-testid=image]")
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    assert image.evaluate("(img) => [img.naturalWidth, img.naturalHeight]") == [128, 128]
    _shot(env, page, "12-models-try-media")
    page.locator("[data-testid=try][data-model=media]").get_by_role("link", name="Chat with it").click()
    page.wait_for_url("**/app/chat?model=media")
    sync_api.expect(page.locator("[data-testid=chat-model]")).to_have_value("media")


def test_the_models_page_embeds_and_shows_the_servers_error(page: Any, env: Env) -> None:
    panel = _try_panel(page, "embedder")
    assert [f.get_attribute("data-capability") for f in panel.locator("form").all()] == ["embeddings"]
    form = panel.locator("[data-testid=try-embeddings]")
    form.get_by_label("Text to embed").fill("hello there")
    _run(form, "Embed")
    dimension = int(form.locator("[data-testid=embedding]").get_attribute("data-dimension"))
    assert dimension > 0
    sync_api.expect(form.locator("[data-testid=embedding] dd").first).to_have_text(str(dimension))
    form = _try_panel(page, "ranker").locator("[data-testid=try-rerank]")
    form.get_by_label("Query").fill("a fox")
    form.get_by_label("Documents, one per line").fill("a red fox\na blue whale")
    form.get_by_role("button", name="Rerank").click()
    sync_api.expect(form).to_have_attribute("data-state", "failed", timeout=MODALITY_TIMEOUT_MS)
    sync_api.expect(form.get_by_role("alert")).to_contain_text(
        "does not implement Rerank"
    )  # the server's message
    _shot(env, page, "13-models-try-error")


def test_narrow_dark_screen_renders_every_page(browser: Any, env: Env) -> None:
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, color_scheme="dark", device_scale_factor=2
    )
    context.set_default_timeout(UI_TIMEOUT_MS)
    try:
        pg = context.new_page()
        _login(pg, env)
        background = pg.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(15, 19, 24)", background  # the dark palette from prefers-color-scheme
        node_id = env.node("gpu-a")["id"]
        for name, path, ready in [
            ("nodes", "/app/nodes", "[data-testid=node-card]"),
            ("node", f"/app/nodes/{node_id}", "#labels li"),
            ("models", "/app/models", "tr[data-model]"),
            ("scheduling", "/app/scheduling", "tr[data-rule]"),
            ("activity", "/app/activity", "[data-testid=op]"),
            ("chat", "/app/chat", "[data-testid=chat-model] option"),
        ]:
            pg.goto(f"{env.cluster.frontend_url}{path}")  # a deep link: the server answers index.html
            pg.locator(ready).first.wait_for(state="attached")
            if name == "models":  # with a Try panel open: its forms fit too
                pg.locator("tr[data-model=media] [data-testid=try]").click()
                pg.locator("[data-testid=try][data-model=media] form").first.wait_for()
            if name == "node" and env.admin("GET", f"/api/nodes/{node_id}/backend-logs").status_code == 200:
                sync_api.expect(pg.locator("#backend-log pre")).not_to_be_empty()  # where the logs API exists
            overflow = pg.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, (
                f"{name}: the page scrolls sideways by {overflow}px at 390 px: {pg.evaluate(WIDE)}"
            )
            _shot(env, pg, f"20-narrow-dark-{name}")
        pg.locator("[data-testid=theme]").click()  # the toggle overrides the system's preference
        assert pg.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(245, 246, 248)"
    finally:
        context.close()


def test_screenshots_were_written(env: Env) -> None:
    names = sorted(p.name for p in env.shots.glob("*.png"))
    assert len(names) >= 15, names
    assert all((env.shots / n).stat().st_size > 5000 for n in names), "a screenshot is blank"
