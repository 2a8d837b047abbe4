"""LoadModel opens files only under the worker's models directory (issue 10, staged-file integrity).

A real supervisor (the worker's) starts a real backend process, passing it the models root; the
LoadModel calls go over gRPC like the frontend's.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from corral.worker.ports import PortAllocator
from corral.worker.supervisor import Supervisor

TOKEN = "t0k"


def _free_base() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[tuple[backend_pb2_grpc.BackendStub, Path]]:
    models = tmp_path / "worker" / "models"
    (models / "m").mkdir(parents=True)
    base = _free_base()
    supervisor = Supervisor(
        PortAllocator(base, base + 20),
        bind_host="127.0.0.1",
        token=TOKEN,
        start_timeout_s=30,
        models_root=models,
    )
    proc = await supervisor.ensure("m#0", "simulator")
    try:
        async with grpc.aio.insecure_channel(proc.local_address) as channel:
            yield backend_pb2_grpc.BackendStub(channel), models
    finally:
        await supervisor.stop_all(force=True)


async def _load(stub: backend_pb2_grpc.BackendStub, **fields: Any) -> pb.Result:
    result: pb.Result = await stub.LoadModel(
        pb.ModelOptions(Model="m", **fields), timeout=30, metadata=(("authorization", f"Bearer {TOKEN}"),)
    )
    return result


async def _refused(stub: backend_pb2_grpc.BackendStub, **fields: Any) -> str:
    """The details of a LoadModel refused with PERMISSION_DENIED."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _load(stub, **fields)
    assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
    return str(info.value.details())


@pytest.mark.parametrize(
    "field, value",
    [
        ("ModelFile", "/etc/passwd"),  # absolute, elsewhere
        ("ModelFile", "m/../../../../etc/passwd"),  # relative, climbing out of ModelPath
        ("MMProj", "/etc/hostname"),  # a companion file
    ],
)
async def test_load_model_refuses_a_path_outside_the_models_directory(
    backend: tuple[backend_pb2_grpc.BackendStub, Path], field: str, value: str
) -> None:
    stub, models = backend
    details = await _refused(stub, ModelPath=str(models), **{field: value})
    assert details == (
        f"LoadModel {field} {value!r} resolves to {str(Path(models / value).resolve())!r}, outside this worker's "
        f"models directory {str(models.resolve())!r} (CORRAL_BACKEND_MODELS_ROOT); backends only open files under it"
    )


@pytest.mark.parametrize(
    "fields, shown",
    [
        ({"ModelFile": "{models}/m/link.gguf"}, "ModelFile '{models}/m/link.gguf'"),
        (
            {"ModelPath": "{models}/m", "Options": ["vae:link.gguf"]},
            "Options[0] 'link.gguf'",
        ),  # an option naming it
    ],
)
async def test_load_model_refuses_a_symlink_inside_the_models_directory_that_points_out(
    backend: tuple[backend_pb2_grpc.BackendStub, Path],
    tmp_path: Path,
    fields: dict[str, str] | dict[str, str | list[str]],
    shown: str,
) -> None:
    stub, models = backend
    outside = tmp_path / "secret.gguf"
    outside.write_bytes(b"GGUF")
    (models / "m" / "link.gguf").symlink_to(outside)
    fields = {
        key: [v.format(models=models) for v in value]
        if isinstance(value, list)
        else value.format(models=models)
        for key, value in fields.items()
    }
    details = await _refused(stub, **fields)
    assert (
        f"LoadModel {shown.format(models=models)} resolves to {str(outside)!r}, outside this worker's models "
        "directory" in details
    )


async def test_load_model_accepts_a_file_under_the_models_directory(
    backend: tuple[backend_pb2_grpc.BackendStub, Path],
) -> None:
    stub, models = backend
    model_file = models / "m" / "model.gguf"
    model_file.write_bytes(b"GGUF")
    result = await _load(stub, ModelFile=str(model_file), ModelPath=str(models / "m"))
    assert result.success, result.message


@pytest.mark.parametrize(
    "fields, field, value, resolved",
    [
        # a relative companion read below a ModelPath that is not the worker's
        ({"ModelPath": "/etc", "MMProj": "passwd"}, "MMProj", "passwd", "/etc/passwd"),
        ({"ModelPath": "/etc", "LoraAdapters": ["hostname"]}, "LoraAdapters", "hostname", "/etc/hostname"),
        # an option whose value names a file (gallery engines open such files)
        ({"Options": ["chat_format:gemma", "vae:/etc/passwd"]}, "Options[1]", "/etc/passwd", "/etc/passwd"),
        (
            {"Overrides": ["mmproj:" + "../" * 12 + "etc/passwd"]},
            "Overrides[0]",
            "../" * 12 + "etc/passwd",
            "/etc/passwd",
        ),
    ],
)
async def test_load_model_refuses_companions_and_options_that_name_files_outside(
    backend: tuple[backend_pb2_grpc.BackendStub, Path],
    fields: dict[str, str | list[str]],
    field: str,
    value: str,
    resolved: str,
) -> None:
    stub, models = backend
    details = await _refused(stub, **{"ModelPath": str(models / "m"), **fields})
    assert details == (
        f"LoadModel {field} {value!r} resolves to {resolved!r}, outside this worker's models directory "
        f"{str(models.resolve())!r} (CORRAL_BACKEND_MODELS_ROOT); backends only open files under it"
    )


async def test_load_model_accepts_options_that_name_no_file_or_one_inside(
    backend: tuple[backend_pb2_grpc.BackendStub, Path],
) -> None:
    stub, models = backend
    (models / "m" / "vae.bin").write_bytes(b"x")
    result = await _load(
        stub,
        ModelPath=str(models / "m"),
        MMProj="org/projector",
        Options=["chat_format:gemma", "vae:vae.bin", f"x:{models}/m"],
    )
    assert result.success, result.message
