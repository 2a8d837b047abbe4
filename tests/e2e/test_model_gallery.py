"""The model gallery on a real frontend, worker, NATS and PostgreSQL: a gallery index served from a local
HTTP server (and files beside a local index) lists its models with the cluster's fit verdict; an install
downloads with progress, verifies the digest and commits the config, and the model then answers a chat;
every hostile entry (a `../` or absolute file name, a uri outside the gallery, a wrong digest, a symlink
at the destination, a file past the download cap) is refused without writing outside the models
directory; a broken index is named, never a 500; apply and jobs are admin-only."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from support.cluster import Cluster

pytestmark = pytest.mark.slow

MIB = 1 << 20
CHUNKS = 4  # the served file: 4 chunks of 1 MiB (fetch reads 1 MiB at a time), a pause between them


class SlowFiles(http.server.BaseHTTPRequestHandler):
    """Serves `files` (name -> bytes) in 1 MiB chunks with a pause, so a download is seen mid-way."""

    files: dict[str, bytes] = {}
    pause_s = 0.4
    slow_pause_s = 3.0  # slow.bin: long enough to stop its frontend mid download

    def do_GET(self) -> None:
        data = self.files.get(self.path.lstrip("/"))
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        for start in range(0, len(data), MIB):
            self.wfile.write(data[start : start + MIB])
            self.wfile.flush()
            time.sleep(self.slow_pause_s if self.path == "/slow.bin" else self.pause_s)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowFiles)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def gallery_dir(state_root: Path, served: str) -> Path:
    root = state_root / "e2e-model-gallery-index"
    (root / "files").mkdir(parents=True)
    chat = bytes(range(256)) * (CHUNKS * MIB // 256)
    SlowFiles.files["tiny-chat.bin"] = chat
    SlowFiles.files["slow.bin"] = chat
    q8 = b"q8 weights" * 1000
    (root / "files" / "q8.bin").write_bytes(q8)
    (root / "files" / "good.bin").write_bytes(b"genuine")
    with open(root / "files" / "big.bin", "wb") as fh:
        fh.truncate(6 * MIB)  # past the 5 MiB cap the frontend is started with
    simulator = {"backend": "simulator"}
    entries = [
        {
            "name": "tiny-chat",
            "description": "a simulator-backed chat model",
            "license": "apache-2.0",
            "tags": ["chat", "tiny"],
            "config_file": {**simulator, "parameters": {"model": "tiny-chat.bin"}},
            "overrides": {"context_size": 512},
            "files": [
                {
                    "filename": "tiny-chat.bin",
                    "uri": f"{served}/tiny-chat.bin",
                    "sha256": _sha(chat),
                    "size": len(chat),
                }
            ],
            "variants": [{"model": "tiny-chat-q8"}],
        },
        {
            "name": "tiny-chat-q8",
            "config_file": simulator,
            "files": [{"filename": "tiny-chat-q8.bin", "uri": "files/q8.bin", "sha256": _sha(q8)}],
        },
        {
            "name": "huge",
            "config_file": simulator,
            "files": [{"filename": "huge.bin", "uri": "files/q8.bin", "size": "40TiB"}],
        },
        {
            "name": "bad-sha",
            "config_file": simulator,
            "files": [{"filename": "bad-sha.bin", "uri": "files/good.bin", "sha256": "0" * 64}],
        },
        {
            "name": "dotdot",
            "config_file": simulator,
            "files": [{"filename": "../escaped.bin", "uri": "files/good.bin"}],
        },
        {
            "name": "absolute",
            "config_file": simulator,
            "files": [{"filename": str(root / "abs.bin"), "uri": "files/good.bin"}],
        },
        {
            "name": "outside",
            "config_file": simulator,
            "files": [{"filename": "outside.bin", "uri": "file:///etc/hostname"}],
        },
        {
            "name": "yaml-name",
            "config_file": simulator,
            "files": [{"filename": "tiny-chat.yaml", "uri": "files/good.bin"}],
        },
        {
            "name": "symlinked",
            "config_file": simulator,
            "files": [{"filename": "link.bin", "uri": "files/good.bin"}],
        },
        {
            "name": "slow",
            "config_file": simulator,
            "files": [{"filename": "slow.bin", "uri": f"{served}/slow.bin"}],
        },
        {"name": "big", "config_file": simulator, "files": [{"filename": "big.bin", "uri": "files/big.bin"}]},
    ]
    (root / "index.yaml").write_text(yaml.safe_dump(entries))
    (root / "broken.yaml").write_text("- name: [unclosed\n")
    (root / "wrong.yaml").write_text(yaml.safe_dump([{"name": "x", "files": [{"filename": 3}]}]))
    return root


@pytest.fixture(scope="module")
def cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str, gallery_dir: Path
) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-model-gallery", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (state_root / "e2e-model-gallery" / "outside-target.bin").write_bytes(b"not yours")
    (c.models_dir / "link.bin").symlink_to(state_root / "e2e-model-gallery" / "outside-target.bin")
    galleries = [
        {"name": "test", "url": str(gallery_dir / "index.yaml")},
        {"name": "broken", "url": f"file://{gallery_dir / 'broken.yaml'}"},
        {"name": "wrong", "url": str(gallery_dir / "wrong.yaml")},
    ]
    c.frontend_env["LOCALAI_GALLERIES"] = json.dumps(galleries)
    yield from c.serving("w1", frontend_args=("--model-gallery-max-download", "5MiB"))


def _get(c: Cluster, path: str) -> Any:
    response = httpx.get(f"{c.frontend_url}{path}", headers=c.admin_headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _apply(c: Cluster, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{c.frontend_url}/models/apply", json=body, headers=c.admin_headers, timeout=30)


def _wait_job(
    c: Cluster, uuid: str, seen: list[dict[str, Any]] | None = None, poll_s: float = 0.05
) -> dict[str, Any]:
    for _ in range(int(60 / poll_s)):
        job = _get(c, f"/models/jobs/{uuid}")
        if seen is not None:
            seen.append(job)
        if job["processed"]:
            return dict(job)
        time.sleep(poll_s)
    raise AssertionError(f"job {uuid} did not finish: {job}")


def _wait_node(c: Cluster) -> None:
    for _ in range(200):
        if _get(c, "/api/gallery/models").get("cluster"):
            return
        time.sleep(0.1)
    raise AssertionError("worker w1 never became a healthy node")


def test_available_lists_models_with_fit_verdicts_and_names_broken_galleries(cluster: Cluster) -> None:
    c = cluster
    _wait_node(c)
    listed = {m["name"]: m for m in _get(c, "/models/available")}
    chat = listed["tiny-chat"]
    assert chat["id"] == "test@tiny-chat" and chat["gallery"]["name"] == "test"
    assert chat["license"] == "apache-2.0" and chat["tags"] == ["chat", "tiny"]
    assert chat["files"][0]["filename"] == "tiny-chat.bin" and chat["installed"] is False
    assert chat["memory_bytes"] == CHUNKS * MIB
    assert chat["fits"] is True and chat["fits_on"] == "w1" and chat["verdict"] == "Fits on w1"
    assert chat["budget_node"] == "w1" and chat["budget_bytes"] > 0
    assert [v["name"] for v in chat["variants"]] == ["tiny-chat-q8"]
    assert chat["variants"][0]["fits"] is True and chat["variants"][0]["memory_bytes"] == 10_000  # local size
    assert listed["huge"]["fits"] is False and listed["huge"]["verdict"].startswith("Too large")
    assert listed["dotdot"]["installable"] is False and "files[0].filename" in listed["dotdot"]["problem"]

    admin = _get(c, "/api/gallery/models")
    assert admin["cluster"]["node_name"] == "w1"
    errors = {e["gallery"]: e["error"] for e in admin["errors"]}
    assert "not valid YAML" in errors["broken"]
    assert "files.0.filename" in errors["wrong"] and "'x'" in errors["wrong"]
    assert [g["name"] for g in admin["galleries"]] == ["test", "broken", "wrong"]


def test_apply_downloads_with_progress_then_the_model_answers(cluster: Cluster) -> None:
    c = cluster
    answer = _apply(c, {"id": "test@tiny-chat"})
    assert answer.status_code == 200, answer.text
    uuid = answer.json()["uuid"]
    assert answer.json()["status"].endswith(f"/models/jobs/{uuid}")
    seen: list[dict[str, Any]] = []
    job = _wait_job(c, uuid, seen)
    assert job["error"] is None and job["status"] == "completed", job
    assert job["progress"] == 100.0 and job["gallery_element_name"] == "tiny-chat"
    midway = [j for j in seen if not j["processed"] and 0 < j["progress"] < 100]
    assert midway, seen  # progress reported while the file downloaded
    assert (
        midway[0]["file_name"] == "tiny-chat.bin" and midway[0]["downloaded_size"] and midway[0]["file_size"]
    )
    assert (c.models_dir / "tiny-chat.bin").read_bytes() == SlowFiles.files["tiny-chat.bin"]
    config = _get(c, "/api/model-configs/tiny-chat")["config"]
    assert config["backend"] == "simulator" and config["context_size"] == 512
    assert config["parameters"]["model"] == "tiny-chat.bin"
    assert not list(c.models_dir.glob(".gallery-*"))  # no partial file left
    history = _get(c, "/api/operations/history")
    assert any(op.get("id") == uuid or op.get("op_id") == uuid for op in _ops(history)), history
    chat = httpx.post(
        f"{c.frontend_url}/v1/chat/completions",
        json={"model": "tiny-chat", "messages": [{"role": "user", "content": "hello"}]},
        timeout=120,
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"]
    assert {m["name"]: m for m in _get(c, "/models/available")}["tiny-chat"]["installed"] is True
    assert uuid in _get(c, "/models/jobs")


def _ops(history: Any) -> list[dict[str, Any]]:
    if isinstance(history, dict):
        for value in history.values():
            if isinstance(value, list):
                return value
    return list(history)


def test_a_wrong_digest_fails_the_job_naming_the_file_and_leaves_nothing(cluster: Cluster) -> None:
    c = cluster
    answer = _apply(c, {"id": "bad-sha", "name": "bad-sha-install"})
    assert answer.status_code == 200, answer.text
    job = _wait_job(c, answer.json()["uuid"])
    assert job["status"] == "failed" and "bad-sha.bin" in job["error"] and "sha256 mismatch" in job["error"]
    assert not (c.models_dir / "bad-sha.bin").exists()
    assert not list(c.models_dir.glob(".gallery-*"))
    assert "bad-sha-install" not in {cfg["name"] for cfg in _get(c, "/api/model-configs")["configs"]}


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("dotdot", "files[0].filename"),
        ("absolute", "files[0].filename"),
        ("yaml-name", "files[0].filename"),
        ("outside", "files[0].uri"),
    ],
)
def test_hostile_entries_are_refused_before_anything_is_written(
    cluster: Cluster, gallery_dir: Path, model: str, field: str
) -> None:
    c = cluster
    before = sorted(p.name for p in c.models_dir.parent.iterdir())
    answer = _apply(c, {"id": f"test@{model}"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == field and field in error["message"]
    assert not (c.models_dir.parent / "escaped.bin").exists()
    assert not (gallery_dir / "abs.bin").exists() and not (c.models_dir / "outside.bin").exists()
    assert sorted(p.name for p in c.models_dir.parent.iterdir()) == before


def test_bad_requests_are_400s_naming_the_field(cluster: Cluster) -> None:
    c = cluster
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "id"),
        ({"id": "test@tiny-chat", "name": "../etc"}, "name"),
        ({"id": "test@tiny-chat", "overrides": [1]}, "overrides"),
        ({"id": "test@tiny-chat", "overrides": {"backend": "../x"}}, "config_file"),
    ]
    for body, field in cases:
        answer = _apply(c, body)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["param"] == field, (body, answer.text)
    missing = _apply(c, {"id": "test@no-such-model"})
    assert missing.status_code == 404 and "no configured gallery lists" in missing.json()["error"]["message"]
    assert httpx.get(f"{c.frontend_url}/models/jobs/not-a-uuid", headers=c.admin_headers).status_code == 404


def test_a_symlink_at_the_destination_is_not_written_through(cluster: Cluster) -> None:
    c = cluster
    answer = _apply(c, {"id": "test@symlinked"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "files[0].filename" and "symlink" in error["message"]
    assert (c.models_dir.parent / "outside-target.bin").read_bytes() == b"not yours"
    assert (c.models_dir / "link.bin").is_symlink()


def test_a_file_past_the_download_cap_stops_naming_the_setting(cluster: Cluster) -> None:
    c = cluster
    answer = _apply(c, {"id": "test@big"})
    assert answer.status_code == 200, answer.text
    job = _wait_job(c, answer.json()["uuid"])
    assert job["status"] == "failed" and "CORRAL_MODEL_GALLERY_MAX_DOWNLOAD" in job["error"], job
    assert not (c.models_dir / "big.bin").exists() and not list(c.models_dir.glob(".gallery-*"))


@pytest.mark.parametrize(
    ("galleries", "named"),
    [
        ("broken", ["gallery 'broken'", "not valid YAML", "gallery 'wrong'", "files.0.filename"]),
        ('[{"name": "x"', ["LOCALAI_GALLERIES", "JSON list"]),
    ],
)
def test_no_readable_gallery_is_a_502_naming_each_fault(
    cluster: Cluster, gallery_dir: Path, galleries: str, named: list[str]
) -> None:
    c = cluster
    if galleries == "broken":
        galleries = json.dumps(
            [
                {"name": "broken", "url": str(gallery_dir / "broken.yaml")},
                {"name": "wrong", "url": str(gallery_dir / "wrong.yaml")},
            ]
        )
    saved = dict(c.frontend_env)
    c.frontend_env["LOCALAI_GALLERIES"] = galleries
    try:
        proc, url = c.spawn_frontend(f"frontend-galleries-{len(c.others)}")
    finally:
        c.frontend_env.clear()
        c.frontend_env.update(saved)
    try:
        answer = httpx.get(f"{url}/models/available", timeout=30)
        assert answer.status_code == 502, answer.text
        message = answer.json()["error"]["message"]
        assert all(part in message for part in named), message
        applied = httpx.post(f"{url}/models/apply", json={"id": "x"}, headers=c.admin_headers, timeout=30)
        assert applied.status_code == 404 and named[0] in applied.json()["error"]["message"], applied.text
    finally:
        proc.stop()


def test_apply_and_jobs_are_admin_only(cluster: Cluster) -> None:
    c = cluster
    url = c.frontend_url
    assert httpx.post(f"{url}/models/apply", json={"id": "test@tiny-chat"}).status_code == 401
    assert httpx.get(f"{url}/models/jobs").status_code == 401
    assert httpx.get(f"{url}/api/gallery/models").status_code == 401
    created = httpx.post(
        f"{url}/api/keys", json={"name": "gallery-user", "role": "user"}, headers=c.admin_headers
    )
    assert created.status_code == 201, created.text
    user = {"Authorization": f"Bearer {created.json()['key']}"}
    assert httpx.post(f"{url}/models/apply", json={"id": "test@tiny-chat"}, headers=user).status_code == 403
    assert (
        httpx.get(f"{url}/models/jobs/00000000-0000-0000-0000-000000000000", headers=user).status_code == 403
    )


def _start_slow_install(c: Cluster) -> str:
    answer = _apply(c, {"id": "test@slow"})
    assert answer.status_code == 200, answer.text
    uuid = str(answer.json()["uuid"])
    for _ in range(200):
        job = _get(c, f"/models/jobs/{uuid}")
        if job["downloaded_size"]:
            break
        time.sleep(0.05)
    assert not job["processed"] and job["file_name"] == "slow.bin", job
    assert list(c.models_dir.glob(f".gallery-{uuid}-*"))  # the partial file, mid download
    live = _get(c, "/api/operations")["operations"]  # what the operations strip shows
    assert any(op["id"] == uuid and op["taskType"] == "model_install" for op in live), live
    return uuid


def test_a_job_whose_frontend_stops_fails_at_once_naming_it(cluster: Cluster) -> None:
    """Near the end: it stops the module's frontend (SIGTERM, mid download) and starts another."""
    c = cluster
    uuid = _start_slow_install(c)
    assert c.frontend is not None
    c.frontend.stop()
    c.start_frontend("--model-gallery-max-download", "5MiB")
    job = _get(c, f"/models/jobs/{uuid}")
    assert job["processed"] and job["status"] == "failed", job
    assert "frontend stopped during the install" in job["error"], job
    assert not list(c.models_dir.glob(".gallery-*")) and not (c.models_dir / "slow.bin").exists()


def test_a_job_whose_frontend_died_fails_clearly_and_leaves_no_partial_file(cluster: Cluster) -> None:
    """Last: it kills the module's frontend (SIGKILL, mid download) and starts another on the same database."""
    c = cluster
    uuid = _start_slow_install(c)
    assert c.frontend is not None
    c.frontend.popen.kill()
    c.frontend.popen.wait()
    c.start_frontend("--model-gallery-max-download", "5MiB")
    job = _wait_job(c, uuid, poll_s=1.0)  # failed once no frontend touched it for 30 s
    assert job["status"] == "failed" and "stopped" in job["error"] and "apply again" in job["error"], job
    assert not list(c.models_dir.glob(".gallery-*")) and not (c.models_dir / "slow.bin").exists()
