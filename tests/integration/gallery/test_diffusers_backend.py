"""The `diffusers` gallery backend as the worker runs it: `run.sh --addr` from its installed directory (own
venv: torch CPU + diffusers), called over real gRPC with bearer auth on, generating images with the tiny
random-weight Stable Diffusion pipeline corral.models.tiny_diffusion writes (the images are noise; what is
checked is that they are real PNGs of the requested size that follow seed and prompt)."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc
import pytest

from corral.loading.attempt import model_options
from corral.models import tiny_diffusion
from corral.models.config import load_model_configs
from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from corral.runtime.processes import stop_process
from support import diffusers_backend
from support.backend_processes import FAST_RECONNECT, free_port, wait_healthy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the session builds the backend's venv first

TOKEN = "diffusers-test-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
IDENTITY = tiny_diffusion.NAME
PROMPT = "a red fox in the snow"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    stub: backend_pb2_grpc.BackendStub
    channel: grpc.Channel
    stderr: IO[bytes]

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")


@dataclass(frozen=True)
class Node:
    """A worker's layout: models/ (the models root) and staging/ beside it."""

    models: Path
    staging: Path


@pytest.fixture(scope="module")
def node(state_root: Path) -> Node:
    root = state_root / "diffusers-node"
    models, staging = root / "models", root / "staging" / "ephemeral" / "images"
    staging.mkdir(parents=True)
    tiny_diffusion.prepare_tiny_diffusion(models)
    return Node(models, staging)


def _start(directory: Path, models_root: Path) -> Running:
    port = free_port()
    stderr = tempfile.TemporaryFile()
    env = {
        **os.environ,
        "LOCALAI_GRPC_AUTH_TOKEN": TOKEN,
        "CORRAL_BACKEND_MODELS_ROOT": str(models_root),
        "LOCALAI_BACKEND_PARENT_WATCH_INTERVAL": "200ms",
    }
    process = subprocess.Popen(
        [str(directory / "run.sh"), "--addr", f"127.0.0.1:{port}"],
        cwd=directory,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=FAST_RECONNECT)
    running = Running(process, backend_pb2_grpc.BackendStub(channel), channel, stderr)
    try:
        wait_healthy(running.stub, process, AUTH, stderr)
    except BaseException:
        _stop(running)
        raise
    return running


def _stop(running: Running) -> None:
    running.channel.close()
    stop_process(running.process)
    running.stderr.close()


@pytest.fixture(scope="module")
def backend(diffusers_backends_path: Path, node: Node) -> Iterator[Running]:
    running = _start(diffusers_backends_path / diffusers_backend.NAME, node.models)
    yield running
    _stop(running)


def _load(running: Running, node: Node, model_file: str, **fields: Any) -> pb.Result:
    opts = pb.ModelOptions(
        Model=IDENTITY, ModelFile=model_file, ModelPath=str(node.models), Threads=1, **fields
    )
    result: pb.Result = running.stub.LoadModel(opts, metadata=AUTH, timeout=300)
    return result


@pytest.fixture(scope="module")
def loaded(backend: Running, node: Node) -> Running:
    """The backend loaded with the LoadModel options a frontend builds from the model's YAML."""
    opts = model_options(load_model_configs(node.models)[IDENTITY])
    result = backend.stub.LoadModel(opts, metadata=AUTH, timeout=300)
    assert result.success, f"{result.message}\n{backend.log()}"
    assert (
        result.message
        == "loaded tiny-diffusion (StableDiffusionPipeline, default 64px, 4 steps, cfg_scale 7.0)"
    )
    return backend


def _generate(running: Running, path: Path, **fields: object) -> pb.Result:
    """GenerateImage writing to `path` (64x64, 4 steps, seed 7 unless `fields` say otherwise, `dst` included)."""
    request = pb.GenerateImageRequest(
        positive_prompt=PROMPT, width=64, height=64, step=4, seed=7, dst=str(path), ModelIdentity=IDENTITY
    )
    for name, value in fields.items():
        setattr(request, name, value)
    result: pb.Result = running.stub.GenerateImage(request, metadata=AUTH, timeout=120)
    return result


def _refusal(running: Running, path: Path, **fields: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        _generate(running, path, **fields)
    return caught.value.code(), caught.value.details()


def _png(path: Path) -> tuple[int, int, bytes]:
    """(width, height, decompressed scanlines) of an 8-bit RGB PNG, read without an imaging library."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    position, idat, header = 8, b"", b""
    while position < len(data):
        (length,), kind = (
            struct.unpack(">I", data[position : position + 4]),
            data[position + 4 : position + 8],
        )
        body = data[position + 8 : position + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        position += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert (depth, colour) == (8, 2), "an 8-bit RGB image"
    return width, height, zlib.decompress(idat)


# --- the generated pipeline ------------------------------------------------------------------------------------


def test_generated_pipeline_holds_exactly_the_tensors_diffusers_builds_from_its_configs(
    diffusers_backends_path: Path, node: Node
) -> None:
    check = diffusers_backend.check_architecture(
        diffusers_backends_path / diffusers_backend.NAME, node.models / IDENTITY
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "unet: 208 tensors ok" in check.stdout and "text_encoder: 36 tensors ok" in check.stdout


# --- generation ------------------------------------------------------------------------------------------------


def test_generate_image_writes_a_png_of_the_requested_size(loaded: Running, node: Node) -> None:
    dst = node.staging / "sized.png"
    result = _generate(loaded, dst, width=96, height=48)
    assert result.success and result.message == "96x48 PNG, 4 steps, seed 7"
    width, height, rows = _png(dst)
    assert (width, height) == (96, 48)
    assert len(rows) == height * (1 + 3 * width)
    assert len(set(rows)) > 64, "the pixels vary (a decoded image, not a blank one)"
    assert not list(node.staging.glob(".*partial")), "no partial file is left behind"


def test_a_size_and_steps_of_zero_are_the_models_defaults(loaded: Running, node: Node) -> None:
    dst = node.staging / "default.png"
    assert _generate(loaded, dst, width=0, height=0, step=0).message == "64x64 PNG, 4 steps, seed 7"
    assert _png(dst)[:2] == (64, 64)


def test_the_same_seed_gives_the_same_bytes_and_another_seed_or_prompt_other_bytes(
    loaded: Running, node: Node
) -> None:
    first, again, other_seed, other_prompt = (node.staging / f"{n}.png" for n in ("a", "b", "c", "d"))
    _generate(loaded, first)
    _generate(loaded, again)
    _generate(loaded, other_seed, seed=8)
    _generate(loaded, other_prompt, positive_prompt="a blue boat on a lake")
    assert first.read_bytes() == again.read_bytes()
    assert other_seed.read_bytes() != first.read_bytes()
    assert other_prompt.read_bytes() != first.read_bytes()


def test_a_seed_of_zero_is_random_and_the_reported_seed_reproduces_the_image(
    loaded: Running, node: Node
) -> None:
    random_one, replay = node.staging / "random.png", node.staging / "replay.png"
    message = _generate(loaded, random_one, seed=0).message
    seed = int(re.fullmatch(r"64x64 PNG, 4 steps, seed (\d+)", message).group(1))  # type: ignore[union-attr]
    assert seed > 0
    _generate(loaded, replay, seed=seed)
    assert replay.read_bytes() == random_one.read_bytes()


def test_a_negative_prompt_steers_the_image(loaded: Running, node: Node) -> None:
    plain, steered = node.staging / "plain.png", node.staging / "steered.png"
    _generate(loaded, plain)
    _generate(loaded, steered, negative_prompt="blurry, dark")
    assert plain.read_bytes() != steered.read_bytes()


# --- refusals --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, field, value",
    [
        ({"width": 100}, "width", 100),  # not a multiple of 8
        ({"height": 4096}, "height", 4096),  # above 2048
        ({"width": -8}, "width", -8),
    ],
)
def test_a_bad_size_is_refused_by_name(
    loaded: Running, node: Node, fields: dict[str, int], field: str, value: int
) -> None:
    code, details = _refusal(loaded, node.staging / "bad.png", **fields)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == (
        f"GenerateImageRequest.{field} {value} must be a multiple of 8 from 8 to 2048 "
        "(0: the model's default, 64)"
    )
    assert not (node.staging / "bad.png").exists()


def test_a_destination_outside_the_staging_directory_is_refused(
    loaded: Running, node: Node, tmp_path: Path
) -> None:
    outside = tmp_path / "out.png"
    code, details = _refusal(loaded, outside)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details.startswith(
        f"GenerateImageRequest.dst {str(outside)!r} is outside this worker's staging "
        f"directory {os.path.realpath(node.staging.parent.parent)!r}"
    )
    link = node.staging / "escape"
    link.symlink_to(tmp_path)
    code, _ = _refusal(loaded, link / "out.png")  # a symlink out of staging is resolved, and refused
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"src": "init.png"}, "GenerateImageRequest.src (an init image: image-to-image) is not supported"),
        ({"positive_prompt": "  "}, "GenerateImageRequest.positive_prompt is empty: describe the image"),
        ({"step": 501}, "GenerateImageRequest.step 501 must be 1..500 (0: the model's 4)"),
        ({"dst": ""}, "GenerateImageRequest.dst is empty: name the worker-local file"),
    ],
)
def test_a_request_the_backend_cannot_honour_is_refused_by_field(
    loaded: Running, node: Node, fields: dict[str, object], message: str
) -> None:
    code, details = _refusal(loaded, node.staging / "refused.png", **fields)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(message)


def test_a_request_for_another_model_is_refused(loaded: Running, node: Node) -> None:
    code, details = _refusal(loaded, node.staging / "other.png", ModelIdentity="another-model")
    assert code == grpc.StatusCode.NOT_FOUND
    assert details == f"model identity mismatch: this backend serves {IDENTITY!r}, not 'another-model'"


# --- loading (a second process, so the module's backend stays loaded) -------------------------------------------


def test_load_refuses_what_is_not_a_pipeline_directory_and_bad_options(
    diffusers_backends_path: Path, node: Node, tmp_path: Path
) -> None:
    running = _start(diffusers_backends_path / diffusers_backend.NAME, node.models)
    try:
        code, details = _refusal(running, node.staging / "early.png")
        assert (code, details) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "model not loaded: call LoadModel first",
        )
        (node.models / "not-a-pipeline").mkdir(exist_ok=True)
        result = _load(running, node, str(node.models / "not-a-pipeline"))
        assert not result.success
        assert "is not a diffusers pipeline directory (needs model_index.json" in result.message
        result = _load(running, node, str(tmp_path))
        assert not result.success and "outside this worker's models directory" in result.message
        result = _load(running, node, str(node.models / IDENTITY), Options=["sampler:euler"])
        assert not result.success
        assert result.message == (
            "option 'sampler:euler' is not one the diffusers backend reads; it reads "
            "steps:VALUE, cfg_scale:VALUE"
        )
        result = _load(
            running,
            node,
            str(node.models / IDENTITY / "model_index.json"),
            Options=["steps:2", "cfg_scale:1"],
        )
        assert result.success and "2 steps, cfg_scale 1.0" in result.message, running.log()
        dst = node.staging / "options.png"
        assert _generate(running, dst, step=0).message == "64x64 PNG, 2 steps, seed 7"
    finally:
        _stop(running)


def test_a_caller_that_goes_away_stops_the_generation_at_its_next_step(loaded: Running, node: Node) -> None:
    # 1024x1024 in 500 steps takes minutes on this model; one worker thread serves calls in turn, so the
    # next request is only answered quickly when the abandoned generation really stopped
    with pytest.raises(grpc.RpcError) as caught:
        loaded.stub.GenerateImage(
            pb.GenerateImageRequest(
                positive_prompt=PROMPT,
                width=1024,
                height=1024,
                step=500,
                seed=1,
                dst=str(node.staging / "long.png"),
                ModelIdentity=IDENTITY,
            ),
            metadata=AUTH,
            timeout=1.0,
        )
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    started_s = time.monotonic()
    assert _generate(loaded, node.staging / "after.png").success
    assert time.monotonic() - started_s < 15.0
    assert not (node.staging / "long.png").exists()
