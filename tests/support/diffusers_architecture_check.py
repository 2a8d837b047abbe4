"""Run by the diffusers backend's own python (torch + diffusers + transformers): does a pipeline directory
written by corral.models.tiny_diffusion hold exactly the tensors the real classes build from its configs?

diffusers and transformers fill a missing tensor with a fresh random one and only warn, so a loader
alone would not notice a writer that drifted from the architecture. Prints one line per component
(`unet: 208 tensors ok`) or the differences, and exits 1 when any component differs.

Usage: python diffusers_architecture_check.py PIPELINE_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from diffusers import AutoencoderKL, UNet2DConditionModel
from safetensors import safe_open
from transformers import CLIPTextConfig, CLIPTextModel


def _expected(directory: Path, part: str) -> dict[str, tuple[int, ...]]:
    if part == "text_encoder":
        model = CLIPTextModel(CLIPTextConfig.from_pretrained(directory / part))
        # transformers 5 drops the `text_model.` prefix in state_dict(); hub checkpoints (and ours) carry it
        return {f"text_model.{k}": tuple(v.shape) for k, v in model.state_dict().items()}
    cls = UNet2DConditionModel if part == "unet" else AutoencoderKL
    model = cls.from_config(cls.load_config(directory / part))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _written(file: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(file), framework="np") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def main(directory: Path) -> int:
    failed = False
    for part, file in (
        ("unet", "diffusion_pytorch_model.safetensors"),
        ("vae", "diffusion_pytorch_model.safetensors"),
        ("text_encoder", "model.safetensors"),
    ):
        expected, written = _expected(directory, part), _written(directory / part / file)
        missing, extra = sorted(set(expected) - set(written)), sorted(set(written) - set(expected))
        shapes = sorted(k for k in set(expected) & set(written) if expected[k] != written[k])
        if missing or extra or shapes:
            failed = True
            print(
                f"{part}: missing {missing[:5]} ({len(missing)}), unexpected {extra[:5]} ({len(extra)}), "
                f"other shape {[(k, written[k], expected[k]) for k in shapes[:5]]} ({len(shapes)})"
            )
        else:
            print(f"{part}: {len(written)} tensors ok")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
