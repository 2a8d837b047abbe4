from __future__ import annotations

from pathlib import Path

import pytest

from corral.models.config import ModelConfigError, load_model_configs, parse_model_config


def test_a_valid_config_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"x" * 10)
    cfg = parse_model_config(
        {
            "name": "m",
            "backend": "llama-cpp",
            "parameters": {"model": "m.gguf"},
            "options": ["chat_format:gemma"],
        },
        tmp_path / "m.yaml",
        tmp_path,
    )
    assert cfg.model_file == tmp_path / "m.gguf" and cfg.checkpoint_bytes() == 10
    assert cfg.options == ("chat_format:gemma",)


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"backend": "llama-cpp"}, "'name' is required"),
        ({"name": "m", "backend": "../vllm"}, "field 'backend' '../vllm' must not contain '/'"),
        ({"name": "m", "backend": ""}, "field 'backend' is required"),
        ({"name": "m", "backend": "llama-cpp"}, "'parameters.model' is required"),
        ({"name": "m", "backend": "simulator", "context_size": "big"}, "'context_size' must be int"),
    ],
)
def test_a_malformed_config_names_the_file_and_field(
    tmp_path: Path, data: dict[str, object], needle: str
) -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_model_config(data, tmp_path / "bad.yaml", tmp_path)
    assert needle in str(info.value) and "bad.yaml" in str(info.value)


def test_a_bad_file_is_skipped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text("name: good\nbackend: simulator\n")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    assert list(load_model_configs(tmp_path)) == ["good"]


def test_any_gallery_backend_name_is_accepted_without_a_model_file(tmp_path: Path) -> None:
    cfg = parse_model_config({"name": "m", "backend": "sentencetransformers"}, tmp_path / "m.yaml", tmp_path)
    assert cfg.backend == "sentencetransformers"


def test_a_sentence_transformers_directory_model_reranks_and_stages_whole(tmp_path: Path) -> None:
    import yaml

    from corral.models.defaults import MINILM_ST_NAME, model_yaml

    model_dir = tmp_path / MINILM_ST_NAME
    (model_dir / "1_Pooling").mkdir(parents=True)
    for name in ("modules.json", "config.json", "model.safetensors", "1_Pooling/config.json"):
        (model_dir / name).write_text("{}")
    text = model_yaml(
        MINILM_ST_NAME,
        MINILM_ST_NAME,
        backend="sentencetransformers",
        context_size=256,
        embeddings=True,
        reranking=True,
    )
    cfg = parse_model_config(yaml.safe_load(text), tmp_path / "st.yaml", tmp_path)
    assert (cfg.backend, cfg.embeddings, cfg.reranking) == ("sentencetransformers", True, True)
    assert cfg.model_file == model_dir
    assert sorted(p.relative_to(model_dir).as_posix() for p in cfg.files()) == [
        "1_Pooling/config.json",
        "config.json",
        "model.safetensors",
        "modules.json",
    ]
    with pytest.raises(ModelConfigError, match="'reranking' must be bool"):
        parse_model_config(
            {"name": "m", "backend": "simulator", "reranking": "yes"}, tmp_path / "m.yaml", tmp_path
        )
