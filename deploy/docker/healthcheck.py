#!/usr/bin/env python3
"""corral-healthcheck: the container HEALTHCHECK. Probes the endpoint of the process this container runs.

HEALTHCHECK_ENDPOINT (a full http:// URL) wins when set. Otherwise the mode the entrypoint recorded
(CORRAL_RUN_DIR/corral-mode, default /tmp) decides:

  run           http://127.0.0.1:<port of LOCALAI_ADDRESS, default 8080>/readyz   (the frontend API)
  worker        http://127.0.0.1:<file server port>/readyz: the port of LOCALAI_HTTP_ADDR, else the
                gRPC base port - 1, the base port being LOCALAI_ADDR's or LOCALAI_SERVE_ADDR's (50051)
  other modes   healthy while the recorded process is alive (agent-worker has no HTTP probe)

Exit 0 = healthy, 1 = unhealthy, with one line saying what was probed. Standard library only.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping

FRONTEND_DEFAULT_PORT = 8080
WORKER_DEFAULT_BASE_PORT = 50051
PROBE_TIMEOUT_S = 4.0  # under the image's HEALTHCHECK --timeout=5s


def _port(host_port: str) -> int | None:
    """The port of `host:port` (`[v6]:port` included), or None when there is none."""
    _, sep, port = host_port.strip().rpartition(":")
    return int(port) if sep and port.isdigit() else None


def worker_probe_port(env: Mapping[str, str]) -> int:
    """The worker file server's port: LOCALAI_HTTP_ADDR's, else base port - 1 (same rule as `corral worker`)."""
    explicit = _port(env.get("LOCALAI_HTTP_ADDR", ""))
    if explicit is not None:
        return explicit
    for name in ("LOCALAI_ADDR", "LOCALAI_SERVE_ADDR"):
        base = _port(env.get(name, ""))
        if base is not None:
            return base - 1
    return WORKER_DEFAULT_BASE_PORT - 1


def endpoint_for(mode: str, env: Mapping[str, str]) -> str | None:
    """The URL to probe for `mode`, or None when the mode has no HTTP endpoint."""
    override = env.get("HEALTHCHECK_ENDPOINT", "").strip()
    if override:
        return override
    if mode == "run":
        port = _port(env.get("LOCALAI_ADDRESS", "")) or FRONTEND_DEFAULT_PORT
        return f"http://127.0.0.1:{port}/readyz"
    if mode == "worker":
        return f"http://127.0.0.1:{worker_probe_port(env)}/readyz"
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return ""


def _alive(pid_text: str) -> bool:
    if not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def probe(url: str) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as reply:  # noqa: S310 (local probe)
            return reply.status == 200, f"{url}: {reply.status}"
    except urllib.error.HTTPError as exc:
        return False, f"{url}: {exc.code}"
    except (OSError, ValueError) as exc:
        return False, f"{url}: {exc}"


def main(env: Mapping[str, str] = os.environ) -> int:
    run_dir = env.get("CORRAL_RUN_DIR", "/tmp")
    mode = _read(os.path.join(run_dir, "corral-mode"))
    url = endpoint_for(mode, env)
    if url is not None:
        healthy, line = probe(url)
    else:
        healthy = _alive(_read(os.path.join(run_dir, "corral.pid")))
        line = f"mode {mode or 'unknown'}: process {'alive' if healthy else 'not running'}"
    print(("healthy " if healthy else "unhealthy ") + line)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
