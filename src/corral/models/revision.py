"""The config revision of a model: a hash of its persisted semantic configuration.

Computed from the parsed YAML mapping as canonical JSON (sorted keys, no whitespace): formatting,
comments and map order never change it; per-request parameters are not part of a config at all.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def config_revision(data: dict[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
