"""The worker's own node credential, kept in its state directory (mode 0600).

The frontend returns it once, at the node's first registration; the worker sends it as
`X-Node-Token` on every later call (re-registration, heartbeats, `/api/node/<id>/*`), so a
restarted worker registers as the same node and nobody else can take over its name.
The state directory defaults to `.corral-worker` next to the models directory — never inside
it, since the file server serves that one.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def default_state_dir(models_dir: Path) -> Path:
    return models_dir.resolve().parent / ".corral-worker"


@dataclass
class NodeCredentialFile:
    """`node-credential-<name>.json` in the state directory: {"name", "node_id", "node_token"}."""

    state_dir: Path
    name: str

    @property
    def path(self) -> Path:
        return self.state_dir / f"node-credential-{_UNSAFE.sub('_', self.name)}.json"

    def load(self) -> str:
        """The stored credential for this node name, or "" when none was kept (first start)."""
        try:
            body = json.loads(self.path.read_text())
        except FileNotFoundError:
            return ""
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable node credential %s: %s", self.path, exc)
            return ""
        if not isinstance(body, dict) or body.get("name") != self.name:
            return ""
        return str(body.get("node_token") or "")

    def save(self, node_id: str, token: str) -> None:
        """Write atomically with mode 0600 (a crash leaves the old file or the new one, never half of one)."""
        self.state_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "w") as handle:
            json.dump({"name": self.name, "node_id": node_id, "node_token": token}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(FILE_MODE)
        os.replace(tmp, self.path)
