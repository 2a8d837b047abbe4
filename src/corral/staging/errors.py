"""Errors raised while staging model files from a frontend to a worker's file server."""

from __future__ import annotations

from pathlib import Path


class StagingError(Exception):
    """Base class for every file-staging failure; catch this to handle them all."""


class KeyEscapesDirectory(StagingError):
    """A storage key is malformed or would resolve outside the worker's models/data/staging directory.

    Keys are relative, '/'-separated paths such as ``models/<trackingKey>/model.gguf``: no leading '/',
    no empty, '.' or '..' segments, no NUL or backslash, and no symlink that points outside the base
    directory. Fix the key (build it with ``corral.staging.keys.storage_key``) or remove the symlink.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"invalid storage key {key!r}: {reason}")


class ReservedKey(KeyEscapesDirectory):
    """A storage key names the worker's own metadata: a hash sidecar (``*.sha256``,
    ``*.sha256.target``) or an upload in progress (``.<name>.*.upload``, ``.<name>.*.tmp``).

    Hashes on a worker come only from bytes it received or read itself, so clients can neither write
    nor read these names. Rename the file if a model really ships one (the file server answers 403).
    """


class StagingFailed(StagingError):
    """Uploading a local file to a worker's file server failed and retrying did not help.

    The message names the local file, the storage key, the worker URL, the HTTP status (``None`` when
    the worker was unreachable) and the worker's own explanation. Typical fixes: a 401 means the
    frontend and worker disagree on the registration token (LOCALAI_REGISTRATION_TOKEN); a 413 means
    the file exceeds the worker's upload limit; connection errors mean the worker's file server
    (gRPC base port - 1) is down or unreachable from this frontend.
    """

    def __init__(
        self,
        *,
        local_path: Path,
        key: str,
        worker_url: str,
        status: int | None,
        message: str,
    ) -> None:
        self.local_path = local_path
        self.key = key
        self.worker_url = worker_url
        self.status = status
        self.message = message
        status_text = f"HTTP {status}" if status is not None else "no HTTP response"
        super().__init__(
            f"staging {str(local_path)!r} as key {key!r} to worker {worker_url} failed "
            f"({status_text}): {message}"
        )


class HubDownloadFailed(StagingError):
    """The frontend could not resolve or download a managed Hugging Face artifact.

    The message names the repo, the HTTP status (``None`` when the hub was unreachable) and the fix:
    a 401/403 means the repo is gated or private and the frontend needs HF_TOKEN; a 404 means the repo
    or revision does not exist; an unreachable hub means HF_ENDPOINT or the frontend's network is wrong.
    """

    def __init__(self, repo: str, status: int | None, message: str) -> None:
        self.repo = repo
        self.status = status
        self.message = message
        super().__init__(f"Hugging Face repo {repo!r}: {message}")


class ObjectStoreFailed(StagingError):
    """S3 staging failed: the bucket refused or was unreachable, or a worker could not fetch a key.

    The message names the key, the bucket or node, and the cause. Check LOCALAI_STORAGE_URL,
    LOCALAI_STORAGE_BUCKET and the access/secret keys on the frontend *and* the workers, and that
    the workers reach the endpoint.
    """


class InputStorageFull(StagingError):
    """A worker refused a request's input file (an image, an audio clip) before any byte was written:
    accepting it would pass LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT or leave less free space than
    LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES on the worker's staging filesystem.

    It is transient: other requests release their inputs when their inference ends. The frontend answers
    the client ``503`` with ``Retry-After`` (:attr:`client_status`, :attr:`retry_after_s`) and the worker's
    message, which names the setting and the numbers (:attr:`setting`; empty when the worker's general disk
    admission, CORRAL_STAGING_MIN_FREE_BYTES, refused it). Raise the setting, free space on the worker, or add
    workers if it persists.
    """

    client_status = 503
    retry_after_s = 5

    def __init__(self, message: str, *, setting: str, key: str) -> None:
        self.message = message
        self.setting = setting
        self.key = key
        super().__init__(message)


class RequestInputFailed(StagingError):
    """Staging or releasing a request's input file on a worker failed for a reason other than capacity.

    The message names the key, the worker's file server, the HTTP status (``None`` when the worker was
    unreachable) and the worker's explanation. A 401 means frontend and worker disagree on
    LOCALAI_REGISTRATION_TOKEN; no HTTP status means the worker's file server (base port - 1) is down or
    unreachable from this frontend.
    """

    def __init__(self, *, key: str, worker_url: str, status: int | None, message: str) -> None:
        self.key, self.worker_url, self.status, self.message = key, worker_url, status, message
        status_text = f"HTTP {status}" if status is not None else "no HTTP response"
        super().__init__(f"request input {key!r} on worker {worker_url} ({status_text}): {message}")
