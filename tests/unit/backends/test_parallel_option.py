"""The reference's `parallel` option (also `n_parallel`): how many requests one replica serves at once."""

from __future__ import annotations

import pytest

from corral.backends.options import OptionError
from corral.backends.simulator import SimulatorEngine, SimulatorSettings
from corral.proto import backend_pb2 as pb


def test_the_simulator_reads_parallel_or_n_parallel_and_defaults_to_one() -> None:
    assert SimulatorSettings.from_options([]).parallel == 1
    assert SimulatorSettings.from_options(["parallel:4"]).parallel == 4
    assert SimulatorSettings.from_options(["n_parallel:3"]).parallel == 3
    with pytest.raises(OptionError, match="option parallel must be >= 1"):
        SimulatorSettings.from_options(["parallel:0"])


def test_a_simulator_serves_parallel_requests_only_while_loaded() -> None:
    engine = SimulatorEngine()
    engine.load(pb.ModelOptions(Model="m", Options=["parallel:6"]))
    assert engine.parallel == 6
    engine.free()
    assert engine.parallel == 1


def test_llama_parallel_comes_from_the_options_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp")
    from corral.backends.llama_cpp import PARALLEL_ENV, requested_parallel

    monkeypatch.delenv(PARALLEL_ENV, raising=False)
    assert requested_parallel({}) == 1
    assert requested_parallel({"n_parallel": "2"}) == 2
    monkeypatch.setenv(PARALLEL_ENV, "3")
    assert requested_parallel({}) == 3
    assert requested_parallel({"parallel": "5"}) == 5
    with pytest.raises(OptionError, match="llama.cpp's limit"):
        requested_parallel({"parallel": "100000"})
    monkeypatch.setenv(PARALLEL_ENV, "many")
    with pytest.raises(OptionError, match=PARALLEL_ENV):
        requested_parallel({})
    assert requested_parallel({"parallel": "2"}) == 2  # the model's own option wins
