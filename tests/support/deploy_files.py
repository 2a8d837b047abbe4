"""Helpers for the deployment checks: the repository root, YAML documents, the env vars corral reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from corral.config.frontend import FRONTEND_SETTINGS
from corral.config.worker import WORKER_SETTINGS

REPO = Path(__file__).resolve().parents[2]

# Read by the image's scripts (deploy/docker/*), by libraries or by the NVIDIA runtime, not by a Setting.
IMAGE_ENV = frozenset({
    "CORRAL_PREPARE_DEFAULT_MODELS", "CORRAL_RUN_DIR", "HEALTHCHECK_ENDPOINT",
    "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_VISIBLE_DEVICES",
})
# Kubernetes downward-API helpers the manifests expand into LOCALAI_* values.
POD_ENV = frozenset({"POD_NAME", "POD_NAMESPACE"})


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document in `path`."""
    with path.open(encoding="utf-8") as file:
        return [doc for doc in yaml.safe_load_all(file) if doc]


def setting_env_names() -> frozenset[str]:
    """Every environment variable a `corral run` or `corral worker` Setting reads."""
    return frozenset(env for setting in (*FRONTEND_SETTINGS, *WORKER_SETTINGS) for env in setting.env)
