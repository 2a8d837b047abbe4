"""`corral up` from the installed wheel, outside the checkout, serves the default models."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest

from support.cluster import free_port, free_stable_base
from support.deploy_files import build_wheel, clean_env, fresh_venv
from support.processes import corral_up_ready

pytestmark = pytest.mark.slow
READY_TIMEOUT_S = 240.0


def _children_of(pid: int) -> list[list[str]]:
    argvs = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                argvs.append((entry / "cmdline").read_bytes().decode(errors="replace").split("\0"))
        except (OSError, IndexError, ValueError):
            continue
    return argvs


def test_installed_corral_up_serves_the_default_models(tmp_path: Path) -> None:
    venv = fresh_venv(tmp_path, build_wheel(tmp_path))
    data_dir = Path(tempfile.mkdtemp(prefix="corral-installed-up-", dir="/var/tmp"))
    os.chmod(data_dir, 0o755)  # the embedded PostgreSQL runs as `postgres` when root
    port, worker_port = (
        free_port(),
        free_stable_base(),
    )  # 47000+ lay in the ephemeral range: taken once, mid-start
    try:
        with subprocess.Popen(
            [
                str(venv / "bin" / "corral"),
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
            cwd=tmp_path,
            env=clean_env(),
            start_new_session=True,
        ) as proc:
            try:
                text = "".join(corral_up_ready(proc, READY_TIMEOUT_S))
                assert f"frontend   http://127.0.0.1:{port}" in text
                corral_children = [argv for argv in _children_of(proc.pid) if argv[1:3] == ["-m", "corral"]]
                assert {argv[3] for argv in corral_children} == {"run", "worker"}
                assert all(Path(argv[0]).is_relative_to(venv) for argv in corral_children), corral_children
                base = f"http://127.0.0.1:{port}/v1"
                chat = httpx.post(
                    f"{base}/chat/completions",
                    timeout=300,
                    json={
                        "model": "gemma-3-270m",
                        "messages": [{"role": "user", "content": "Say hello."}],
                        "max_tokens": 8,
                    },
                )
                assert chat.status_code == 200, chat.text
                assert chat.json()["usage"]["completion_tokens"] > 0
                vectors = httpx.post(
                    f"{base}/embeddings",
                    timeout=300,
                    json={"model": "all-minilm-l6-v2", "input": "a sentence"},
                )
                assert vectors.status_code == 200, vectors.text
                assert len(vectors.json()["data"][0]["embedding"]) == 384
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
            assert proc.returncode == 0
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
