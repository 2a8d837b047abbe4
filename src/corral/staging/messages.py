"""NATS payloads of S3-mode file staging, ``nodes.<id>.files.*`` (reference §3.2; JSON names exact).

``sha256`` and ``progress_subject`` in :class:`FileEnsureRequest` are corral additions: a reference
worker ignores them; ours verifies the fetched object against ``sha256`` and publishes
:class:`FileProgress` on ``progress_subject`` while it downloads, which feeds the load job's progress.
"""

from __future__ import annotations

from corral.bus.messages import Message

FILES_ENSURE = "files.ensure"
FILES_STAGE = "files.stage"
FILES_TEMP = "files.temp"
FILES_LISTDIR = "files.listdir"


class FileEnsureRequest(Message):
    key: str = ""
    sha256: str | None = None
    progress_subject: str | None = None


class FileEnsureReply(Message):
    local_path: str = ""
    error: str | None = None
    fetched_bytes: int | None = None  # corral addition: 0 when the worker's cache already held the file


class FileStageRequest(Message):
    local_path: str = ""
    key: str = ""


class FileStageReply(Message):
    key: str = ""
    error: str | None = None


class FileTempReply(Message):
    local_path: str = ""
    error: str | None = None


class FileListRequest(Message):
    key_prefix: str = ""


class FileListReply(Message):
    files: list[str] | None = None
    error: str | None = None


class FileProgress(Message):
    key: str = ""
    bytes_done: int = 0
    total_bytes: int = 0
