"""The sentencetransformers backend ships gRPC stubs (its venv has no protoc): they must be exactly what
`make proto` generates from corral's backend.proto, so the backend and corral speak the same contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import corral

SRC = Path(corral.__file__).resolve().parent
BACKEND_DIR = SRC / "gallery" / "backends" / "sentencetransformers"
STUBS = ("backend_pb2.py", "backend_pb2_grpc.py")


def test_shipped_stubs_are_generated_from_backend_proto(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{SRC / 'proto'}", f"--python_out={tmp_path}",
                    f"--grpc_python_out={tmp_path}", "backend.proto"], check=True, timeout=60)
    for name in STUBS:
        assert (BACKEND_DIR / name).read_text() == (tmp_path / name).read_text(), f"{name}: run `make proto`"


def test_the_backend_directory_has_the_reference_layout() -> None:
    run_sh = BACKEND_DIR / "run.sh"
    assert run_sh.stat().st_mode & 0o111, "run.sh must be executable (the worker execs it)"
    text = run_sh.read_text()
    assert 'venv/bin/python" "$dir/backend.py" "$@"' in text and text.startswith("#!/bin/sh")
    requirements = (BACKEND_DIR / "requirements.txt").read_text().split()
    assert "torch==2.13.0" in requirements  # the CPU wheel on disk; unpinned torch pulls a CUDA build
    assert any(line.startswith("sentence-transformers==") for line in requirements)
