"""Load errors: each carries the real cause (worker, staging or backend message)."""


class LoadError(Exception):
    """Loading a model failed; the message carries the real cause from the worker or backend."""


class InstallFailed(LoadError):
    """The worker could not start a backend process (see its stderr tail in the message)."""


class LoadModelFailed(LoadError):
    """The backend's LoadModel answered success=false; its message is the cause."""


class LoadDeadlineExceeded(LoadError):
    """The backend did not finish LoadModel within its budget; raise LOCALAI_NATS_MODEL_LOAD_TIMEOUT."""
