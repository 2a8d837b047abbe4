"""The simulator's fault injection (CORRAL_SIMULATOR_FAULT_DIR): a file named after the process's pid makes its calls fail."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from corral.backends.simulator import FAULT_DIR_ENV, SimulatedFault, SimulatorEngine
from corral.proto import backend_pb2 as pb


def _engine(fault_dir: Path) -> SimulatorEngine:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(FAULT_DIR_ENV, str(fault_dir))
        engine = SimulatorEngine()
    engine.load(pb.ModelOptions(Model="sim"))
    return engine


def test_calls_fail_with_the_named_status_while_the_fault_file_exists(tmp_path: Path) -> None:
    engine, request = _engine(tmp_path), pb.PredictOptions(Prompt="hi", Tokens=2)
    assert engine.predict(request).tokens == 2
    fault = tmp_path / str(os.getpid())
    fault.write_text("INTERNAL\n")
    with pytest.raises(SimulatedFault) as caught:
        engine.predict_stream(request)
    assert caught.value.status == grpc.StatusCode.INTERNAL and str(fault) in str(caught.value)
    fault.write_text("")
    with pytest.raises(SimulatedFault) as caught:
        engine.embed(pb.PredictOptions(Embeddings="hi"))
    assert caught.value.status == grpc.StatusCode.UNAVAILABLE  # empty: UNAVAILABLE
    fault.unlink()
    assert engine.predict(request).tokens == 2


def test_another_process_fault_file_leaves_this_one_healthy(tmp_path: Path) -> None:
    (tmp_path / str(os.getpid() + 1)).write_text("INTERNAL")
    assert _engine(tmp_path).predict(pb.PredictOptions(Prompt="hi", Tokens=1)).tokens == 1
