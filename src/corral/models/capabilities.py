"""What a model can serve: `chat`, `embeddings`, `rerank`, `transcription`, `tts`, `image` (and `vision`, a chat
model that reads images).

A config's `known_usecases` (LocalAI's field and names: chat, completion, embeddings, rerank, transcript, tts,
image, vision) says it outright; without it the capabilities follow from the backend (a gallery backend serves
the modality it is built for) and the config's own switches (`embeddings: true`, `reranking: true`, `mmproj:`).
The frontend checks the capability an endpoint needs before any placement, so a model that cannot serve it is
a 400 naming the model and what it can do, never a load and a backend error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.models.config import ModelConfig

CHAT, EMBEDDINGS, RERANK, TRANSCRIPTION, TTS, IMAGE, VISION = (
    "chat",
    "embeddings",
    "rerank",
    "transcription",
    "tts",
    "image",
    "vision",
)
ALL = (CHAT, EMBEDDINGS, RERANK, TRANSCRIPTION, TTS, IMAGE, VISION)

USECASES = {  # known_usecases entries (LocalAI's spelling first) -> capability
    "chat": CHAT,
    "completion": CHAT,
    "embeddings": EMBEDDINGS,
    "rerank": RERANK,
    "transcript": TRANSCRIPTION,
    "transcription": TRANSCRIPTION,
    "tts": TTS,
    "image": IMAGE,
    "vision": VISION,
}

BACKEND_CAPABILITIES: dict[str, frozenset[str]] = {  # what a backend serves without a known_usecases list
    "simulator": frozenset({CHAT, EMBEDDINGS, TRANSCRIPTION, TTS, IMAGE}),
    "llama-cpp": frozenset({CHAT}),
    "sentencetransformers": frozenset({EMBEDDINGS}),
    "sentence-transformers": frozenset({EMBEDDINGS}),
    "faster-whisper": frozenset({TRANSCRIPTION}),
    "whisper": frozenset({TRANSCRIPTION}),
    "piper": frozenset({TTS}),
    "kokoro": frozenset({TTS}),
    "diffusers": frozenset({IMAGE}),
    "stablediffusion-ggml": frozenset({IMAGE}),
}


def usecase_problem(value: object) -> str | None:
    """Why a `known_usecases` value is not a list of known names, or None."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return "must be a list of names"
    unknown = sorted({v for v in value if v.lower() not in USECASES})
    if unknown:
        return f"names unknown use cases {', '.join(map(repr, unknown))}; use {', '.join(sorted(USECASES))}"
    return None


def capabilities(cfg: ModelConfig) -> frozenset[str]:
    declared = cfg.raw.get("known_usecases")
    if isinstance(declared, list) and declared:
        return frozenset(
            USECASES[v.lower()] for v in declared if isinstance(v, str) and v.lower() in USECASES
        )
    found = set(BACKEND_CAPABILITIES.get(cfg.backend, {CHAT}))
    if cfg.embeddings or cfg.reranking:
        if cfg.backend == "llama-cpp":
            found.discard(
                CHAT
            )  # an embedding or reranker GGUF (BERT and kin) does not chat; known_usecases says so
        found.add(EMBEDDINGS if cfg.embeddings else RERANK)
    if cfg.reranking:
        found.add(RERANK)
    if any(field == "MMProj" for field, _ in cfg.artifacts.scalars):
        found.add(VISION)
    return frozenset(found)


def listed(cfg: ModelConfig) -> list[str]:
    """The capabilities in a stable order, as /v1/models and /api/models list them."""
    have = capabilities(cfg)
    return [name for name in ALL if name in have]
