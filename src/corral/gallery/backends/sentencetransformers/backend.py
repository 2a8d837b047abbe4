#!/usr/bin/env python3
"""sentence-transformers backend: embeddings and bi-encoder reranking over `backend.Backend` gRPC.

A gallery backend in the reference's Python layout: it runs from its own virtual environment
(`venv/`, built from `requirements.txt` by the installer) and is started by the worker as
`run.sh --addr HOST:PORT`. The backend contract around the engine (bearer auth, the model-identity
guard, models-root confinement, parent watch, graceful stop) is `common/corral_backend.py`, which the
installer places beside this file. LoadModel reads only a local directory below the worker's models
directory and never the network (`HF_HUB_OFFLINE`).

Rerank with a bi-encoder: the query and each document are embedded by the same model and a
document's `relevance_score` is the cosine similarity of the two vectors (not a cross-encoder).
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub: models come staged by the worker
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the worker's backend log

import backend_pb2
import grpc
import grpc.aio
from corral_backend import BaseServicer, RequestError, invalid, main, model_path

NAME = "sentencetransformers"
MODEL_MARKERS = ("modules.json", "config.json")  # a sentence-transformers (or plain transformers) directory
ENCODE_BATCH = 32


# --- the engine (synchronous; runs on the executor) ----------------------------------------------


def resolve_model_dir(opts: Any) -> Path:
    """The model directory LoadModel names: `ModelFile` (a directory, or a file inside one), else
    `ModelPath/Model`; refused outside the models root."""
    named: tuple[Path, str] = model_path(opts)  # corral_backend is beside this file once installed
    path, field = named
    if path.is_file():
        path = path.parent
    if not path.is_dir() or not any((path / marker).is_file() for marker in MODEL_MARKERS):
        raise RequestError(
            grpc.StatusCode.NOT_FOUND,
            f"LoadModel {field} {str(path)!r} is not a sentence-transformers model directory "
            f"(needs {' or '.join(MODEL_MARKERS)}); models are read from staged files only, never downloaded",
        )
    return path


class Engine:
    """One SentenceTransformer model; every method blocks and runs off the event loop."""

    def __init__(self) -> None:
        self.model: Any = None
        self.identity = ""
        self.directory: Path | None = None

    def load(self, opts: Any) -> str:
        directory = resolve_model_dir(opts)
        import torch
        from sentence_transformers import SentenceTransformer

        if opts.Threads > 0:
            torch.set_num_threads(opts.Threads)
        model = SentenceTransformer(str(directory), device="cpu", local_files_only=True)
        self.free()
        self.model, self.identity, self.directory = model, opts.Model, directory
        dim = model.get_embedding_dimension()
        return f"loaded {directory.name} (dimension {dim}, max {model.max_seq_length} tokens)"

    def free(self) -> None:
        self.model, self.identity, self.directory = None, "", None
        gc.collect()

    def is_loaded(self) -> bool:
        return self.model is not None

    def loaded(self) -> Any:
        """The model, checked when the call runs (a Free queued ahead of it may have dropped it)."""
        model = self.model
        if model is None:
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "model not loaded: call LoadModel first")
        return model

    def token_counts(self, texts: list[str]) -> list[int]:
        model = self.loaded()
        encoded = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)
        return [len(ids) for ids in encoded["input_ids"]]

    def embed(self, texts: list[str]) -> Any:
        """Rows of float32 vectors, as the model's own pipeline (pooling, normalisation) makes them."""
        return self.loaded().encode(
            texts, batch_size=ENCODE_BATCH, convert_to_numpy=True, show_progress_bar=False
        )

    def embed_ids(self, ids: list[int]) -> Any:
        """One row for these token ids as they are (special tokens included), through the same pipeline."""
        import torch

        model = self.loaded()
        vocabulary = len(model.tokenizer)
        if any(not 0 <= token < vocabulary for token in ids):
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"EmbeddingTokens holds an id outside this model's vocabulary (0..{vocabulary - 1})",
            )
        if len(ids) > model.max_seq_length:
            raise RequestError(
                grpc.StatusCode.OUT_OF_RANGE,
                f"the input is {len(ids)} tokens but this model embeds "
                f"at most {model.max_seq_length}; shorten the input",
            )
        features = {
            "input_ids": torch.tensor([ids]),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        }
        if "token_type_ids" in model.tokenizer.model_input_names:
            features["token_type_ids"] = torch.zeros(1, len(ids), dtype=torch.long)
        with torch.inference_mode():
            return model(features)["sentence_embedding"].float().numpy()

    def rerank(
        self, query: str, documents: list[str], top_n: int
    ) -> tuple[list[tuple[int, float]], int, int]:
        """[(document index, cosine similarity)] best first, cut to `top_n` (0 = all); token counts."""
        import numpy as np

        vectors = self.embed([query, *documents]).astype(np.float32)
        norms = np.linalg.norm(vectors, axis=1)
        norms[norms == 0] = 1.0
        unit = vectors / norms[:, None]
        scores = unit[1:] @ unit[0]
        order = sorted(range(len(documents)), key=lambda i: (-float(scores[i]), i))
        if top_n > 0:
            order = order[:top_n]
        counts = self.token_counts([query, *documents])
        return [(i, float(scores[i])) for i in order], counts[0], sum(counts)


# --- the gRPC servicer ---------------------------------------------------------------------------


class Servicer(BaseServicer):  # type: ignore[misc]  # corral_backend is beside this file once installed
    engine: Engine

    async def Embedding(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        text, ids = request.Embeddings or request.Prompt, list(request.EmbeddingTokens)
        if text:
            vectors, counts = await self.call(
                context, "Embedding", request.ModelIdentity, self._embed_one, text
            )
        else:
            vectors, counts = await self.call(
                context, "Embedding", request.ModelIdentity, self._embed_ids, ids
            )
        vector = [float(x) for x in vectors[0]]
        return backend_pb2.EmbeddingResult(
            embeddings=vector,
            dim=len(vector),
            tokens=counts[0],
            prompt_tokens=counts[0],
            layout=backend_pb2.EMBEDDING_LAYOUT_FINAL,
        )

    def _embed_one(self, text: str) -> tuple[Any, list[int]]:
        return self.engine.embed([text]), self.engine.token_counts([text])

    def _embed_ids(self, ids: list[int]) -> tuple[Any, list[int]]:
        if not ids:
            raise invalid(
                "Embedding needs the text in Embeddings (or Prompt), or token ids in EmbeddingTokens"
            )
        return self.engine.embed_ids(ids), [len(ids)]

    async def Rerank(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        documents = list(request.documents)
        ranked, query_tokens, total_tokens = await self.call(
            context, "Rerank", request.ModelIdentity, self._rerank, request.query, documents, request.top_n
        )
        results = [
            backend_pb2.DocumentResult(index=i, text=documents[i], relevance_score=score)
            for i, score in ranked
        ]
        usage = backend_pb2.Usage(total_tokens=total_tokens, prompt_tokens=query_tokens)
        return backend_pb2.RerankResult(usage=usage, results=results)

    def _rerank(
        self, query: str, documents: list[str], top_n: int
    ) -> tuple[list[tuple[int, float]], int, int]:
        if not query:
            raise invalid("Rerank needs a non-empty query")
        if not documents:
            raise invalid("Rerank needs at least one document")
        if top_n < 0:
            raise invalid("Rerank top_n must be >= 0 (0 = all documents)")
        return self.engine.rerank(query, documents, top_n)


if __name__ == "__main__":
    raise SystemExit(
        main(NAME, "sentence-transformers backend", lambda executor: Servicer(Engine(), executor))
    )
