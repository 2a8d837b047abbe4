"""What a model config can serve (models/capabilities.py): declared, or from its backend and switches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.models.capabilities import capabilities, listed, usecase_problem
from corral.models.config import ModelConfigError, parse_model_config


def _config(**fields: Any) -> Any:
    data = {"name": "m", "backend": "llama-cpp", "parameters": {"model": "m.gguf"}, **fields}
    return parse_model_config(data, Path("/models/m.yaml"), Path("/models"))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, ["chat"]),
        ({"embeddings": True}, ["embeddings"]),
        ({"reranking": True}, ["rerank"]),
        ({"mmproj": "p.gguf"}, ["chat", "vision"]),
        ({"backend": "simulator"}, ["chat", "embeddings", "transcription", "tts", "image"]),
        ({"backend": "faster-whisper"}, ["transcription"]),
        ({"backend": "piper"}, ["tts"]),
        ({"backend": "diffusers"}, ["image"]),
        (
            {"backend": "sentencetransformers", "embeddings": True, "reranking": True},
            ["embeddings", "rerank"],
        ),
        ({"backend": "simulator", "known_usecases": ["chat"]}, ["chat"]),
        ({"known_usecases": ["Completion", "transcript", "TTS"]}, ["chat", "transcription", "tts"]),
    ],
)
def test_capabilities_follow_the_config(fields: dict[str, Any], expected: list[str]) -> None:
    assert listed(_config(**fields)) == expected
    assert capabilities(_config(**fields)) == frozenset(expected)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("chat", "must be a list of names"),
        (["chat", 3], "must be a list of names"),
        (["chat", "telepathy"], "unknown use cases 'telepathy'"),
    ],
)
def test_a_bad_known_usecases_is_refused_naming_it(value: Any, words: str) -> None:
    assert words in (usecase_problem(value) or "")
    with pytest.raises(ModelConfigError, match="known_usecases") as caught:
        _config(known_usecases=value)
    assert caught.value.field == "known_usecases"
