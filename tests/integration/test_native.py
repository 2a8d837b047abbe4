"""The request path's compiled modules (corral/native.py, `make native`): the suite runs them compiled, a build older
than any of their sources is never used, and `CORRAL_NATIVE=0` runs them as Python.

Processes are real interpreters started as the frontend and backends are (`python -c`), reading this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral import native

pytestmark = pytest.mark.skipif(
    native.library() is None, reason="the request path is not compiled here (`make native`)"
)

PROBE = (
    "import importlib, corral; from corral import native\n"
    "for name in native.MODULES: importlib.import_module(name)\n"
    "print(','.join(native.compiled()))\n"
)


def _compiled_in_child(**env: str) -> tuple[list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [name for name in done.stdout.strip().split(",") if name], done.stderr


def test_every_listed_module_runs_compiled_when_built() -> None:
    compiled, stderr = _compiled_in_child()
    assert compiled == list(native.MODULES)
    assert stderr == ""


def test_corral_native_0_runs_every_listed_module_as_python() -> None:
    compiled, _ = _compiled_in_child(CORRAL_NATIVE="0")
    assert compiled == []


def _tree(tmp_path: Path, built_s: float) -> Path:
    """A tree with every listed module's source (written now) and a group library dated `built_s`."""
    for module in native.MODULES:
        source = native.source_of(module, tmp_path)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
    built = tmp_path / f"{native.GROUP}__mypyc.cpython-311-x86_64-linux-gnu.so"
    built.write_bytes(b"")
    os.utime(built, (built_s, built_s))
    return tmp_path


def test_a_source_newer_than_the_build_makes_it_stale(tmp_path: Path) -> None:
    tree = _tree(tmp_path, time.time() + 60)
    assert native.stale(tree) == []
    edited = native.source_of("corral.frontend.hot_path", tree)
    later_s = time.time() + 120
    os.utime(edited, (later_s, later_s))
    assert native.stale(tree) == ["corral.frontend.hot_path"]


def test_nothing_is_stale_when_nothing_is_built(tmp_path: Path) -> None:
    tree = _tree(tmp_path, 0)
    next(tree.glob("*.so")).unlink()
    assert native.library(tree) is None
    assert native.stale(tree) == []
