"""Run a worker file server (the real threaded server) on a free loopback port inside a test."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.staging.file_server import ThreadedFileServer
from corral.staging.receiver import build_file_server

TOKEN = "s3cret-registration-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class WorkerFiles:
    server: ThreadedFileServer
    models_dir: Path

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def body_bytes(self) -> int:
        return self.server.stats.body_bytes_received

    @property
    def hash_read_bytes(self) -> int:
        return self.server.stats.hash_read_bytes


@contextlib.asynccontextmanager
async def running_file_server(models_dir: Path, **options: Any) -> AsyncIterator[WorkerFiles]:
    models_dir.mkdir(parents=True, exist_ok=True)
    server = build_file_server(models_dir, options.pop("token", TOKEN), readiness=lambda: None, **options)
    await server.start("127.0.0.1", 0)
    try:
        yield WorkerFiles(server, models_dir)
    finally:
        await server.stop()
