"""Where the gallery's package data lives on disk (read through importlib.resources, so installs find it).

The built-in backends are executed (`run.sh`) and the shipped gallery's directory entries are
copied, so they need real paths: a zipped install of corral is refused with a clear error.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def gallery_dir() -> Path:
    root = resources.files("corral.gallery")
    if not isinstance(root, Path):
        raise RuntimeError("corral's gallery files are not on the file system (a zipped install?); "
                           "install corral as a regular package")
    return root


def builtin_backends_dir() -> Path:
    """corral's built-in backends (`llama-cpp`, `simulator`): run.sh + metadata.json each."""
    return gallery_dir() / "system"


def default_index() -> Path:
    """corral's own gallery index, the default of LOCALAI_BACKEND_GALLERIES."""
    return gallery_dir() / "index.yaml"
