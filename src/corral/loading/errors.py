"""Load errors: each carries the real cause (worker, staging or backend message)."""


class LoadError(Exception):
    """Loading a model failed; the message carries the real cause from the worker or backend."""


class InstallFailed(LoadError):
    """The worker could not start a backend process (see its stderr tail in the message)."""


class LoadModelFailed(LoadError):
    """The backend's LoadModel answered success=false; its message is the cause."""


class LoadDeadlineExceeded(LoadError):
    """The backend did not finish LoadModel within its budget; raise LOCALAI_NATS_MODEL_LOAD_TIMEOUT."""


class LoadHoldExpired(LoadError):
    """The cold load made no progress within its hold (stall window or budget); the message names which."""


class ModelStillLoading(Exception):
    """The request's wait budget ran out while the load goes on; answered 503 with progress."""

    def __init__(self, message: str, loading: dict[str, object], retry_after_s: int) -> None:
        super().__init__(message)
        self.loading = loading
        self.retry_after_s = retry_after_s


class NodeLost(LoadError):
    """The chosen node stopped answering during the load (bus, file server or backend); the load moves on.

    `why` names what did not answer; the error after every node was tried lists each node and why.
    """

    def __init__(self, node_name: str, why: str, node_id: str = "") -> None:
        super().__init__(f"node {node_name}: {why}")
        self.node_name, self.why, self.node_id = node_name, why, node_id


class StaleRevision(LoadError):
    """The model's configuration changed during the load; the load is redone under the current revision."""

    def __init__(self, message: str, current_revision: str, current_yaml: str) -> None:
        super().__init__(message)
        self.current_revision, self.current_yaml = current_revision, current_yaml
