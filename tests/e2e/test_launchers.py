"""Operator-launched followers on real processes, with stand-in engines that record their argv and exit codes:
`corral p2p-worker vllm` (registers as an agent node labelled node.role=vllm-follower, never placed on,
deregistered when vLLM exits, vLLM's exit code is the command's) and `corral worker ds4-distributed --`
(execs the installed ds4 backend's worker binary with the arguments passed through)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster
from support.waiting import wait_for

pytestmark = pytest.mark.slow

TOPOLOGY = [
    "--data-parallel-size",
    "4",
    "--data-parallel-size-local",
    "2",
    "--start-rank",
    "2",
    "--master-addr",
    "10.0.0.1",
    "--master-port",
    "32100",
]

# A stand-in vLLM: records its argv (one per line) and the DP env, then waits for a release file or SIGTERM.
STAND_IN_VLLM = """#!/bin/sh
trap 'echo TERM >> "$RECORD.events"; exit 143' TERM
printf '%s\\n' "$@" > "$RECORD.argv"
echo "$VLLM_DP_MASTER_IP $VLLM_DP_MASTER_PORT $VLLM_DP_SIZE $VLLM_DP_RANK $VLLM_DP_RANK_LOCAL" > "$RECORD.env"
pwd > "$RECORD.cwd"
i=0
while [ ! -e "$RECORD.release" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
exit 3
"""

STAND_IN_DS4 = """#!/bin/sh
printf '%s\\n' "$0" "$@" > "$RECORD.argv"
exit 7
"""

STAND_IN_LOADER = """#!/bin/sh
echo loader > "$RECORD.loader"
exec "$@"
"""


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    if path.name == "run.sh":  # an installed backend: run.sh + metadata.json (gallery/registry.py)
        (path.parent / "metadata.json").write_text(json.dumps({"name": path.parent.name}))


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-launchers", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    try:
        c.start_frontend()
        c.start_worker("backend-1")
        yield c
    finally:
        c.stop()


def _launch(
    argv: list[str], record: Path, cwd: Path, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, "RECORD": str(record), **(extra_env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "corral", *argv],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _started(proc: subprocess.Popen[str], record: Path, cluster: Cluster, name: str) -> None:
    """Wait until the stand-in vLLM runs and the follower's node is registered (the process's output if not)."""

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the follower exited with {proc.returncode}: {proc.communicate()}")
        return Path(f"{record}.argv").exists() and _node(cluster, name) is not None

    wait_for(ready, f"the follower's vLLM to start and node {name} to register", 30)


def _nodes(cluster: Cluster) -> list[dict[str, Any]]:
    return list(
        httpx.get(f"{cluster.frontend_url}/api/nodes", headers=cluster.admin_headers, timeout=10).json()
    )


def _status(cluster: Cluster, name: str) -> str:
    node = _node(cluster, name)
    return str(node["status"]) if node else "absent"


def _node(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return next((n for n in _nodes(cluster) if n["name"] == name), None)


def test_vllm_follower_registers_runs_the_headless_rank_and_exits_with_vllms_code(
    cluster: Cluster, tmp_path: Path
) -> None:
    backends = tmp_path / "backends"
    _script(backends / "vllm" / "run.sh", STAND_IN_VLLM)
    record = tmp_path / "rec"
    proc = _launch(
        [
            "p2p-worker",
            "vllm",
            "Qwen/Qwen3.5-1.5B",
            *TOPOLOGY,
            "--register-to",
            cluster.frontend_url,
            "--registration-token",
            cluster.token,
            "--node-name",
            "follower-1",
            "--backends-path",
            str(backends),
            "--heartbeat-interval",
            "1s",
            "--vllm-arg=--enforce-eager",
            "--",
            "--tensor-parallel-size",
            "2",
        ],
        record,
        tmp_path,
    )
    try:
        _started(proc, record, cluster, "follower-1")
        assert Path(f"{record}.argv").read_text().split("\n")[:-1] == [
            "serve",
            "Qwen/Qwen3.5-1.5B",
            "--headless",
            "--data-parallel-size",
            "4",
            "--data-parallel-size-local",
            "2",
            "--data-parallel-start-rank",
            "2",
            "--data-parallel-address",
            "10.0.0.1",
            "--data-parallel-rpc-port",
            "32100",
            "--enforce-eager",
            "--tensor-parallel-size",
            "2",
        ]
        assert Path(f"{record}.env").read_text().split() == ["10.0.0.1", "32100", "4", "2", "0"]
        node = _node(cluster, "follower-1")
        assert node is not None and node["node_type"] == "agent"
        labels = httpx.get(
            f"{cluster.frontend_url}/api/nodes/{node['id']}/labels", headers=cluster.admin_headers, timeout=10
        ).json()
        assert labels["node.role"] == "vllm-follower"

        # The SmartRouter never places on a follower: the model lands on the backend worker.
        reply = httpx.post(
            f"{cluster.frontend_url}/v1/chat/completions",
            timeout=60,
            json={"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert reply.status_code == 200, reply.text
        models = httpx.get(
            f"{cluster.frontend_url}/api/nodes/{node['id']}/models", headers=cluster.admin_headers, timeout=10
        ).json()
        assert models == []

        Path(f"{record}.release").touch()
        assert proc.wait(timeout=30) == 3  # vLLM's exit code
        wait_for(
            lambda: _status(cluster, "follower-1") == "offline", "the follower to deregister (offline)", 15
        )
    finally:
        proc.kill()
        proc.communicate()


def test_sigterm_reaches_vllm_and_the_follower_deregisters(cluster: Cluster, tmp_path: Path) -> None:
    backends = tmp_path / "backends"
    _script(backends / "vllm" / "run.sh", STAND_IN_VLLM)
    record = tmp_path / "rec"
    proc = _launch(
        [
            "p2p-worker",
            "vllm",
            "m",
            *TOPOLOGY,
            "--register-to",
            cluster.frontend_url,
            "--registration-token",
            cluster.token,
            "--node-name",
            "follower-2",
            "--backends-path",
            str(backends),
        ],
        record,
        tmp_path,
    )
    try:
        _started(proc, record, cluster, "follower-2")
        assert Path(f"{record}.cwd").read_text().strip() == str(tmp_path)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        assert Path(f"{record}.events").read_text().strip() == "TERM"
        wait_for(
            lambda: _status(cluster, "follower-2") == "offline", "the follower to deregister (offline)", 15
        )
    finally:
        proc.kill()
        proc.communicate()


def test_without_register_to_it_only_runs_vllm(cluster: Cluster, tmp_path: Path) -> None:
    backends = tmp_path / "backends"
    _script(backends / "vllm" / "run.sh", STAND_IN_VLLM)
    record = tmp_path / "rec"
    Path(f"{record}.release").touch()
    before = {n["name"] for n in _nodes(cluster)}
    proc = _launch(["p2p-worker", "vllm", "m", *TOPOLOGY, "--backends-path", str(backends)], record, tmp_path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert {n["name"] for n in _nodes(cluster)} == before


@pytest.mark.parametrize(
    "argv",
    [
        ["p2p-worker", "vllm", "m", *TOPOLOGY],
        ["worker", "ds4-distributed", "--", "--role", "worker"],
    ],
)
def test_a_missing_engine_is_one_line_naming_what_to_install(tmp_path: Path, argv: list[str]) -> None:
    proc = _launch(
        [*argv[:2], "--backends-path", str(tmp_path), *argv[2:]],
        tmp_path / "rec",
        tmp_path,
        {"PATH": "/usr/bin:/bin"},
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "install" in err and ("vllm" in err or "ds4" in err)


def test_bad_topology_is_a_usage_error(tmp_path: Path) -> None:
    proc = _launch(
        [
            "p2p-worker",
            "vllm",
            "m",
            *TOPOLOGY[:-6],
            "--start-rank",
            "0",
            "--master-addr",
            "h",
            "--master-port",
            "1",
        ],
        tmp_path / "rec",
        tmp_path,
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "cannot be --headless" in err and "Traceback" not in err


@pytest.mark.parametrize("with_loader", [False, True])
def test_ds4_worker_is_execed_with_the_arguments_passed_through(tmp_path: Path, with_loader: bool) -> None:
    backends = tmp_path / "backends"
    _script(backends / "ds4" / "run.sh", "#!/bin/sh\nexit 0\n")
    _script(backends / "ds4" / "ds4-worker", STAND_IN_DS4)
    if with_loader:
        _script(backends / "ds4" / "lib" / "ld.so", STAND_IN_LOADER)
    record = tmp_path / "rec"
    passthrough = [
        "--role",
        "worker",
        "--model",
        "/models/ds4 flash.gguf",
        "--layers",
        "20:output",
        "--coordinator",
        "coord",
        "1234",
        "--",
        "--backends-path",
    ]
    proc = _launch(
        ["worker", "ds4-distributed", "--backends-path", str(backends), "--", *passthrough], record, tmp_path
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 7, err  # the binary's exit code: corral exec'd it
    assert Path(f"{record}.argv").read_text().split("\n")[:-1] == [
        str(backends / "ds4" / "ds4-worker"),
        *passthrough,
    ]
    assert Path(f"{record}.loader").exists() == with_loader
