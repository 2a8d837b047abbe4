"""`corral p2p-worker vllm <model> …`: run one headless vLLM data-parallel follower (spec: vLLM Multi-Node).

The head runs corral's vLLM backend with `engine_args.data_parallel_*`; each follower runs vanilla
`vllm serve --headless` with the same topology, an explicit start rank and the head's address, and speaks
ZMQ to the head itself. With `--register-to` the follower shows in the admin API as an agent-type node
labelled `node.role=vllm-follower` while vLLM runs. The process exits with vLLM's exit code.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.config.launchers import VllmFollowerSettings
from corral.launchers.installed import EngineMissing, installed_backend_dir
from corral.node import hardware
from corral.node.presence import NodePresence

log = logging.getLogger(__name__)

FOLLOWER_ROLE = "vllm-follower"
ROLE_LABEL = "node.role"
VLLM_BACKEND = "vllm"


class TopologyError(ValueError):
    """Flags that describe no valid data-parallel topology (the handshake would hang or the head vanish)."""


def check_topology(s: VllmFollowerSettings) -> None:
    if s.headless and s.start_rank == 0:
        raise TopologyError(
            "--start-rank 0 is the head, which serves the API and cannot be --headless; "
            "give a follower's first rank (>0) or --headless=false"
        )
    if s.data_parallel_size_local > s.data_parallel_size:
        raise TopologyError(
            f"--data-parallel-size-local {s.data_parallel_size_local} exceeds "
            f"--data-parallel-size {s.data_parallel_size}"
        )
    if s.start_rank + s.data_parallel_size_local > s.data_parallel_size:
        raise TopologyError(
            f"ranks {s.start_rank}..{s.start_rank + s.data_parallel_size_local - 1} of this node "
            f"exceed --data-parallel-size {s.data_parallel_size} (ranks 0..{s.data_parallel_size - 1})"
        )


def vllm_args(model: str, s: VllmFollowerSettings, extra: Sequence[str]) -> list[str]:
    """The argv after the vLLM executable: `serve <model> [--headless] --data-parallel-… [extra…]`."""
    args = ["serve", model]
    if s.headless:
        args.append("--headless")
    args += [
        "--data-parallel-size",
        str(s.data_parallel_size),
        "--data-parallel-size-local",
        str(s.data_parallel_size_local),
        "--data-parallel-start-rank",
        str(s.start_rank),
        "--data-parallel-address",
        s.master_addr,
        "--data-parallel-rpc-port",
        str(s.master_port),
    ]
    return args + list(extra)


def vllm_env(s: VllmFollowerSettings) -> dict[str, str]:
    """vLLM reads the topology from these too (vllm/envs.py); set both, as the reference does."""
    return {
        "VLLM_DP_MASTER_IP": s.master_addr,
        "VLLM_DP_MASTER_PORT": str(s.master_port),
        "VLLM_DP_SIZE": str(s.data_parallel_size),
        "VLLM_DP_RANK": str(s.start_rank),
        "VLLM_DP_RANK_LOCAL": "0",
    }


def vllm_executable(s: VllmFollowerSettings) -> list[str]:
    """The installed vllm backend's run.sh (the reference's way), else a `vllm` on PATH."""
    backend = installed_backend_dir(VLLM_BACKEND, s.backends_path, s.backends_system_path)
    if backend is not None:
        return [str(backend / "run.sh")]
    on_path = shutil.which("vllm")
    if on_path:
        return [on_path]
    raise EngineMissing(
        f"vLLM is not installed: install the vllm backend into {s.backends_path} "
        f"(--backends-path; or {s.backends_system_path}), or `pip install vllm` so that `vllm` is "
        "on PATH"
    )


def registration_body(s: VllmFollowerSettings, facts: hardware.HardwareFacts) -> dict[str, Any]:
    name = s.node_name or f"vllm-{socket.gethostname()}"
    return {
        "name": name,
        "node_type": "agent",
        "total_vram": facts.total_vram,
        "available_vram": facts.total_vram,
        "gpu_vendor": facts.gpu_vendor,
        "total_ram": facts.total_ram,
        "available_ram": facts.available_ram,
        "labels": {**s.node_labels, ROLE_LABEL: FOLLOWER_ROLE},
    }


async def _run_vllm(argv: list[str], env: dict[str, str]) -> int:
    """Run vLLM in the foreground, forwarding SIGINT/SIGTERM so it closes its ZMQ sockets; its exit code."""
    process = await asyncio.create_subprocess_exec(*argv, env={**os.environ, **env})
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, process.send_signal, signum)
    try:
        code = await process.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    log.info("vLLM exited with code %d", code)
    return code if code >= 0 else 128 - code  # killed by signal N: the shell's 128+N


async def run(model: str, s: VllmFollowerSettings, extra: Sequence[str]) -> int:
    check_topology(s)
    argv = vllm_executable(s) + vllm_args(model, s, extra)
    log.info(
        "starting vLLM follower: ranks %d..%d of %d, head %s:%d",
        s.start_rank,
        s.start_rank + s.data_parallel_size_local - 1,
        s.data_parallel_size,
        s.master_addr,
        s.master_port,
    )
    if not s.register_to:
        return await _run_vllm(argv, vllm_env(s))
    state_dir = Path(s.state_dir) if s.state_dir else Path.cwd() / ".corral-worker"
    body = registration_body(s, await asyncio.to_thread(hardware.probe, Path.cwd()))
    async with NodePresence(s.register_to, s.registration_token, body, state_dir, s.heartbeat_interval_s):
        return await _run_vllm(argv, vllm_env(s))
