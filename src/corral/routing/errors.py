"""Errors of a backend call made through the router; `frontend` maps them to HTTP."""

from __future__ import annotations

CLIENT_CODES = frozenset({"INVALID_ARGUMENT", "OUT_OF_RANGE"})  # gRPC statuses that blame the request


class BackendCallError(Exception):
    """A call to a model replica's backend process did not produce an answer."""

    def __init__(self, message: str, *, model: str, node_name: str) -> None:
        super().__init__(message)
        self.model, self.node_name = model, node_name


class BackendRefused(BackendCallError):
    """The backend answered with an error status (the message quotes it); fix the request or the model."""

    def __init__(self, message: str, *, model: str, node_name: str, code: str, details: str) -> None:
        super().__init__(message, model=model, node_name=node_name)
        self.code, self.details = code, details

    @property
    def invalid_request(self) -> bool:
        """The request itself is wrong (INVALID_ARGUMENT; OUT_OF_RANGE: too long for the context)."""
        return self.code in CLIENT_CODES

    @property
    def not_capable(self) -> bool:
        """The model, as loaded, cannot serve this kind of request (backends.engine.NotSupportedError)."""
        return self.code == "FAILED_PRECONDITION"

    @property
    def context_length_exceeded(self) -> bool:
        """The prompt does not fit the model's context window (backends.engine.ContextLengthError)."""
        return self.code == "OUT_OF_RANGE"


class BackendTimeout(BackendCallError):
    """The backend sent nothing within a budget; the message names the knob that raises it.

    The replica was health-probed: `dropped` says whether it failed the probe and was forgotten.
    """

    def __init__(
        self, message: str, *, model: str, node_name: str, budget_s: float, knob: str, dropped: bool
    ) -> None:
        super().__init__(message, model=model, node_name=node_name)
        self.budget_s, self.knob, self.dropped = budget_s, knob, dropped


class ReplicasUnavailable(BackendCallError):
    """Every replica of the model is out of picking on this frontend: their circuit breakers opened after calls
    failed in a row, and none answered a health probe. Retry after `retry_after_s`; CORRAL_BREAKER_COOLDOWN sets
    how long a breaker stays open (CORRAL_BREAKER_FAILURES how many failures open it)."""

    def __init__(self, message: str, *, model: str, retry_after_s: int) -> None:
        super().__init__(message, model=model, node_name="")
        self.retry_after_s = retry_after_s
