"""Every modality through corral vs. its engine alone, in one run (issue 23).

One frontend and one worker serve the default speech, transcription, rerank (and image, when the diffusers
backend is available) models. For each, after a warm-up request (which installs the backend and loads the
model), it times N requests:
  corral — the OpenAI endpoint on the frontend: request files staged below the worker's ephemeral/ root,
           the backend call, the output read back, everything released;
  alone  — the same call straight to the model's backend process over gRPC (the replica the warm-up loaded),
           its files placed in the worker's staging directory by the benchmark itself.
Prints per modality: median ms of each path, their ratio, and the bytes staged per request (in and out).
The gallery backends are installed once into /var/tmp/corral-bench-backends (kept between runs).
"""

from __future__ import annotations

import asyncio
import io
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemma_stack import bench_cluster

from corral.models import audio
from corral.models.defaults import prepare_tiny_reranker
from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc

MODELS_DIR = Path("/var/tmp/corral-bench-media-models")
BACKENDS_DIR = Path("/var/tmp/corral-bench-backends")
RUNS = 5
SENTENCE = "the quick brown fox jumps over the lazy dog"
DOCUMENTS = ["a lazy dog sleeps", "the quick brown fox", "stock markets fell", "a cat on a mat"] * 8


def _median_ms(run: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(RUNS):
        started = time.perf_counter()
        result = run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


async def _address(database_url: str, model: str) -> str:
    conn = await asyncpg.connect(database_url)
    try:
        return str(
            await conn.fetchval(
                "SELECT address FROM node_models WHERE model_name = $1 AND state = 'loaded' LIMIT 1", model
            )
        )
    finally:
        await conn.close()


def main() -> None:
    asyncio.run(_run())


async def _run() -> None:
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    BACKENDS_DIR.mkdir(parents=True, exist_ok=True)
    audio.prepare_whisper(MODELS_DIR)
    audio.prepare_piper_voice(MODELS_DIR)
    prepare_tiny_reranker(MODELS_DIR)
    image = _prepare_image(MODELS_DIR)
    async with bench_cluster("media", MODELS_DIR, ("--backends-path", str(BACKENDS_DIR))) as cluster:
        base = cluster.frontend_url
        auth = [("authorization", f"Bearer {cluster.token}")]
        staging = cluster.root / "media-w1" / "staging" / "bench"
        staging.mkdir(parents=True, exist_ok=True)
        http = httpx.Client(timeout=1800)
        rows = []

        def speech() -> bytes:
            response = http.post(
                f"{base}/v1/audio/speech",
                json={"model": "piper-joe", "input": SENTENCE, "response_format": "wav"},
            )
            response.raise_for_status()
            return response.content

        wav = speech()  # warm-up: installs piper, loads the voice
        stub = backend_pb2_grpc.BackendStub(
            grpc.insecure_channel(await _address(cluster.database_url, "piper-joe"))
        )
        out = staging / "speech.wav"
        corral_ms, _ = _median_ms(speech)
        alone_ms, _ = _median_ms(lambda: stub.TTS(pb.TTSRequest(text=SENTENCE, dst=str(out)), metadata=auth))
        rows.append(("tts (piper)", corral_ms, alone_ms, f"0 in, {len(wav)} out"))

        def transcribe() -> str:
            response = http.post(
                f"{base}/v1/audio/transcriptions",
                data={"model": "whisper-base"},
                files={"file": ("fox.wav", io.BytesIO(wav), "audio/wav")},
            )
            response.raise_for_status()
            return str(response.json()["text"])

        heard = transcribe()  # warm-up: installs faster-whisper, loads Whisper base
        stub = backend_pb2_grpc.BackendStub(
            grpc.insecure_channel(await _address(cluster.database_url, "whisper-base"))
        )
        (staging / "fox.wav").write_bytes(wav)
        corral_ms, _ = _median_ms(transcribe)
        alone_ms, _ = _median_ms(
            lambda: stub.AudioTranscription(pb.TranscriptRequest(dst=str(staging / "fox.wav")), metadata=auth)
        )
        rows.append(("transcription (whisper base)", corral_ms, alone_ms, f"{len(wav)} in, 0 out"))

        def rerank() -> Any:
            response = http.post(
                f"{base}/v1/rerank",
                json={"model": "tiny-reranker", "query": "a quick fox", "documents": DOCUMENTS},
            )
            response.raise_for_status()
            return response.json()

        rerank()
        stub = backend_pb2_grpc.BackendStub(
            grpc.insecure_channel(await _address(cluster.database_url, "tiny-reranker"))
        )
        corral_ms, _ = _median_ms(rerank)
        alone_ms, _ = _median_ms(
            lambda: stub.Rerank(pb.RerankRequest(query="a quick fox", documents=DOCUMENTS), metadata=auth)
        )
        rows.append((f"rerank ({len(DOCUMENTS)} documents, tiny cross-encoder)", corral_ms, alone_ms, "none"))

        if image:

            def generate() -> bytes:
                response = http.post(
                    f"{base}/v1/images/generations",
                    json={
                        "model": image,
                        "prompt": "a red fox",
                        "size": "64x64",
                        "response_format": "b64_json",
                        "seed": 1,
                    },
                )
                response.raise_for_status()
                return response.content

            deadline = (
                time.monotonic() + 900
            )  # the first request answers 503 while diffusers installs (minutes)
            while True:
                try:
                    png_json = generate()
                    break
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != 503 or time.monotonic() > deadline:
                        raise
                    time.sleep(5)
            stub = backend_pb2_grpc.BackendStub(
                grpc.insecure_channel(await _address(cluster.database_url, image))
            )
            corral_ms, _ = _median_ms(generate)
            alone_ms, _ = _median_ms(
                lambda: stub.GenerateImage(
                    pb.GenerateImageRequest(
                        positive_prompt="a red fox",
                        width=64,
                        height=64,
                        seed=1,
                        dst=str(staging / "image.png"),
                    ),
                    metadata=auth,
                )
            )
            png_bytes = (staging / "image.png").stat().st_size
            rows.append(("image 64x64 (tiny diffusion)", corral_ms, alone_ms, f"0 in, {png_bytes} out"))
            del png_json
        print(f"heard: {heard!r}")
        print(f"{'modality':48} {'corral ms':>10} {'alone ms':>10} {'ratio':>7}  bytes staged per request")
        for name, corral_ms, alone_ms, staged in rows:
            print(f"{name:48} {corral_ms:10.1f} {alone_ms:10.1f} {corral_ms / alone_ms:6.2f}x  {staged}")
        shutil.rmtree(staging, ignore_errors=True)


def _prepare_image(models_dir: Path) -> str:
    """The image model's name (the generated tiny diffusion pipeline)."""
    from corral.models.tiny_diffusion import prepare_tiny_diffusion

    return Path(prepare_tiny_diffusion(models_dir)).stem


if __name__ == "__main__":
    main()
