"""Typed NATS payloads with the reference's JSON field names (reference §3.2).

Fields that the reference marks `omitempty` are Optional and dropped from the JSON when None.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

INT32_MAX = (1 << 31) - 1  # a ModelOptions integer field


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def to_json(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        if not data or data.strip() == b"null":
            return cls.model_validate({})
        return cls.model_validate_json(data)


class BackendInstallRequest(Message):
    backend: str = ""
    model_id: str | None = None
    backend_galleries: str | None = None
    uri: str | None = None
    name: str | None = None
    alias: str | None = None
    replica_index: int | None = None
    force: bool | None = None
    op_id: str | None = None


class LoadDefaults(Message):
    """corral: the LoadModel defaults of the worker that runs a backend (`--threads`, `--context-size`); a
    field the model's config leaves at 0 takes them (loading/attempt_options.py). 0: none."""

    threads: int = Field(default=0, ge=0, le=INT32_MAX)
    context_size: int = Field(default=0, ge=0, le=INT32_MAX)


class BackendInstallReply(Message):
    success: bool = False
    address: str | None = None
    error: str | None = None
    load_defaults: LoadDefaults | None = None  # corral: what the process's LoadModel takes from this node


class BackendInstallProgressEvent(Message):
    op_id: str = ""
    node_id: str = ""
    backend: str = ""
    file_name: str | None = None
    current: str | None = None
    total: str | None = None
    percentage: float = 0.0
    phase: str | None = None  # resolving, downloading, extracting, starting


class BackendUpgradeRequest(Message):
    backend: str = ""
    backend_galleries: str | None = None
    uri: str | None = None
    name: str | None = None
    alias: str | None = None
    replica_index: int | None = None
    op_id: str | None = None


class BackendUpgradeReply(Message):
    success: bool = False
    error: str | None = None
    stopped_process_keys: list[str] | None = None
    reports_stopped_processes: bool | None = None


class BackendDeleteRequest(Message):
    backend: str = ""


class BackendDeleteReply(Message):
    success: bool = False
    error: str | None = None
    stopped_process_keys: list[str] | None = None
    reports_stopped_processes: bool | None = None


class NodeBackendInfo(Message):
    name: str
    is_system: bool = False
    is_meta: bool = False
    installed_at: str | None = None
    gallery_url: str | None = None
    version: str | None = None
    uri: str | None = None
    digest: str | None = None


class BackendListReply(Message):
    backends: list[NodeBackendInfo] = []
    error: str | None = None


class BackendStopRequest(Message):
    backend: str = ""
    force: bool | None = None


class ModelStopRequest(Message):
    model_name: str = ""
    process_key: str = ""
    expected_address: str = ""
    force: bool | None = None
    config_revision: str | None = None


class ModelStopReply(Message):
    matched: bool = False
    freed: bool = False
    terminated: bool = False
    process_key: str = ""
    address: str | None = None
    error: str | None = None


class RunningModel(Message):
    model_id: str
    replica_index: int
    address: str | None = None


class ModelsRunningReply(Message):
    models: list[RunningModel] = []
    error: str | None = None


class ModelUnloadRequest(Message):
    model_name: str = ""
    address: str | None = None


class ModelDeleteRequest(Message):
    model_name: str = ""


class ModelOpReply(Message):
    """Reply of `model.unload` and `model.delete`; `stopped_process_keys` is corral's addition."""

    success: bool = False
    error: str | None = None
    stopped_process_keys: list[str] | None = None


class BackendLogsRequest(Message):
    """`model_id` empty: the list of models with logs; else that model's last `limit` lines."""

    model_id: str = ""
    limit: int = 500


class BackendLogsReply(Message):
    models: list[dict[str, Any]] | None = None
    lines: list[dict[str, Any]] | None = None
    error: str | None = None


__all__ = [
    "BackendDeleteReply",
    "BackendDeleteRequest",
    "BackendInstallProgressEvent",
    "BackendInstallReply",
    "BackendInstallRequest",
    "BackendListReply",
    "BackendLogsReply",
    "BackendLogsRequest",
    "BackendStopRequest",
    "BackendUpgradeReply",
    "BackendUpgradeRequest",
    "Message",
    "ModelDeleteRequest",
    "ModelOpReply",
    "ModelStopReply",
    "ModelStopRequest",
    "ModelUnloadRequest",
    "ModelsRunningReply",
    "NodeBackendInfo",
    "RunningModel",
    "ValidationError",
]
