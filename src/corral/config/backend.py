"""Settings of `corral backend NAME --addr HOST:PORT` (one gRPC backend process, spawned by workers)."""

from __future__ import annotations

from corral.config.settings import setting, settings_class


@settings_class
class BackendSettings:
    """`corral backend`."""

    name: str = setting("NAME", help="backend to run (llama-cpp, simulator)", required=True, positional=True)
    addr: str = setting("--addr", help="HOST:PORT to listen on, e.g. 127.0.0.1:50051", required=True)
    log_level: str = setting("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
