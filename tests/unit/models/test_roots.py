"""Every file a model config names stays inside its roots: the models dir, its snapshots, CORRAL_MODEL_PATH_ROOTS."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from corral.models.artifacts import SCALAR_FIELDS
from corral.models.config import ModelConfig, ModelConfigError, load_model_configs, parse_model_config
from corral.models.huggingface import HuggingFaceSource, ref_path


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A models dir with a model file, and a file outside it (what an attacker would like to read)."""
    models, outside = tmp_path / "models", tmp_path / "outside"
    models.mkdir()
    outside.mkdir()
    (models / "m.gguf").write_bytes(b"GGUF")
    (outside / "secret").write_text("root:x:0:0")
    return models, outside


def _parse(models: Path, extra: tuple[Path, ...] = (), **fields: object) -> ModelConfig:
    data = {"name": "m", "backend": "llama-cpp", "parameters": {"model": "m.gguf"}, **fields}
    return parse_model_config(data, models / "m.yaml", models, extra)


def _refused(
    models: Path, field: str, value: str, resolved: Path | str, extra: tuple[Path, ...] = (), **fields: object
) -> None:
    with pytest.raises(ModelConfigError) as info:
        _parse(models, extra, **fields)
    assert str(info.value) == (
        f"{models / 'm.yaml'}: field {field!r}: {value!r} resolves to {resolved}, outside the models directory "
        f"{models}; keep model files under it, or list the directory in CORRAL_MODEL_PATH_ROOTS"
    )
    assert info.value.field == field  # the API answers it as the error's `param`


def test_a_parameters_model_that_climbs_out_with_dot_dots_is_refused_naming_field_value_and_setting(
    layout: tuple[Path, Path],
) -> None:
    models, _ = layout
    value = "../../../../../../../../etc/passwd"
    _refused(models, "parameters.model", value, "/etc/passwd", parameters={"model": value})


def test_an_absolute_parameters_model_outside_is_refused_even_when_it_does_not_exist(
    layout: tuple[Path, Path],
) -> None:
    models, outside = layout
    for value in (str(outside / "secret"), str(outside / "not-there.gguf")):
        _refused(models, "parameters.model", value, value, parameters={"model": value})


def test_a_symlink_in_the_models_dir_that_points_out_is_refused_with_where_it_resolves(
    layout: tuple[Path, Path],
) -> None:
    models, outside = layout
    (models / "link.gguf").symlink_to(outside / "secret")
    _refused(models, "parameters.model", "link.gguf", outside / "secret", parameters={"model": "link.gguf"})
    (models / "linkdir").symlink_to(outside)  # a linked directory: the file below it is outside too
    _refused(
        models,
        "parameters.model",
        "linkdir/secret",
        outside / "secret",
        parameters={"model": "linkdir/secret"},
    )


def test_a_symlink_that_stays_inside_the_models_dir_is_accepted(layout: tuple[Path, Path]) -> None:
    models, _ = layout
    (models / "sub").mkdir()
    (models / "sub" / "alias.gguf").symlink_to(models / "m.gguf")
    assert _parse(models, parameters={"model": "sub/alias.gguf"}).model_file == models / "sub" / "alias.gguf"
    assert _parse(models, parameters={"model": str(models / "m.gguf")}).model_file == models / "m.gguf"


def test_a_root_listed_in_corral_model_path_roots_allows_its_files(layout: tuple[Path, Path]) -> None:
    models, outside = layout
    cfg = _parse(models, (outside,), parameters={"model": str(outside / "secret")})
    assert cfg.model_file == outside / "secret"
    (models / "link.gguf").symlink_to(outside / "secret")  # a link into a listed root is fine too
    assert _parse(models, (outside,), parameters={"model": "link.gguf"}).model_file == models / "link.gguf"


def test_the_message_names_the_listed_roots_when_there_are_some(
    layout: tuple[Path, Path], tmp_path: Path
) -> None:
    models, outside = layout
    with pytest.raises(
        ModelConfigError,
        match=rf"outside the models directory {models} and CORRAL_MODEL_PATH_ROOTS "
        rf"\({tmp_path / 'elsewhere'}\); keep model files under it",
    ):
        _parse(models, (tmp_path / "elsewhere",), parameters={"model": str(outside / "secret")})


@pytest.mark.parametrize(
    "value",
    [
        "gemma-3-270m",  # a name the backend knows (the simulator's, a hub id)
        "TheBloke/Llama-2-7B-GGUF",  # a hub id with a slash: relative, stays inside even if it were a path
        "https://example.com/m.gguf",  # a URL
        "sub/not-yet-there.gguf",  # a file a later copy brings
    ],
)
def test_a_parameters_model_that_is_no_path_escaping_the_roots_stays_allowed(
    layout: tuple[Path, Path], value: str
) -> None:
    models, _ = layout
    assert _parse(models, parameters={"model": value}).model == value


@pytest.mark.parametrize("yaml_key", sorted(SCALAR_FIELDS))
def test_every_artifact_field_is_confined_too(layout: tuple[Path, Path], yaml_key: str) -> None:
    models, outside = layout
    field_value: dict[str, object] = {yaml_key: str(outside / "secret")}
    _refused(models, yaml_key, str(outside / "secret"), outside / "secret", (), **field_value)


def test_a_lora_adapter_list_entry_outside_is_refused_naming_its_index(layout: tuple[Path, Path]) -> None:
    models, outside = layout
    (models / "ok.lora").write_bytes(b"x")
    _refused(
        models,
        "lora_adapters[1]",
        "../outside/secret",
        outside / "secret",
        lora_adapters=["ok.lora", "../outside/secret"],
    )


@pytest.mark.parametrize(
    "option, resolved",
    [
        ("vae:/etc/passwd", "/etc/passwd"),  # an absolute path
        ("draft:../outside/secret", "outside/secret"),  # '..' out of the models dir (exists)
        ("grammar:../../nowhere/x.gbnf", "../nowhere/x.gbnf"),  # '..' out, and not even there
    ],
)
def test_an_option_that_names_a_file_outside_is_refused(
    layout: tuple[Path, Path], option: str, resolved: str
) -> None:
    models, _ = layout
    key, _, value = option.partition(":")
    expected = Path(resolved) if resolved.startswith("/") else (models.parent / resolved).resolve()
    _refused(models, "options[1]", value, expected, options=["chat_format:gemma", option])


def test_an_option_naming_a_symlink_that_points_out_is_refused(layout: tuple[Path, Path]) -> None:
    models, outside = layout
    (models / "vae.bin").symlink_to(outside / "secret")
    _refused(models, "options[0]", "vae.bin", outside / "secret", options=["vae:vae.bin"])


@pytest.mark.parametrize(
    "option",
    [
        "chat_format:gemma",  # a plain value
        "vae:m.gguf",  # a file in the models dir
        "stop:</s>",  # text that looks a little like a path
        "system_prompt:" + "be brief. " * 100,  # a long text
        "noseparator",
    ],
)
def test_options_that_name_no_file_outside_are_accepted(layout: tuple[Path, Path], option: str) -> None:
    models, _ = layout
    assert _parse(models, options=[option]).options == (option,)


@pytest.mark.parametrize(
    "value, problem",
    [
        ("m\x00.gguf", "contains a NUL byte"),
        ("/" + "a/" * 2100, "is 4201 bytes long; the longest path is 4096 bytes"),
        ("x" * 300 + ".gguf", "has a path component of 305 bytes; the longest file name is 255 bytes"),
    ],
)
def test_a_value_that_cannot_be_a_path_is_refused_naming_the_limit(
    layout: tuple[Path, Path], value: str, problem: str
) -> None:
    models, _ = layout
    with pytest.raises(ModelConfigError) as info:
        _parse(models, parameters={"model": value})
    assert "field 'parameters.model': " in str(info.value) and problem in str(info.value)
    assert info.value.field == "parameters.model"


def test_a_nul_byte_in_an_option_path_is_refused(layout: tuple[Path, Path]) -> None:
    models, _ = layout
    with pytest.raises(ModelConfigError, match="field 'options\\[0\\]': '/x\\\\x00y' contains a NUL byte"):
        _parse(models, options=["vae:/x\x00y"])


def test_a_huggingface_model_cannot_climb_out_of_its_snapshot_and_the_models_dir(
    layout: tuple[Path, Path],
) -> None:
    models, _ = layout
    source = HuggingFaceSource("acme/tiny")
    snapshot = models / ".artifacts" / "huggingface" / "acme--tiny" / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    (snapshot / "w.gguf").write_bytes(b"GGUF")
    ref_path(models, source).parent.mkdir(parents=True)
    ref_path(models, source).write_text("c0ffee")
    value = "../../../../../../../../etc/passwd"
    with pytest.raises(
        ModelConfigError, match="field 'parameters.model': .* resolves to /etc/passwd, outside"
    ):
        _parse(models, huggingface={"repo": "acme/tiny"}, parameters={"model": value})
    assert (
        _parse(models, huggingface={"repo": "acme/tiny"}, parameters={"model": "w.gguf"}).model_file
        == snapshot / "w.gguf"
    )


def test_the_snapshot_root_is_a_root_of_its_own_when_it_links_to_another_disk(
    layout: tuple[Path, Path], tmp_path: Path
) -> None:
    models, _ = layout
    disk = tmp_path / "big-disk"
    snapshot = disk / "acme--tiny" / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    (snapshot / "w.gguf").write_bytes(b"GGUF")
    (models / ".artifacts").mkdir()
    (models / ".artifacts" / "huggingface").symlink_to(disk)
    ref_path(models, HuggingFaceSource("acme/tiny")).parent.mkdir(parents=True)
    ref_path(models, HuggingFaceSource("acme/tiny")).write_text("c0ffee")
    cfg = _parse(models, huggingface={"repo": "acme/tiny"}, parameters={"model": "w.gguf"})
    assert cfg.model_file is not None and cfg.model_file.resolve() == snapshot / "w.gguf"


def test_at_start_a_config_outside_the_roots_is_skipped_with_a_line_naming_the_file_and_the_fix(
    layout: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    models, outside = layout
    (models / "good.yaml").write_text("name: good\nbackend: llama-cpp\nparameters:\n  model: m.gguf\n")
    (models / "bad.yaml").write_text(
        f"name: bad\nbackend: llama-cpp\nparameters:\n  model: {outside / 'secret'}\n"
    )
    with caplog.at_level(logging.ERROR, logger="corral.models.config"):
        configs = load_model_configs(models)
    assert sorted(configs) == ["good"]
    assert caplog.messages == [
        f"skipping model config {models / 'bad.yaml'}: {models / 'bad.yaml'}: field 'parameters.model': "
        f"'{outside / 'secret'}' resolves to {outside / 'secret'}, outside the models directory {models}; keep "
        "model files under it, or list the directory in CORRAL_MODEL_PATH_ROOTS"
    ]
    assert sorted(load_model_configs(models, (outside,))) == ["bad", "good"]  # listing the root takes it in
