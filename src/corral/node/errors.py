"""Worker errors."""


class WorkerError(Exception):
    """Base class of worker failures."""


class RegistrationRefused(WorkerError):
    """The frontend refused this worker (wrong or missing registration token, bad request); fix and restart."""


class FrontendUnreachable(WorkerError):
    """The frontend did not answer registration; check --register-to and that the frontend is up."""


class CredentialsUnavailable(WorkerError):
    """The worker has no usable NATS credentials (not approved, none minted, or refresh failed); it exits."""
