"""Helpers for the deployment checks: the repository root, YAML documents, the env vars corral reads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import yaml

from corral.config.frontend import FrontendSettings
from corral.config.settings import table
from corral.config.worker import WorkerSettings

REPO = Path(__file__).resolve().parents[2]

# Read by the image's scripts (deploy/docker/*), by libraries or by the NVIDIA runtime, not by a Setting.
IMAGE_ENV = frozenset(
    {
        "CORRAL_PREPARE_DEFAULT_MODELS",
        "CORRAL_RUN_DIR",
        "HEALTHCHECK_ENDPOINT",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
# Kubernetes downward-API helpers the manifests expand into LOCALAI_* values.
POD_ENV = frozenset({"POD_NAME", "POD_NAMESPACE"})


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document in `path`."""
    with path.open(encoding="utf-8") as file:
        return [doc for doc in yaml.safe_load_all(file) if doc]


def setting_env_names() -> frozenset[str]:
    """Every environment variable a `corral run` or `corral worker` Setting reads."""
    return frozenset(
        env for setting in (*table(FrontendSettings), *table(WorkerSettings)) for env in setting.env
    )


def clean_env() -> dict[str, str]:
    """The environment without this checkout on the path: what a user's shell has."""
    return {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        and (key == "CORRAL_TEST_SESSION" or not key.startswith("CORRAL_TEST"))
    }  # the session's leftover marker stays


def build_wheel(tmp: Path) -> Path:
    """`python -m build --wheel` on a copy of the sources (the checkout stays clean); offline: no isolation."""
    tree = tmp / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO / "src", tree / "src", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tree / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(tmp / "dist"),
            str(tree),
        ],
        check=True,
        capture_output=True,
        env=clean_env(),
        timeout=300,
    )
    (wheel,) = (tmp / "dist").glob("corral-*.whl")
    return wheel


def fresh_venv(tmp: Path, wheel: Path) -> Path:
    """A new virtualenv with the wheel installed --no-deps (by this interpreter's pip: the venv has none).

    Its dependencies come from this interpreter's site-packages through a .pth line (a plain path: that
    directory's own .pth files, such as the checkout's editable finder, are not processed), so nothing is
    downloaded and the checkout is not importable."""
    venv = tmp / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        env=clean_env(),
        timeout=120,
    )
    # after the install, so that pip never sees (nor touches) the test environment's own corral
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "deps-from-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv
