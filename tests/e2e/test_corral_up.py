"""`corral up` on the embedded default: serves the default Gemma model, leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai
import pytest

from support.cluster import free_port, free_stable_base
from support.processes import corral_up_ready

pytestmark = pytest.mark.slow


def _processes_with(marker: str, data_dir: Path) -> list[str]:
    """Processes started by this `corral up`: its marker in their environment, or its data dir in argv."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if f"CORRAL_UP_ID={marker}".encode() in environ or str(data_dir).encode() in cmdline:
            found.append(f"{entry.name}: {cmdline.decode(errors='replace')[:160]}")
    return found


def _start(data_dir: Path, port: int, worker_port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral",
            "up",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--worker-base-port",
            str(worker_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _marker(data_dir: Path) -> str:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"run" in cmdline.split(b"\0") and str(data_dir).encode() in cmdline:
            for item in environ.split(b"\0"):
                if item.startswith(b"CORRAL_UP_ID="):
                    return item.split(b"=", 1)[1].decode()
    raise LookupError("frontend of corral up not found")


def _check_admin_key_and_approval(data_dir: Path, port: int, text: str, *, first_run: bool) -> None:
    """The admin key is printed once and kept 0600; own workers are approved, a foreign node stays pending."""
    key_file = data_dir / "admin-key"
    key = key_file.read_text().strip()
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert (key in text) is first_run, text
    admin = {"Authorization": f"Bearer {key}"}
    nodes = httpx.get(f"http://127.0.0.1:{port}/api/nodes", headers=admin).json()
    own = [n for n in nodes if n["name"].endswith("-worker-1")]
    assert own and own[0]["status"] == "healthy" and own[0]["approved"]
    if first_run:
        token = (data_dir / "registration-token").read_text().strip()
        reply = httpx.post(
            f"http://127.0.0.1:{port}/api/node/register",
            headers={"Authorization": f"Bearer {token}"},
            json={"name": "stranger", "address": "10.9.9.9:50051", "token": token},
        )
        assert reply.status_code == 201 and reply.json()["status"] == "pending"
    assert httpx.get(f"http://127.0.0.1:{port}/api/nodes").status_code == 401


def test_corral_up_serves_the_default_model_and_stops_cleanly_twice() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="corral-up-", dir="/var/tmp"))
    os.chmod(data_dir, 0o755)
    port, worker_port = free_port(), free_stable_base()
    try:
        for run in range(2):  # the second run reuses the data dir
            proc = _start(data_dir, port, worker_port)
            try:
                lines = corral_up_ready(proc, 180.0)
                text = "".join(lines)
                for component in ("postgres", "nats", "frontend", "worker-1"):
                    assert any(line.startswith(component) for line in lines), text
                assert f"curl http://127.0.0.1:{port}/v1/chat/completions" in text
                marker = _marker(data_dir)
                _check_admin_key_and_approval(data_dir, port, text, first_run=run == 0)
                if run == 0:
                    client = openai.OpenAI(
                        base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=300
                    )
                    reply = client.chat.completions.create(
                        model="gemma-3-270m",
                        messages=[{"role": "user", "content": "Say hello."}],
                        max_tokens=8,
                    )
                    assert reply.choices[0].message.content
                    assert reply.usage is not None and reply.usage.completion_tokens > 0
                    vectors = client.embeddings.create(model="all-minilm-l6-v2", input="a sentence")
                    assert len(vectors.data[0].embedding) == 384
                else:
                    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
                assert proc.stdout is not None
                proc.stdout.close()
            assert proc.returncode == 0
            deadline = time.monotonic() + 10
            while _processes_with(marker, data_dir) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _processes_with(marker, data_dir) == []
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
