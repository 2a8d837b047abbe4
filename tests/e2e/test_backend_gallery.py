"""A fresh worker with an empty backends path installs a model's backend from a gallery, then serves it.

Real frontend, worker, NATS and PostgreSQL; the backend is a directory in the reference's layout
(backend.py generated from backend.proto, the reference's run.sh) with a package only its own venv has.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import nats
import pytest
from nats.aio.msg import Msg

from support.cluster import Cluster
from support.galleries import ref_gallery

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gallery(state_root: Path) -> str:
    """The worker's --backend-galleries: one test gallery (reference-layout backend + its wheel)."""
    index = ref_gallery(state_root / "e2e-backend-gallery-index")
    return json.dumps([{"name": "test", "url": str(index)}])


@pytest.fixture(scope="module")
def cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str, gallery: str
) -> Iterator[Cluster]:
    """One frontend (300 ms install timeout: the test install outlasts it) and one fresh worker."""
    c = Cluster(root=state_root / "e2e-backend-gallery", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "ref-chat.yaml").write_text("name: ref-chat\nbackend: refbackend\n")
    (c.models_dir / "ghost.yaml").write_text("name: ghost\nbackend: no-such-backend\n")
    try:
        c.start_frontend("--model-load-wait", "200ms", "--backend-install-timeout", "300ms")
        c.start_worker("w1", "--backend-galleries", gallery)  # backends path: <root>/w1/backends, empty
        yield c
    finally:
        c.stop()


class ProgressWatch:
    """Every install progress event on the bus (`nodes.*.backend.install.*.progress`), from a thread."""

    def __init__(self, nats_url: str) -> None:
        self.events: list[dict[str, object]] = []
        self.ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run(nats_url)), daemon=True)
        self._thread.start()
        assert self.ready.wait(10)

    async def _run(self, url: str) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        nc = await nats.connect(url)

        async def on_msg(msg: Msg) -> None:
            self.events.append(json.loads(msg.data))

        await nc.subscribe("nodes.*.backend.install.*.progress", cb=on_msg)
        await nc.flush()
        self.ready.set()
        await self._stop.wait()
        await nc.close()

    def close(self) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def _chat(url: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        timeout=60,
        json={"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
    )


def test_a_fresh_worker_installs_the_backend_from_the_gallery_then_serves_the_model(
    cluster: Cluster, nats_url: str
) -> None:
    """Progress over NATS and in load-status / the 503 `loading` object; the install outlasts the
    install timeout (300 ms), so the worker shows busy (not failed) and the same worker serves the model."""
    backends = cluster.root / "w1" / "backends"
    assert not backends.exists() or list(backends.iterdir()) == []
    watch = ProgressWatch(nats_url)
    try:
        first = _chat(cluster.frontend_url, "ref-chat")
        assert first.status_code == 503, first.text  # no wait budget: the load runs, the client comes back
        loading_seen: list[dict[str, object]] = []
        busy_seen = False
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            status = httpx.get(f"{cluster.frontend_url}/api/models/ref-chat/load-status", timeout=5)
            if status.status_code == 404:
                break  # the job is done
            body = status.json()
            busy_seen = busy_seen or body.get("worker_busy") is True
            if "install" in body:
                loading_seen.append(body)
                reply = _chat(cluster.frontend_url, "ref-chat")
                if reply.status_code == 503:
                    loaded = reply.json().get("loading") or reply.json()["error"].get("loading")
                    if loaded and "install" in loaded:
                        loading_seen.append({"from_503": True, **loaded})
            time.sleep(0.05)
        served = _chat(cluster.frontend_url, "ref-chat")
        assert served.status_code == 200, served.text
        assert "refbackend says:" in served.json()["choices"][0]["message"]["content"]
    finally:
        watch.close()
    # The bus is the whole test session's: other clusters' installs (the built-in simulator) may show too.
    phases = [e["phase"] for e in watch.events if e["backend"] == "refbackend"]
    assert phases and phases[0] == "resolving" and phases[-1] == "starting", phases
    assert loading_seen, "load-status never showed the backend install"
    assert all(
        b["install"]["phase"] in ("resolving", "downloading", "extracting", "starting")  # type: ignore[index]
        for b in loading_seen
    )
    assert any(b.get("from_503") for b in loading_seen), "the 503 loading object never showed the install"
    assert any(b["state"] == "installing" for b in loading_seen), [b["state"] for b in loading_seen]
    assert (backends / "refbackend" / "metadata.json").is_file()
    assert busy_seen, (
        "the install outlasted --backend-install-timeout but load-status never showed worker_busy"
    )
    log = cluster.frontend.log() if cluster.frontend else ""
    assert "worker busy, asking again" in log


def test_a_model_whose_backend_no_gallery_lists_fails_naming_the_galleries(cluster: Cluster) -> None:
    reply = _chat(cluster.frontend_url, "ghost")
    deadline = time.monotonic() + 30
    while reply.status_code == 503 and "loading" in reply.text and time.monotonic() < deadline:
        time.sleep(0.2)
        reply = _chat(cluster.frontend_url, "ghost")
    assert reply.status_code >= 400 and reply.status_code != 500, reply.text
    assert "no-such-backend" in reply.text and "galleries searched: test" in reply.text
