"""A tiny Stable-Diffusion-1.x-shaped diffusers pipeline with random weights, for the `diffusers` backend.

No small diffusion weights are packaged on PyPI, so tests and `corral up` generate one: the
directory layout `diffusers.StableDiffusionPipeline.save_pretrained` writes (model_index.json;
unet/, vae/, text_encoder/ as config.json + safetensors; a CLIP BPE tokenizer; a DDIM scheduler),
with the real SD 1.x architecture at a toy width. It is written with numpy + safetensors only, so
corral itself needs no torch: the tensor names and shapes below follow diffusers 0.42's
`UNet2DConditionModel` and `AutoencoderKL` and transformers' `CLIPTextModel` (the same names every
SD 1.x checkpoint on the hub uses), and the backend's loader refuses a checkpoint with a missing
tensor, so a drift shows as a load error.

About 1.1 M parameters (4.6 MB as float32); a 64x64 image in 20 steps takes well under a second on
one core. The images are noise, but they follow seed, prompt and size: same inputs, same bytes.
The tokenizer has the 512 byte-level symbols of CLIP's BPE (every word splits into its letters,
no merges) and CLIP's two special tokens, so any prompt tokenizes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

NAME = "tiny-diffusion"
BACKEND = "diffusers"
SEED = 20231202
DIFFUSERS_VERSION = "0.42.1"
# UNet (SD 1.x block types at toy width); SD 1.5 has (320, 640, 1280, 1280) and cross-attention 768.
UNET_CHANNELS = (32, 64)
UNET_DOWN = ("DownBlock2D", "CrossAttnDownBlock2D")
UNET_UP = ("CrossAttnUpBlock2D", "UpBlock2D")
UNET_HEADS = 4
UNET_SAMPLE_SIZE = 8  # latent side: the pipeline's default image is 8 * VAE_SCALE_FACTOR = 64 px
NORM_GROUPS = 8
LATENT_CHANNELS = 4
# VAE: four blocks like SD's, so latents are 1/8 of the image side (VAE_SCALE_FACTOR) as in SD 1.x.
VAE_CHANNELS = (8, 16, 16, 16)
VAE_SCALE_FACTOR = 2 ** (len(VAE_CHANNELS) - 1)
DEFAULT_IMAGE_SIDE_PX = UNET_SAMPLE_SIZE * VAE_SCALE_FACTOR
# Steps of a request that names none (the YAML's `steps` option): random weights gain nothing from more, and a
# 1024x1024 image (OpenAI's default size) then takes seconds, not a minute, on a busy 2-core machine.
DEFAULT_STEPS = 4
# CLIP text encoder.
TEXT_DIM = 32
TEXT_FEED_FORWARD_DIM = 64
TEXT_HEADS = 4
TEXT_LAYERS = 2
TEXT_POSITIONS = 77  # CLIP's context: prompts are cut at 77 tokens
BOS, EOS = "<|startoftext|>", "<|endoftext|>"

Shapes = dict[str, tuple[int, ...]]


def _resnet(t: Shapes, name: str, channels_in: int, channels_out: int, time_dim: int = 0) -> None:
    t[f"{name}.norm1.weight"] = t[f"{name}.norm1.bias"] = (channels_in,)
    t[f"{name}.conv1.weight"], t[f"{name}.conv1.bias"] = (channels_out, channels_in, 3, 3), (channels_out,)
    if time_dim:
        t[f"{name}.time_emb_proj.weight"], t[f"{name}.time_emb_proj.bias"] = (
            (channels_out, time_dim),
            (channels_out,),
        )
    t[f"{name}.norm2.weight"] = t[f"{name}.norm2.bias"] = (channels_out,)
    t[f"{name}.conv2.weight"], t[f"{name}.conv2.bias"] = (channels_out, channels_out, 3, 3), (channels_out,)
    if channels_in != channels_out:
        t[f"{name}.conv_shortcut.weight"] = (channels_out, channels_in, 1, 1)
        t[f"{name}.conv_shortcut.bias"] = (channels_out,)


def _conv(t: Shapes, name: str, channels_out: int, channels_in: int, kernel: int) -> None:
    t[f"{name}.weight"], t[f"{name}.bias"] = (channels_out, channels_in, kernel, kernel), (channels_out,)


def _attention(t: Shapes, name: str, dim: int, context_dim: int, qkv_bias: bool) -> None:
    for projection, width in (("to_q", dim), ("to_k", context_dim), ("to_v", context_dim)):
        t[f"{name}.{projection}.weight"] = (dim, width)
        if qkv_bias:
            t[f"{name}.{projection}.bias"] = (dim,)
    t[f"{name}.to_out.0.weight"], t[f"{name}.to_out.0.bias"] = (dim, dim), (dim,)


def _transformer(t: Shapes, name: str, dim: int, context_dim: int) -> None:
    """A `Transformer2DModel` with one `BasicTransformerBlock` (conv projections, GEGLU feed-forward)."""
    t[f"{name}.norm.weight"] = t[f"{name}.norm.bias"] = (dim,)
    _conv(t, f"{name}.proj_in", dim, dim, 1)
    block = f"{name}.transformer_blocks.0"
    for norm in ("norm1", "norm2", "norm3"):
        t[f"{block}.{norm}.weight"] = t[f"{block}.{norm}.bias"] = (dim,)
    _attention(t, f"{block}.attn1", dim, dim, qkv_bias=False)
    _attention(t, f"{block}.attn2", dim, context_dim, qkv_bias=False)
    t[f"{block}.ff.net.0.proj.weight"], t[f"{block}.ff.net.0.proj.bias"] = (8 * dim, dim), (8 * dim,)
    t[f"{block}.ff.net.2.weight"], t[f"{block}.ff.net.2.bias"] = (dim, 4 * dim), (dim,)
    _conv(t, f"{name}.proj_out", dim, dim, 1)


def unet_shapes() -> Shapes:
    """`UNet2DConditionModel` tensors (layers_per_block 1, `UNetMidBlock2DCrossAttn`)."""
    t: Shapes = {}
    first, last, time_dim = UNET_CHANNELS[0], UNET_CHANNELS[-1], 4 * UNET_CHANNELS[0]
    _conv(t, "conv_in", first, LATENT_CHANNELS, 3)
    t["time_embedding.linear_1.weight"], t["time_embedding.linear_1.bias"] = (time_dim, first), (time_dim,)
    t["time_embedding.linear_2.weight"], t["time_embedding.linear_2.bias"] = (time_dim, time_dim), (time_dim,)
    channels_in = first
    for i, (kind, channels) in enumerate(zip(UNET_DOWN, UNET_CHANNELS, strict=True)):
        _resnet(t, f"down_blocks.{i}.resnets.0", channels_in, channels, time_dim)
        if kind.startswith("CrossAttn"):
            _transformer(t, f"down_blocks.{i}.attentions.0", channels, TEXT_DIM)
        if i < len(UNET_CHANNELS) - 1:
            _conv(t, f"down_blocks.{i}.downsamplers.0.conv", channels, channels, 3)
        channels_in = channels
    _transformer(t, "mid_block.attentions.0", last, TEXT_DIM)
    _resnet(t, "mid_block.resnets.0", last, last, time_dim)
    _resnet(t, "mid_block.resnets.1", last, last, time_dim)
    reversed_channels = UNET_CHANNELS[::-1]
    previous = last
    for i, kind in enumerate(UNET_UP):
        channels = reversed_channels[i]
        skip_in = reversed_channels[min(i + 1, len(UNET_CHANNELS) - 1)]
        for j in range(2):  # layers_per_block + 1 resnets, each fed a skip connection
            skip = skip_in if j == 1 else channels
            _resnet(
                t, f"up_blocks.{i}.resnets.{j}", (previous if j == 0 else channels) + skip, channels, time_dim
            )
            if kind.startswith("CrossAttn"):
                _transformer(t, f"up_blocks.{i}.attentions.{j}", channels, TEXT_DIM)
        if i < len(UNET_CHANNELS) - 1:
            _conv(t, f"up_blocks.{i}.upsamplers.0.conv", channels, channels, 3)
        previous = channels
    t["conv_norm_out.weight"] = t["conv_norm_out.bias"] = (first,)
    _conv(t, "conv_out", LATENT_CHANNELS, first, 3)
    return t


def _vae_mid(t: Shapes, name: str, channels: int) -> None:
    t[f"{name}.attentions.0.group_norm.weight"] = t[f"{name}.attentions.0.group_norm.bias"] = (channels,)
    _attention(t, f"{name}.attentions.0", channels, channels, qkv_bias=True)
    _resnet(t, f"{name}.resnets.0", channels, channels)
    _resnet(t, f"{name}.resnets.1", channels, channels)


def vae_shapes() -> Shapes:
    """`AutoencoderKL` tensors (layers_per_block 1, quant convs)."""
    t: Shapes = {}
    first, last, blocks = VAE_CHANNELS[0], VAE_CHANNELS[-1], len(VAE_CHANNELS)
    _conv(t, "encoder.conv_in", first, 3, 3)
    channels_in = first
    for i, channels in enumerate(VAE_CHANNELS):
        _resnet(t, f"encoder.down_blocks.{i}.resnets.0", channels_in, channels)
        if i < blocks - 1:
            _conv(t, f"encoder.down_blocks.{i}.downsamplers.0.conv", channels, channels, 3)
        channels_in = channels
    _vae_mid(t, "encoder.mid_block", last)
    t["encoder.conv_norm_out.weight"] = t["encoder.conv_norm_out.bias"] = (last,)
    _conv(t, "encoder.conv_out", 2 * LATENT_CHANNELS, last, 3)
    _conv(t, "decoder.conv_in", last, LATENT_CHANNELS, 3)
    _vae_mid(t, "decoder.mid_block", last)
    previous = last
    for i, channels in enumerate(VAE_CHANNELS[::-1]):
        for j in range(2):
            _resnet(t, f"decoder.up_blocks.{i}.resnets.{j}", previous if j == 0 else channels, channels)
        if i < blocks - 1:
            _conv(t, f"decoder.up_blocks.{i}.upsamplers.0.conv", channels, channels, 3)
        previous = channels
    t["decoder.conv_norm_out.weight"] = t["decoder.conv_norm_out.bias"] = (first,)
    _conv(t, "decoder.conv_out", 3, first, 3)
    _conv(t, "quant_conv", 2 * LATENT_CHANNELS, 2 * LATENT_CHANNELS, 1)
    _conv(t, "post_quant_conv", LATENT_CHANNELS, LATENT_CHANNELS, 1)
    return t


def text_encoder_shapes(vocabulary: int) -> Shapes:
    """`CLIPTextModel` tensors, with the `text_model.` prefix hub checkpoints carry."""
    t: Shapes = {
        "text_model.embeddings.token_embedding.weight": (vocabulary, TEXT_DIM),
        "text_model.embeddings.position_embedding.weight": (TEXT_POSITIONS, TEXT_DIM),
    }
    for i in range(TEXT_LAYERS):
        layer = f"text_model.encoder.layers.{i}"
        for projection in ("k_proj", "v_proj", "q_proj", "out_proj"):
            t[f"{layer}.self_attn.{projection}.weight"] = (TEXT_DIM, TEXT_DIM)
            t[f"{layer}.self_attn.{projection}.bias"] = (TEXT_DIM,)
        t[f"{layer}.layer_norm1.weight"] = t[f"{layer}.layer_norm1.bias"] = (TEXT_DIM,)
        t[f"{layer}.mlp.fc1.weight"], t[f"{layer}.mlp.fc1.bias"] = (
            (TEXT_FEED_FORWARD_DIM, TEXT_DIM),
            (TEXT_FEED_FORWARD_DIM,),
        )
        t[f"{layer}.mlp.fc2.weight"], t[f"{layer}.mlp.fc2.bias"] = (
            (TEXT_DIM, TEXT_FEED_FORWARD_DIM),
            (TEXT_DIM,),
        )
        t[f"{layer}.layer_norm2.weight"] = t[f"{layer}.layer_norm2.bias"] = (TEXT_DIM,)
    t["text_model.final_layer_norm.weight"] = t["text_model.final_layer_norm.bias"] = (TEXT_DIM,)
    return t


# --- the tokenizer ---------------------------------------------------------------------------------


def _byte_symbols() -> list[str]:
    """GPT-2/CLIP's printable stand-in for each of the 256 bytes (`bytes_to_unicode`), in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def tokenizer_vocabulary() -> dict[str, int]:
    """CLIP's vocabulary order without merges: 256 byte symbols, the same as word ends, then BOS and EOS."""
    symbols = _byte_symbols()
    tokens = [*symbols, *(s + "</w>" for s in symbols), BOS, EOS]
    return {token: i for i, token in enumerate(tokens)}


# --- configs ---------------------------------------------------------------------------------------


def _configs(vocabulary: dict[str, int]) -> dict[str, object]:
    """Every JSON file of the pipeline directory, by relative path."""
    eos = vocabulary[EOS]
    return {
        "model_index.json": {
            "_class_name": "StableDiffusionPipeline",
            "_diffusers_version": DIFFUSERS_VERSION,
            "feature_extractor": [None, None],
            "image_encoder": [None, None],
            "requires_safety_checker": False,
            "safety_checker": [None, None],
            "scheduler": ["diffusers", "DDIMScheduler"],
            "text_encoder": ["transformers", "CLIPTextModel"],
            "tokenizer": ["transformers", "CLIPTokenizer"],
            "unet": ["diffusers", "UNet2DConditionModel"],
            "vae": ["diffusers", "AutoencoderKL"],
        },
        "scheduler/scheduler_config.json": {  # SD 1.5's noise schedule
            "_class_name": "DDIMScheduler",
            "_diffusers_version": DIFFUSERS_VERSION,
            "beta_end": 0.012,
            "beta_schedule": "scaled_linear",
            "beta_start": 0.00085,
            "clip_sample": False,
            "num_train_timesteps": 1000,
            "prediction_type": "epsilon",
            "set_alpha_to_one": False,
            "steps_offset": 1,
        },
        "unet/config.json": {
            "_class_name": "UNet2DConditionModel",
            "_diffusers_version": DIFFUSERS_VERSION,
            "act_fn": "silu",
            "attention_head_dim": UNET_HEADS,
            "block_out_channels": list(UNET_CHANNELS),
            "center_input_sample": False,
            "cross_attention_dim": TEXT_DIM,
            "down_block_types": list(UNET_DOWN),
            "downsample_padding": 1,
            "flip_sin_to_cos": True,
            "freq_shift": 0,
            "in_channels": LATENT_CHANNELS,
            "layers_per_block": 1,
            "mid_block_scale_factor": 1,
            "norm_eps": 1e-5,
            "norm_num_groups": NORM_GROUPS,
            "out_channels": LATENT_CHANNELS,
            "sample_size": UNET_SAMPLE_SIZE,
            "up_block_types": list(UNET_UP),
        },
        "vae/config.json": {
            "_class_name": "AutoencoderKL",
            "_diffusers_version": DIFFUSERS_VERSION,
            "act_fn": "silu",
            "block_out_channels": list(VAE_CHANNELS),
            "down_block_types": ["DownEncoderBlock2D"] * len(VAE_CHANNELS),
            "in_channels": 3,
            "latent_channels": LATENT_CHANNELS,
            "layers_per_block": 1,
            "norm_num_groups": NORM_GROUPS,
            "out_channels": 3,
            "sample_size": DEFAULT_IMAGE_SIDE_PX,
            "scaling_factor": 0.18215,
            "up_block_types": ["UpDecoderBlock2D"] * len(VAE_CHANNELS),
        },
        "text_encoder/config.json": {
            "architectures": ["CLIPTextModel"],
            "model_type": "clip_text_model",
            "hidden_act": "quick_gelu",
            "hidden_size": TEXT_DIM,
            "intermediate_size": TEXT_FEED_FORWARD_DIM,
            "layer_norm_eps": 1e-5,
            "max_position_embeddings": TEXT_POSITIONS,
            "num_attention_heads": TEXT_HEADS,
            "num_hidden_layers": TEXT_LAYERS,
            "projection_dim": TEXT_DIM,
            "vocab_size": len(vocabulary),
            "bos_token_id": vocabulary[BOS],
            "eos_token_id": eos,
            "pad_token_id": eos,
            "torch_dtype": "float32",
        },
        "tokenizer/vocab.json": vocabulary,
        "tokenizer/tokenizer_config.json": {
            "tokenizer_class": "CLIPTokenizer",
            "model_max_length": TEXT_POSITIONS,
            "do_lower_case": True,
            "bos_token": BOS,
            "eos_token": EOS,
            "unk_token": EOS,
            "pad_token": EOS,
            "errors": "replace",
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": True,
        },
        "tokenizer/special_tokens_map.json": {
            "bos_token": BOS,
            "eos_token": EOS,
            "unk_token": EOS,
            "pad_token": EOS,
        },
    }


# --- weights ---------------------------------------------------------------------------------------


def random_tensors(shapes: Shapes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """float32 tensors: weights normal / sqrt(fan-in), embeddings normal * 0.02, norm scales 1, biases 0."""
    tensors = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            norm_scale = name.endswith(".weight")
            tensors[name] = np.ones(shape, np.float32) if norm_scale else np.zeros(shape, np.float32)
        elif "embedding" in name:
            tensors[name] = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        else:
            fan_in = int(np.prod(shape[1:]))
            tensors[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return tensors


WEIGHT_FILES = {
    "unet": "diffusion_pytorch_model.safetensors",
    "vae": "diffusion_pytorch_model.safetensors",
    "text_encoder": "model.safetensors",
}


def write_pipeline(directory: Path, seed: int = SEED) -> Path:
    """Write the pipeline directory (built beside it, then renamed into place); byte-identical for a seed."""
    directory = Path(directory)
    vocabulary = tokenizer_vocabulary()
    rng = np.random.default_rng(seed)
    shapes = {
        "unet": unet_shapes(),
        "vae": vae_shapes(),
        "text_encoder": text_encoder_shapes(len(vocabulary)),
    }
    directory.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        for relative, content in _configs(vocabulary).items():
            (build / relative).parent.mkdir(parents=True, exist_ok=True)
            (build / relative).write_text(
                json.dumps(content, indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
        (build / "tokenizer" / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
        for part, part_shapes in shapes.items():
            save_file(
                random_tensors(part_shapes, rng),
                str(build / part / WEIGHT_FILES[part]),
                metadata={"format": "pt"},
            )
        for path in build.rglob("*"):  # mkdtemp's 0700 and safetensors' 0600 -> what save_pretrained leaves
            path.chmod(0o755 if path.is_dir() else 0o644)
        build.chmod(0o755)
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(build, directory)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return directory


def model_yaml(name: str = NAME) -> str:
    """The model config: backend `diffusers`, the pipeline directory as the model file, DEFAULT_STEPS steps."""
    return (
        f"name: {name}\nbackend: {BACKEND}\nknown_usecases:\n  - image\n"
        f"parameters:\n  model: {name}\noptions:\n  - steps:{DEFAULT_STEPS}\n"
    )


def prepare_tiny_diffusion(models_dir: Path, name: str = NAME) -> Path:
    """Write `<models_dir>/<name>/` (unless its model_index.json is there) and `<name>.yaml`; the YAML path."""
    models_dir = Path(models_dir)
    if not (models_dir / name / "model_index.json").is_file():
        write_pipeline(models_dir / name)
    yaml_path = models_dir / f"{name}.yaml"
    text = model_yaml(name)
    if not yaml_path.is_file() or yaml_path.read_text(encoding="utf-8") != text:
        yaml_path.write_text(text, encoding="utf-8")
    return yaml_path
