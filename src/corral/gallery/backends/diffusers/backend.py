#!/usr/bin/env python3
"""diffusers backend: text-to-image over `backend.Backend` gRPC (GenerateImage writes a PNG to `dst`).

A gallery backend in the reference's Python layout: it runs from its own virtual environment
(`venv/`, built from `requirements.txt` by the installer) and is started by the worker as
`run.sh --addr HOST:PORT`. The backend contract around the engine (bearer auth, the model-identity
guard, models-root and staging-directory confinement, parent watch, graceful stop) is
`common/corral_backend.py`, which the installer places beside this file.

LoadModel opens a diffusers pipeline *directory* (`model_index.json` and its components, as
`save_pretrained` writes it) below the worker's models directory with `AutoPipelineForText2Image`,
offline (`HF_HUB_OFFLINE`, `local_files_only`); single-file checkpoints need configs from the hub
and are refused. GenerateImage runs the pipeline on the CPU in float32 and writes a PNG to `dst`,
which must lie in the worker's staging directory. A seed > 0 makes the image reproducible: the same
request gives the same bytes.
"""

from __future__ import annotations

import gc
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub: models come staged by the worker
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the worker's backend log

import backend_pb2
import grpc
import grpc.aio
from corral_backend import BaseServicer, RequestError, invalid, main, model_path, request_file

NAME = "diffusers"
PIPELINE_MARKER = "model_index.json"
SIDE_MULTIPLE_PX = 8  # SD's VAE halves the side three times
MAX_SIDE_PX = 2048
MAX_STEPS = 500
# ModelOptions.Options (`key:value`, from the model YAML's `options:`), with their defaults
DEFAULT_STEPS = 25
DEFAULT_CFG_SCALE = 7.0  # the reference's default `cfg_scale`
OPTION_KEYS = ("steps", "cfg_scale")


class GenerationCancelled(Exception):
    """The caller went away; the pipeline stops at the next step."""


@dataclass(frozen=True)
class ModelSettings:
    """What a model's `options:` set: the steps a request without `step` gets, and the guidance scale."""

    steps: int = DEFAULT_STEPS
    cfg_scale: float = DEFAULT_CFG_SCALE

    @classmethod
    def from_options(cls, entries: list[str]) -> ModelSettings:
        values: dict[str, str] = {}
        for raw in entries:
            key, sep, value = raw.strip().partition(":")
            if not key.strip():
                continue
            if key.strip() not in OPTION_KEYS:
                raise invalid(
                    f"option {raw!r} is not one the diffusers backend reads; it reads "
                    f"{', '.join(k + ':VALUE' for k in OPTION_KEYS)}"
                )
            values[key.strip()] = value.strip() if sep else ""
        try:
            steps = int(values.get("steps", DEFAULT_STEPS))
            cfg_scale = float(values.get("cfg_scale", DEFAULT_CFG_SCALE))
        except ValueError as exc:
            raise invalid(f"option steps must be an integer and cfg_scale a number ({exc})") from None
        if not 1 <= steps <= MAX_STEPS:
            raise invalid(f"option steps:{steps} must be 1..{MAX_STEPS}")
        if not 0.0 <= cfg_scale <= 100.0:
            raise invalid(
                f"option cfg_scale:{cfg_scale} must be 0..100 (1 or less: no classifier-free guidance)"
            )
        return cls(steps=steps, cfg_scale=cfg_scale)


def pipeline_dir(opts: Any) -> Path:
    """The pipeline directory LoadModel names (or the directory of a file inside it)."""
    named: tuple[Path, str] = model_path(opts)  # corral_backend is beside this file once installed
    path, field = named
    if path.is_file():
        path = path.parent
    if not (path / PIPELINE_MARKER).is_file():
        raise RequestError(
            grpc.StatusCode.NOT_FOUND,
            f"LoadModel {field} {str(path)!r} is not a diffusers pipeline directory (needs {PIPELINE_MARKER}, as "
            "save_pretrained writes it); single-file checkpoints are not loaded, models are never downloaded",
        )
    return path


def checked_side(request: Any, field: str, default: int) -> int:
    value = int(getattr(request, field))
    if value == 0:
        return default
    if value % SIDE_MULTIPLE_PX or not SIDE_MULTIPLE_PX <= value <= MAX_SIDE_PX:
        raise invalid(
            f"GenerateImageRequest.{field} {value} must be a multiple of {SIDE_MULTIPLE_PX} from "
            f"{SIDE_MULTIPLE_PX} to {MAX_SIDE_PX} (0: the model's default, {default})"
        )
    return value


class Engine:
    """One diffusers text-to-image pipeline; every method blocks and runs off the event loop."""

    def __init__(self) -> None:
        self.pipeline: Any = None
        self.identity = ""
        self.settings = ModelSettings()
        self.default_side_px = 0

    def is_loaded(self) -> bool:
        return self.pipeline is not None

    def load(self, opts: Any) -> str:
        directory = pipeline_dir(opts)
        settings = ModelSettings.from_options(list(opts.Options))
        import torch
        from diffusers import AutoPipelineForText2Image

        if opts.Threads > 0:
            torch.set_num_threads(opts.Threads)
        pipeline = AutoPipelineForText2Image.from_pretrained(
            str(directory), local_files_only=True, torch_dtype=torch.float32
        )
        pipeline.set_progress_bar_config(disable=True)
        self.free()
        self.pipeline, self.identity, self.settings = pipeline, opts.Model, settings
        self.default_side_px = int(pipeline.unet.config.sample_size) * int(pipeline.vae_scale_factor)
        return (
            f"loaded {directory.name} ({type(pipeline).__name__}, default {self.default_side_px}px, "
            f"{settings.steps} steps, cfg_scale {settings.cfg_scale})"
        )

    def free(self) -> None:
        self.pipeline, self.identity = None, ""
        gc.collect()

    def generate(self, request: Any, cancelled: threading.Event) -> str:
        """Write the PNG to `dst` (atomically: readers never see half an image); a summary with the seed used."""
        import torch

        pipeline = self.pipeline
        if pipeline is None:  # a Free queued ahead of this call
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "model not loaded: call LoadModel first")
        dst = request_file(request, "dst")
        if request.src:
            raise invalid(
                "GenerateImageRequest.src (an init image: image-to-image) is not supported by the "
                "diffusers backend; send a text-to-image request without src"
            )
        if not request.positive_prompt.strip():
            raise invalid("GenerateImageRequest.positive_prompt is empty: describe the image")
        if dst.is_dir() or not dst.parent.is_dir():
            raise invalid(f"GenerateImageRequest.dst {str(dst)!r} must name a file in an existing directory")
        width = checked_side(request, "width", self.default_side_px)
        height = checked_side(request, "height", self.default_side_px)
        if not 0 <= request.step <= MAX_STEPS:
            raise invalid(
                f"GenerateImageRequest.step {request.step} must be 1..{MAX_STEPS} "
                f"(0: the model's {self.settings.steps})"
            )
        steps = request.step or self.settings.steps
        seed = (
            request.seed if request.seed > 0 else secrets.randbelow(2**31 - 1) + 1
        )  # the reference: <= 0 is random

        def stop_when_cancelled(
            pipe: Any, step: int, timestep: Any, kwargs: dict[str, Any]
        ) -> dict[str, Any]:
            if cancelled.is_set():
                raise GenerationCancelled(f"cancelled at step {step} of {steps}")
            return kwargs

        with torch.inference_mode():
            image = pipeline(
                prompt=request.positive_prompt,
                negative_prompt=request.negative_prompt or None,
                width=width,
                height=height,
                num_inference_steps=steps,
                guidance_scale=self.settings.cfg_scale,
                generator=torch.Generator("cpu").manual_seed(seed),
                callback_on_step_end=stop_when_cancelled,
            ).images[0]
        partial = dst.with_name(f".{dst.name}.partial")
        try:
            image.save(partial, format="PNG")
            os.replace(partial, dst)
        finally:
            partial.unlink(missing_ok=True)
        return f"{width}x{height} PNG, {steps} steps, seed {seed}"


class Servicer(BaseServicer):  # type: ignore[misc]  # corral_backend is beside this file once installed
    engine: Engine

    async def GenerateImage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        cancelled = threading.Event()
        try:
            message = await self.call(
                context, "GenerateImage", request.ModelIdentity, self.engine.generate, request, cancelled
            )
        except BaseException:
            cancelled.set()  # the caller went away (or the call failed): a running pipeline stops at its next step
            raise
        return backend_pb2.Result(success=True, message=message)


if __name__ == "__main__":
    raise SystemExit(
        main(NAME, "diffusers text-to-image backend", lambda executor: Servicer(Engine(), executor))
    )
