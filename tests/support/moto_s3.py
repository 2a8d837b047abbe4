"""A real S3-compatible server on loopback for tests: moto's standalone server in a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from corral.runtime.processes import stop_process
from support.cluster import free_port

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key"


@contextlib.contextmanager
def moto_server(log_dir: Path) -> Iterator[str]:
    """Yields the endpoint URL (``http://127.0.0.1:<port>``) of a fresh moto S3 server."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    with open(log_dir / f"moto-{port}.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode}")
            try:
                httpx.get(f"{url}/moto-api/", timeout=1.0)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start in 30s") from None
                time.sleep(0.1)
        yield url
    finally:
        stop_process(proc)
