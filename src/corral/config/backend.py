"""Settings of `corral backend NAME --addr HOST:PORT` (one gRPC backend process, spawned by workers)."""

from __future__ import annotations

from corral.config.settings import Setting

BACKEND_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "name", "NAME", (), None, help="backend to run (llama-cpp, simulator)", required=True, positional=True
    ),
    Setting("addr", "--addr", (), None, help="HOST:PORT to listen on, e.g. 127.0.0.1:50051", required=True),
    Setting("log_level", "--log-level", (), "INFO", help="DEBUG, INFO, WARNING or ERROR"),
)
