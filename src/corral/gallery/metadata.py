"""`metadata.json` of an installed backend: written last by the installer, so its presence means complete.

Fields follow the reference's `NodeBackendInfo` (§3.2) so `backend.list` reports them as stored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

METADATA_FILE = "metadata.json"
RUN_FILE = "run.sh"
METADATA_MAX_BYTES = 1 << 20


class BackendMetadata(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    alias: str | None = None
    description: str | None = None
    installed_at: str | None = None
    gallery_url: str | None = None
    version: str | None = None
    uri: str | None = None
    digest: str | None = None
    is_meta: bool = False


def read_metadata(backend_dir: Path) -> BackendMetadata | None:
    """The metadata of `backend_dir`, or None when it is missing, too large or unreadable."""
    path = backend_dir / METADATA_FILE
    try:
        if path.stat().st_size > METADATA_MAX_BYTES:
            return None
        return BackendMetadata.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


def write_metadata(backend_dir: Path, meta: BackendMetadata) -> None:
    """Write and fsync metadata.json: the last file of an install (its presence marks completeness)."""
    path = backend_dir / METADATA_FILE
    data = json.dumps(meta.model_dump(exclude_none=True), indent=2).encode()
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
