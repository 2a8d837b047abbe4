"""The package: a wheel from the standard build front end that works outside the checkout."""

from __future__ import annotations

import re
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

import corral
from corral.cli.main import main
from support.deploy_files import REPO, build_wheel, clean_env, fresh_venv

SRC = REPO / "src" / "corral"
PACKAGE_DATA = ("*.sql", "*.proto", "*.js", "*.css", "*.html", "*.svg")  # the last four: the web UI


def test_version_flag_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"corral {corral.__version__}\n"


def test_no_module_finds_files_through_its_source_path() -> None:
    """Package data is read through importlib.resources, so an installed wheel finds it (no `__file__` paths)."""
    offenders = [
        str(path.relative_to(REPO))
        for path in SRC.rglob("*.py")
        if "__file__" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def _source_package_data() -> set[str]:
    return {str(path.relative_to(SRC.parent)) for pattern in PACKAGE_DATA for path in SRC.rglob(pattern)}


def _run(venv: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(),
        timeout=120,
    )


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    started_s = time.perf_counter()
    wheel = build_wheel(tmp_path)
    assert wheel.name == f"corral-{corral.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"corral-{corral.__version__}.dist-info/entry_points.txt").decode()
        metadata = archive.read(f"corral-{corral.__version__}.dist-info/METADATA").decode()
    missing = sorted(_source_package_data() - names)
    assert missing == [], "package data left out of the wheel"
    assert "corral = corral.cli.main:main" in entry_points
    assert {"Provides-Extra: llama", "Provides-Extra: models"} <= set(metadata.splitlines())
    built_s = time.perf_counter() - started_s

    venv = fresh_venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    located = _run(
        venv,
        "python",
        "-c",
        "import corral; from importlib import resources; "
        "print(corral.__file__); "
        "print(len(list(resources.files('corral.store').joinpath('migrations').glob('*.sql'))))",
        cwd=elsewhere,
    )
    assert located.returncode == 0, located.stderr
    installed_file, migration_count = located.stdout.split()
    assert Path(installed_file).is_relative_to(venv)
    assert int(migration_count) == len(list((SRC / "store" / "migrations").glob("*.sql")))

    version = _run(venv, "corral", "--version", cwd=elsewhere)
    assert (version.returncode, version.stdout) == (0, f"corral {corral.__version__}\n")
    usage = _run(venv, "corral", "--help", cwd=elsewhere)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: corral <command> [options]")
    up_help = _run(venv, "corral", "up", "--help", cwd=elsewhere)
    assert up_help.returncode == 0, up_help.stderr
    assert re.search(r"--workers", up_help.stdout) and "--no-default-models" in up_help.stdout
    print(
        f"\nwheel built in {built_s:.1f} s; build + fresh venv + 4 commands: "
        f"{time.perf_counter() - started_s:.1f} s"
    )
