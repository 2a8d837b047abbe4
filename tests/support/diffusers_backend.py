"""The `diffusers` gallery backend installed for tests, once per session (support/gallery_installs.py): its
virtual environment is torch CPU + diffusers, ~1 GB; about 40 s when pip has the wheels cached, minutes when it
fetches diffusers and transformers. And the check of a generated pipeline's architecture, run in that venv.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from support import gallery_installs

NAME = "diffusers"
ARCHITECTURE_CHECK = Path(__file__).resolve().parent / "diffusers_architecture_check.py"


def backends_path(session_root: Path) -> tuple[Path, float | None]:
    """A backends directory holding the installed backend; the install's seconds (None: already there)."""
    root, seconds = gallery_installs.backends_path(session_root, (NAME,))
    return root, seconds.get(NAME)


def check_architecture(backend_dir: Path, pipeline_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run the architecture check with the backend venv's python (it has torch and diffusers; corral has not)."""
    return subprocess.run(
        [str(backend_dir / "venv" / "bin" / "python"), str(ARCHITECTURE_CHECK), str(pipeline_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
