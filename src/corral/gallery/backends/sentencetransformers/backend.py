#!/usr/bin/env python3
"""sentence-transformers backend: embeddings and bi-encoder reranking over `backend.Backend` gRPC.

A gallery backend in the reference's Python layout: it runs from its own virtual environment
(`venv/`, built from `requirements.txt` by the installer) and is started by the worker as
`run.sh --addr HOST:PORT`, so it cannot import corral and carries the few pieces of the
backend contract it needs itself:

* bearer auth when `LOCALAI_GRPC_AUTH_TOKEN` is set (constant-time compare, `UNAUTHENTICATED` otherwise);
* the model-identity guard (`NOT_FOUND` "model identity mismatch"; `FAILED_PRECONDITION` before a load);
* LoadModel reads only a local directory below the worker's models directory
  (`CORRAL_BACKEND_MODELS_ROOT`, else `LOCALAI_MODELS_PATH`) and never the network (`HF_HUB_OFFLINE`);
* exit when the parent (the worker) goes away (`LOCALAI_BACKEND_PARENT_WATCH[_INTERVAL]`);
* graceful stop on SIGTERM/SIGINT.

Rerank with a bi-encoder: the query and each document are embedded by the same model and a
document's `relevance_score` is the cosine similarity of the two vectors (not a cross-encoder).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hmac
import logging
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub: models come staged by the worker
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the worker's backend log

import backend_pb2  # noqa: E402  (generated from corral's backend.proto, shipped beside this file)
import backend_pb2_grpc  # noqa: E402
import grpc  # noqa: E402
import grpc.aio  # noqa: E402

log = logging.getLogger("sentencetransformers")

NAME = "sentencetransformers"
AUTH_TOKEN_ENV = "LOCALAI_GRPC_AUTH_TOKEN"
MODELS_ROOT_ENVS = ("CORRAL_BACKEND_MODELS_ROOT", "LOCALAI_MODELS_PATH")
WATCH_ENV, WATCH_INTERVAL_ENV = "LOCALAI_BACKEND_PARENT_WATCH", "LOCALAI_BACKEND_PARENT_WATCH_INTERVAL"
MAX_WORKERS_ENV = "PYTHON_GRPC_MAX_WORKERS"
MAX_MESSAGE_BYTES = 50 * 1024 * 1024
SHUTDOWN_GRACE_S = 5.0
IDENTITY_MISMATCH = "model identity mismatch"
MODEL_MARKERS = ("modules.json", "config.json")  # a sentence-transformers (or plain transformers) directory
ENCODE_BATCH = 32
SERVER_OPTIONS = (
    ("grpc.max_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),  # frontends keep calls alive with pings
    ("grpc.http2.max_ping_strikes", 0),
)


class RequestError(Exception):
    """A call the backend refuses; carries the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# --- environment ---------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(text: str) -> float:
    """A Go duration (`500ms`, `2s`, `1m30s`) or plain seconds (`0.5`)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 2s, 1m)")
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def parent_watch_interval_s() -> float | None:
    """Seconds between parent checks, or None when the watch is disabled."""
    if os.environ.get(WATCH_ENV, "").strip().lower() in ("false", "0", "no", "off"):
        return None
    raw = os.environ.get(WATCH_INTERVAL_ENV, "").strip()
    try:
        interval_s = parse_duration_s(raw) if raw else 2.0
    except ValueError as exc:
        log.warning("%s ignored (%s); using 2s", WATCH_INTERVAL_ENV, exc)
        return 2.0
    return interval_s if interval_s > 0 else 2.0


def models_root() -> Path | None:
    for env in MODELS_ROOT_ENVS:
        raw = os.environ.get(env, "").strip()
        if raw:
            return Path(raw)
    return None


# --- bearer auth ---------------------------------------------------------------------------------

def _presented_token(metadata: Any) -> bytes:
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str) and value[:7].lower() == "bearer ":
            return value[7:].strip().encode()
    return b""


class BearerAuth(grpc.aio.ServerInterceptor):
    """Answers `UNAUTHENTICATED` unless metadata `authorization` is `Bearer <LOCALAI_GRPC_AUTH_TOKEN>`."""

    def __init__(self, token: str) -> None:
        self._expected = token.encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        presented = _presented_token(details.invocation_metadata)
        handler = await continuation(details)
        if handler is None or hmac.compare_digest(presented, self._expected):
            return handler
        why = "invalid bearer token" if presented else "missing bearer token: send 'authorization: Bearer <token>'"

        async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        # every RPC this backend serves is unary-unary
        return grpc.unary_unary_rpc_method_handler(
            deny, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


# --- the engine (synchronous; runs on the executor) ----------------------------------------------

def resolve_model_dir(opts: Any) -> Path:
    """The model directory LoadModel names: `ModelFile` (a directory, or a file inside one), else
    `ModelPath/Model`; refused outside the models root."""
    if opts.ModelFile:
        path = Path(opts.ModelFile)
        if not path.is_absolute() and opts.ModelPath:
            path = Path(opts.ModelPath) / path
        field = "ModelFile"
    elif opts.Model and opts.ModelPath:
        path, field = Path(opts.ModelPath) / opts.Model, "Model"
    else:
        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                           "LoadModel needs ModelFile (the staged model directory) or ModelPath + Model")
    if "\x00" in str(path):
        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"LoadModel {field} contains a NUL byte")
    root = models_root()
    if root is not None:
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
            raise RequestError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"LoadModel {field} {str(path)!r} resolves to {real!r}, outside this worker's models "
                f"directory {real_root!r}; backends only open files under it")
    if path.is_file():
        path = path.parent
    if not path.is_dir() or not any((path / marker).is_file() for marker in MODEL_MARKERS):
        raise RequestError(
            grpc.StatusCode.NOT_FOUND,
            f"LoadModel {field} {str(path)!r} is not a sentence-transformers model directory "
            f"(needs {' or '.join(MODEL_MARKERS)}); models are read from staged files only, never downloaded")
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
        return self.loaded().encode(texts, batch_size=ENCODE_BATCH, convert_to_numpy=True, show_progress_bar=False)

    def embed_ids(self, ids: list[int]) -> Any:
        """One row for these token ids as they are (special tokens included), through the same pipeline."""
        import torch

        model = self.loaded()
        vocabulary = len(model.tokenizer)
        if any(not 0 <= token < vocabulary for token in ids):
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"EmbeddingTokens holds an id outside this model's "
                                                                 f"vocabulary (0..{vocabulary - 1})")
        if len(ids) > model.max_seq_length:
            raise RequestError(grpc.StatusCode.OUT_OF_RANGE, f"the input is {len(ids)} tokens but this model embeds "
                                                             f"at most {model.max_seq_length}; shorten the input")
        features = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        if "token_type_ids" in model.tokenizer.model_input_names:
            features["token_type_ids"] = torch.zeros(1, len(ids), dtype=torch.long)
        with torch.inference_mode():
            return model(features)["sentence_embedding"].float().numpy()

    def rerank(self, query: str, documents: list[str], top_n: int) -> tuple[list[tuple[int, float]], int, int]:
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

def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


async def _internal(context: grpc.aio.ServicerContext, rpc: str, exc: Exception) -> None:
    log.error("%s failed", rpc, exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, f"{rpc} failed: {type(exc).__name__}: {exc}")


class Servicer(backend_pb2_grpc.BackendServicer):
    def __init__(self, engine: Engine, executor: ThreadPoolExecutor) -> None:
        self.engine, self.executor = engine, executor
        self.loading = False

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def _guard(self, identity: str) -> None:
        self.engine.loaded()
        if identity and self.engine.identity and identity != self.engine.identity:
            raise RequestError(grpc.StatusCode.NOT_FOUND,
                               f"{IDENTITY_MISMATCH}: this backend serves {self.engine.identity!r}, not {identity!r}")

    async def Health(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return backend_pb2.Reply(message=b"OK")

    async def LoadModel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.loading = True
        try:
            message = await self._run(self.engine.load, request)
        except RequestError as exc:
            return backend_pb2.Result(success=False, message=str(exc))
        except Exception as exc:  # noqa: BLE001 - a failed load is reported, the process keeps serving
            log.exception("LoadModel failed")
            return backend_pb2.Result(success=False, message=f"LoadModel failed: {type(exc).__name__}: {exc}")
        finally:
            self.loading = False
        log.info("%s", message)
        return backend_pb2.Result(success=True, message=message)

    async def Embedding(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            self._guard(request.ModelIdentity)
            text, ids = request.Embeddings or request.Prompt, list(request.EmbeddingTokens)
            if not text and not ids:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "Embedding needs the text in Embeddings (or Prompt), or token ids in EmbeddingTokens")
            vectors, counts = await self._run(self._embed_one, text) if text else await self._run(self._embed_ids, ids)
        except RequestError as exc:
            await context.abort(exc.code, str(exc))
        except Exception as exc:  # noqa: BLE001 - the caller gets the cause, the log the traceback
            await _internal(context, "Embedding", exc)
        vector = [float(x) for x in vectors[0]]
        return backend_pb2.EmbeddingResult(
            embeddings=vector, dim=len(vector), tokens=counts[0], prompt_tokens=counts[0],
            layout=backend_pb2.EMBEDDING_LAYOUT_FINAL)

    def _embed_one(self, text: str) -> tuple[Any, list[int]]:
        return self.engine.embed([text]), self.engine.token_counts([text])

    def _embed_ids(self, ids: list[int]) -> tuple[Any, list[int]]:
        return self.engine.embed_ids(ids), [len(ids)]

    async def Rerank(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            self._guard(request.ModelIdentity)
            if not request.query:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "Rerank needs a non-empty query")
            if not request.documents:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "Rerank needs at least one document")
            if request.top_n < 0:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "Rerank top_n must be >= 0 (0 = all documents)")
            documents = list(request.documents)
            ranked, query_tokens, total_tokens = await self._run(
                self.engine.rerank, request.query, documents, request.top_n)
        except RequestError as exc:
            await context.abort(exc.code, str(exc))
        except Exception as exc:  # noqa: BLE001 - the caller gets the cause, the log the traceback
            await _internal(context, "Rerank", exc)
        results = [backend_pb2.DocumentResult(index=i, text=documents[i], relevance_score=score)
                   for i, score in ranked]
        usage = backend_pb2.Usage(total_tokens=total_tokens, prompt_tokens=query_tokens)
        return backend_pb2.RerankResult(usage=usage, results=results)

    async def Status(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        states = backend_pb2.StatusResponse.State
        state = states.BUSY if self.loading else states.READY if self.engine.model is not None else states.UNINITIALIZED
        return backend_pb2.StatusResponse(state=state, memory=backend_pb2.MemoryUsageData(total=_rss_bytes()))

    async def Free(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._run(self.engine.free)
        return backend_pb2.Result(success=True, message="model freed")


# --- process -------------------------------------------------------------------------------------

async def _watch_parent(original: int, interval_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(interval_s)
        if os.getppid() != original:
            log.warning("parent process %d went away; shutting down", original)
            stop.set()


async def serve(address: str) -> int:
    parent = os.getppid()  # before serving: a parent that dies while we start is still noticed
    executor = ThreadPoolExecutor(max_workers=max(1, int(os.environ.get(MAX_WORKERS_ENV, "1") or 1)))
    token = os.environ.get(AUTH_TOKEN_ENV, "")
    server = grpc.aio.server(interceptors=[BearerAuth(token)] if token else [], options=SERVER_OPTIONS)
    backend_pb2_grpc.add_BackendServicer_to_server(Servicer(Engine(), executor), server)
    try:
        if server.add_insecure_port(address) == 0:
            raise RuntimeError("bind returned port 0")
    except RuntimeError as exc:
        print(f"{NAME}: cannot listen on {address}: {exc} (is the port already in use?)", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await server.start()
    log.info("%s backend listening on %s (%s, pid %d)", NAME, address,
             "bearer auth on" if token else "no auth", os.getpid())
    interval_s = parent_watch_interval_s()
    watcher = asyncio.create_task(_watch_parent(parent, interval_s, stop)) if interval_s else None
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        await server.stop(SHUTDOWN_GRACE_S)
        executor.shutdown(wait=False, cancel_futures=True)
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="sentence-transformers backend (backend.Backend gRPC)")
    parser.add_argument("--addr", default="localhost:50051", help="HOST:PORT to listen on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, datefmt="%H:%M:%S",
                        format=f"%(asctime)s backend[{NAME}] %(levelname)s %(message)s")
    try:
        code = asyncio.run(serve(args.addr))
    except KeyboardInterrupt:
        code = 130
    # Nothing is left to clean up; interpreter teardown (torch's thread pools, the model) took seconds.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
