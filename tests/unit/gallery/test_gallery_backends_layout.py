"""corral's Python gallery backends share `backends/common/` (corral_backend.py and the gRPC stubs, which the
backends' venvs cannot generate: no protoc there): the stubs must be exactly what `make proto` generates from
corral's backend.proto, and every backend must have the reference layout and name common/ in its entry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import corral
from corral.gallery.index import DEFAULT_INDEX, parse_index

SRC = Path(corral.__file__).resolve().parent
BACKENDS = SRC / "gallery" / "backends"
COMMON = BACKENDS / "common"
STUBS = ("backend_pb2.py", "backend_pb2_grpc.py")
PYTHON_BACKENDS = sorted(p.name for p in BACKENDS.iterdir() if (p / "backend.py").is_file())


def test_shipped_stubs_are_generated_from_backend_proto(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{SRC / 'proto'}",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            "backend.proto",
        ],
        check=True,
        timeout=60,
    )
    for name in STUBS:
        assert (COMMON / name).read_text() == (tmp_path / name).read_text(), f"{name}: run `make proto`"
    assert not [p for p in BACKENDS.glob("*/backend_pb2*.py") if p.parent != COMMON], "one copy, in common/"


@pytest.mark.parametrize("name", PYTHON_BACKENDS)
def test_each_python_backend_has_the_reference_layout_and_gets_common(name: str) -> None:
    directory = BACKENDS / name
    run_sh = directory / "run.sh"
    assert run_sh.stat().st_mode & 0o111, "run.sh must be executable (the worker execs it)"
    text = run_sh.read_text()
    assert 'venv/bin/python" "$dir/backend.py" "$@"' in text and text.startswith("#!/bin/sh")
    assert "$dir/common" in text and 'PYTHONPATH="$common' in text
    assert (directory / "requirements.txt").is_file() and (directory / "README.md").is_file()
    entries = {entry.name: entry for entry in parse_index(DEFAULT_INDEX.read_bytes(), str(DEFAULT_INDEX))}
    section = entries[name].python
    assert section is not None and section.common == "backends/common"


def test_sentencetransformers_pins_the_cpu_torch() -> None:
    requirements = (BACKENDS / "sentencetransformers" / "requirements.txt").read_text().split()
    assert "torch==2.13.0" in requirements  # the CPU wheel on disk; unpinned torch pulls a CUDA build
    assert any(line.startswith("sentence-transformers==") for line in requirements)
