"""Run a worker process (`corral worker`): the one place outside `worker/` that starts the worker."""

from __future__ import annotations

import asyncio

from corral.config.worker import WorkerSettings
from corral.runtime.loopwatch import watched


def serve_worker(settings: WorkerSettings) -> int:
    """Run the worker until it stops (a signal, or deregistration); its exit code."""
    import corral.worker.files  # noqa: F401 - the agent imports it in run(), on the loop (file server, S3)
    from corral.worker.main import Worker

    return asyncio.run(watched(Worker(settings).run(), "worker", settings.slow_callback_ms))
