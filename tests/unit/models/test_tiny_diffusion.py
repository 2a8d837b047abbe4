"""The tiny generated diffusers pipeline: its files, its determinism, its tokenizer and its model config.

Whether diffusers builds exactly these tensors from these configs is checked with the backend's own venv
(tests/integration/gallery/test_diffusers_backend.py); here only corral's side, without torch."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open

from corral.models import tiny_diffusion
from corral.models.capabilities import listed
from corral.models.config import load_model_configs

FILES = [
    "model_index.json",
    "scheduler/scheduler_config.json",
    "text_encoder/config.json",
    "text_encoder/model.safetensors",
    "tokenizer/merges.txt",
    "tokenizer/special_tokens_map.json",
    "tokenizer/tokenizer_config.json",
    "tokenizer/vocab.json",
    "unet/config.json",
    "unet/diffusion_pytorch_model.safetensors",
    "vae/config.json",
    "vae/diffusion_pytorch_model.safetensors",
]


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def test_the_pipeline_directory_has_the_layout_save_pretrained_writes(tmp_path: Path) -> None:
    directory = tiny_diffusion.write_pipeline(tmp_path / "pipe")
    assert sorted(_files(directory)) == FILES
    index = json.loads((directory / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionPipeline" and index["safety_checker"] == [None, None]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], (
        "the build directory was renamed away"
    )


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_weights(tmp_path: Path) -> None:
    first = _files(tiny_diffusion.write_pipeline(tmp_path / "a"))
    again = _files(tiny_diffusion.write_pipeline(tmp_path / "b"))
    other = _files(tiny_diffusion.write_pipeline(tmp_path / "c", seed=1))
    assert first == again
    weights = "unet/diffusion_pytorch_model.safetensors"
    assert other[weights] != first[weights] and other["unet/config.json"] == first["unet/config.json"]


def test_the_weights_are_float32_tensors_of_the_listed_shapes_and_a_few_megabytes(tmp_path: Path) -> None:
    directory = tiny_diffusion.write_pipeline(tmp_path / "pipe")
    with safe_open(str(directory / "unet" / "diffusion_pytorch_model.safetensors"), framework="np") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        assert f.get_tensor("conv_in.weight").dtype.name == "float32"
        assert f.get_tensor("conv_norm_out.weight").tolist() == [1.0] * tiny_diffusion.UNET_CHANNELS[0]
    assert shapes == tiny_diffusion.unet_shapes()
    assert 3 << 20 < sum(len(b) for b in _files(directory).values()) < 8 << 20


def test_the_tokenizer_holds_every_byte_symbol_once_and_the_two_special_tokens_last() -> None:
    vocabulary = tiny_diffusion.tokenizer_vocabulary()
    assert len(vocabulary) == 514 and sorted(vocabulary.values()) == list(range(514))
    assert vocabulary["a"] == ord("a") and vocabulary["a</w>"] == 256 + ord("a")
    assert vocabulary["Ġ"] == ord(" ")  # CLIP's stand-in for the space byte
    assert (vocabulary[tiny_diffusion.BOS], vocabulary[tiny_diffusion.EOS]) == (512, 513)


def test_prepare_writes_an_image_model_config_and_keeps_an_existing_pipeline(tmp_path: Path) -> None:
    yaml_path = tiny_diffusion.prepare_tiny_diffusion(tmp_path)
    assert yaml_path.read_text() == (
        "name: tiny-diffusion\nbackend: diffusers\nknown_usecases:\n  - image\n"
        "parameters:\n  model: tiny-diffusion\noptions:\n  - steps:4\n"
    )
    cfg = load_model_configs(tmp_path)["tiny-diffusion"]
    assert cfg.backend == "diffusers" and listed(cfg) == ["image"]
    assert cfg.model_file == tmp_path / "tiny-diffusion" and cfg.checkpoint_bytes() > 3 << 20
    marker = tmp_path / "tiny-diffusion" / "model_index.json"
    before = marker.stat().st_mtime_ns
    tiny_diffusion.prepare_tiny_diffusion(tmp_path)
    assert marker.stat().st_mtime_ns == before
