"""How the supervisor spawns a backend: with setpriv on the machine, no preexec_fn (so Python vforks and no
library's fork handler runs in a child of the threaded worker), the parent-death signal set by setpriv."""

from __future__ import annotations

import shutil

import pytest

from corral.worker import supervisor


def test_with_setpriv_the_spawn_needs_no_preexec_fn_and_keeps_the_parent_death_signal() -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed here")
    argv, preexec = supervisor._spawn_argv(["/backends/simulator/run.sh", "--addr", "127.0.0.1:5000"])
    assert preexec is None
    assert argv[1:] == ["--pdeathsig", "KILL", "--", "/backends/simulator/run.sh", "--addr", "127.0.0.1:5000"]


def test_without_setpriv_the_preexec_fn_sets_the_parent_death_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "_SETPRIV", None)
    argv, preexec = supervisor._spawn_argv(["run.sh"])
    assert argv == ["run.sh"] and preexec is supervisor._set_pdeathsig
