"""`corral worker ds4-distributed -- <args>`: exec the installed ds4 backend's `ds4-worker` binary.

A ds4 layer-split worker loads its slice of the layers and dials the coordinator (a normal ds4 model);
corral only finds the binary and replaces itself with it, passing everything after `--` through. The
backend bundles its own dynamic loader (`lib/ld.so`) for glibc compatibility: use it when present.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from corral.config.errors import ConfigError
from corral.config.launchers import Ds4Settings
from corral.launchers.installed import EngineMissing, installed_backend_dir

DS4_BACKEND = "ds4"
WORKER_BINARY = "ds4-worker"
USAGE = (
    "usage: corral worker ds4-distributed -- --role worker --model <gguf> "
    "--layers <START:END|START:output> --coordinator <host> <port>"
)


def worker_binary(s: Ds4Settings) -> Path:
    backend = installed_backend_dir(DS4_BACKEND, s.backends_path, s.backends_system_path)
    binary = backend / WORKER_BINARY if backend is not None else None
    if binary is None or not os.access(binary, os.X_OK):
        where = (
            f"{backend} has no executable {WORKER_BINARY}"
            if backend
            else f"not installed in {s.backends_path} or {s.backends_system_path}"
        )
        raise EngineMissing(
            f"the ds4 backend is needed for a layer-split worker but is {where}: install the "
            f"ds4 backend (with its {WORKER_BINARY}) into --backends-path / LOCALAI_BACKENDS_PATH"
        )
    return binary


def exec_argv(
    binary: Path, passthrough: Sequence[str], s: Ds4Settings
) -> tuple[str, list[str], dict[str, str]]:
    """(program, argv, env) to exec: via the bundled loader when the backend ships one."""
    args = list(passthrough) or shlex.split(s.ds4_args)
    if not args:
        raise ConfigError(USAGE)
    env = dict(os.environ)
    loader = binary.parent / "lib" / "ld.so"
    if loader.is_file():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(binary.parent / "lib"), env.get("LD_LIBRARY_PATH")) if p
        )
        return str(loader), [str(loader), str(binary), *args], env
    return str(binary), [str(binary), *args], env


def run(passthrough: Sequence[str], s: Ds4Settings) -> int:
    program, argv, env = exec_argv(worker_binary(s), passthrough, s)
    os.execve(program, argv, env)  # replaces this process: ds4-worker's exit code is the command's
    return 0  # not reached
