"""GPU-free simulated engine for tests and benchmarks (like vLLM's / llm-d's mock engines).

Output is deterministic: the same model identity and prompt (or messages) always produce the
same words. Token counts are honest for a "one word = one token" tokenizer: prompt tokens are
the whitespace-separated words of the prompt (or of all message contents), and a request for
`Tokens=N` emits exactly N words (default 16). With `ContextSize` set, a prompt of that many words or
more (an embedding input of more) is refused as too long for the context, as a real engine refuses it.
Sampling parameters, seeds, stop strings, logit bias and logprobs are accepted and ignored. A prompt or an
embedding input of token ids (`EmbeddingTokens`) is taken as the words `#<id>`. With tools offered,
`call <tool>(<json>)` in the last user message makes it call that tool, and tool results are answered
by quoting them (simulator_tools.py). It also speaks, transcribes and draws (simulator_media.py).

Options (`ModelOptions.Options`, `key:value`):
  load_time_s:<s>          sleep this long inside LoadModel (default 0)
  load_fail:<message>      LoadModel answers success=false with this message (after load_time_s)
  prompt_token_time_s:<s>  sleep per prompt token not in the KV cache, before the first output token (default 0)
  output_token_time_s:<s>  sleep per output token; streaming sends one word per token (default 0)
  embedding_dim:<n>        length of Embedding vectors (default 384)
  kv_cache_tokens:<n>      KV prefix cache capacity in tokens, least recently used blocks evicted (default 0: none)
  kv_block_tokens:<n>      tokens per cached block; only whole blocks of a prefix are reused (default 16)
  prefill_concurrency:<n>  prefills running at once on this replica, others queue (default 0: unbounded)
  parallel:<n>             requests served at once, as llama.cpp's slots (the reference's option name; n_parallel
                           too): each generates at output_token_time_s per token beside the others, so a replica's
                           decode throughput grows with concurrency up to n; beyond n, calls queue in the servicer
                           (default 1: one request at a time)
  media_time_s:<s>         sleep this long in each TTS, AudioTranscription and GenerateImage call (default 0)
  speech_chunk_time_s:<s>  stream speech (TTSStream, a chunk per word), sleeping this long before each chunk;
                           unset, the simulator does not stream speech (TTSStream is UNIMPLEMENTED), as many
                           real backends do not

Fault injection (tests of circuit breakers and retries): with CORRAL_SIMULATOR_FAULT_DIR set in the backend's
environment (a worker passes its own on), while a file named after the backend's pid exists in that directory,
every Predict, PredictStream and Embedding fails with the gRPC status the file names (e.g. INTERNAL; empty:
UNAVAILABLE), as a sick replica would; Health still answers. An environment variable, not an option: options
may name files only under the worker's models directory.

KV cache (like vLLM's automatic prefix caching): a request's tokens (the prompt's words, then the
generated words, so the next turn of a conversation finds its history) are stored in blocks of
`kv_block_tokens`, each named by its whole prefix. A prompt's leading blocks found in the cache are
not prefilled: time to first token = prompt_token_time_s × uncached prompt tokens.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from corral.backends.engine import (
    DEFAULT_MAX_TOKENS_SIMULATOR,
    EngineError,
    InvalidRequestError,
    LoadError,
    check_prompt_fits,
    final_reply,
    piece_reply,
    requested_max_tokens,
)
from corral.backends.options import OptionError, option_float, option_int, parse_options, unknown_options
from corral.backends.simulator_media import SimulatedMedia
from corral.backends.simulator_tools import requested_calls, tool_results_answer
from corral.proto import backend_pb2 as pb

log = logging.getLogger(__name__)

KNOWN_OPTIONS = (
    "load_time_s",
    "load_fail",
    "prompt_token_time_s",
    "output_token_time_s",
    "embedding_dim",
    "kv_cache_tokens",
    "kv_block_tokens",
    "prefill_concurrency",
    "parallel",
    "n_parallel",
    "media_time_s",
    "speech_chunk_time_s",
)
FAULT_DIR_ENV = "CORRAL_SIMULATOR_FAULT_DIR"
DEFAULT_KV_BLOCK_TOKENS = 16
DEFAULT_EMBEDDING_DIM = 384
VOCAB_SIZE = 32000

_WORDS = (
    "alpine amber anchor apple arrow atlas autumn badge bamboo basin beacon bison blossom breeze "
    "bridge brook cactus canyon cedar cello cinder clover comet coral cosmos crane crystal dawn delta "
    "desert dune eagle echo ember falcon fern fjord flint forest fossil garnet geyser glacier granite "
    "harbor hazel heron horizon iris island ivory jasper juniper kelp lagoon lantern lark lava lemon "
    "lily lotus lunar maple marble meadow mesa meteor mint moss nebula nectar oasis ocean olive onyx "
    "orbit orchid otter pebble pepper pine planet prairie quartz quill raven reef ridge river "
    "saffron sage sierra silver sparrow spruce summit tide timber topaz tundra valley velvet willow"
).split()


@dataclass(frozen=True)
class SimulatorSettings:
    load_time_s: float = 0.0
    load_fail: str = ""
    prompt_token_time_s: float = 0.0
    output_token_time_s: float = 0.0
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    kv_cache_tokens: int = 0
    kv_block_tokens: int = DEFAULT_KV_BLOCK_TOKENS
    prefill_concurrency: int = 0
    parallel: int = 1
    media_time_s: float = 0.0
    speech_chunk_time_s: float | None = None  # None: speech is not streamed

    @classmethod
    def from_options(cls, entries: list[str]) -> SimulatorSettings:
        options = parse_options(entries)
        ignored = unknown_options(options, KNOWN_OPTIONS)
        if ignored:
            log.info("simulator ignores options %s (known: %s)", ", ".join(ignored), ", ".join(KNOWN_OPTIONS))
        return cls(
            load_time_s=option_float(options, "load_time_s", 0.0),
            load_fail=options.get("load_fail", ""),
            prompt_token_time_s=option_float(options, "prompt_token_time_s", 0.0),
            output_token_time_s=option_float(options, "output_token_time_s", 0.0),
            embedding_dim=option_int(options, "embedding_dim", DEFAULT_EMBEDDING_DIM, min_value=1),
            kv_cache_tokens=option_int(options, "kv_cache_tokens", 0),
            kv_block_tokens=option_int(options, "kv_block_tokens", DEFAULT_KV_BLOCK_TOKENS, min_value=1),
            prefill_concurrency=option_int(options, "prefill_concurrency", 0),
            parallel=option_int(
                options,
                "parallel" if options.get("parallel", "") != "" else "n_parallel",
                1,
                min_value=1,
            ),
            media_time_s=option_float(options, "media_time_s", 0.0),
            speech_chunk_time_s=(
                None
                if options.get("speech_chunk_time_s", "") == ""
                else option_float(options, "speech_chunk_time_s", 0.0)
            ),
        )


class SimulatedFault(EngineError):
    """A call failed on purpose (CORRAL_SIMULATOR_FAULT_DIR): remove the fault file to make the replica healthy again."""

    def __init__(self, message: str, status: grpc.StatusCode) -> None:
        super().__init__(message)
        self.status = status


def injected_fault(fault_dir: str) -> SimulatedFault | None:
    """The fault this process is told to fail with (a file named after its pid in `fault_dir`), if any."""
    path = Path(fault_dir) / str(os.getpid())
    try:
        name = path.read_text().strip() or "UNAVAILABLE"
    except FileNotFoundError:
        return None
    status = getattr(grpc.StatusCode, name, grpc.StatusCode.UNAVAILABLE)
    return SimulatedFault(f"simulated fault: {path} says {status.name}", status)


class KVCache:
    """Prefix blocks of token sequences, bounded in tokens, least recently used evicted (thread-safe)."""

    def __init__(self, capacity_tokens: int, block_tokens: int = DEFAULT_KV_BLOCK_TOKENS) -> None:
        self.block_tokens = block_tokens
        self.max_blocks = capacity_tokens // block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._blocks)

    def _chain(self, tokens: Sequence[str]) -> list[int]:
        size, chain, previous = self.block_tokens, [], 0
        for start in range(0, len(tokens) - size + 1, size):
            previous = hash((previous, tuple(tokens[start : start + size])))
            chain.append(previous)
        return chain

    def cached(self, tokens: Sequence[str]) -> int:
        """How many leading tokens are cached (whole blocks); the blocks used become most recent."""
        hits = 0
        with self._lock:
            for block in self._chain(tokens):
                if block not in self._blocks:
                    break
                self._blocks.move_to_end(block)
                hits += 1
        return hits * self.block_tokens

    def store(self, tokens: Sequence[str]) -> None:
        """Keep every whole block of `tokens`, evicting the least recently used beyond capacity."""
        with self._lock:
            for block in self._chain(tokens):
                self._blocks[block] = None
                self._blocks.move_to_end(block)
            while len(self._blocks) > self.max_blocks:
                self._blocks.popitem(last=False)


def count_words(text: str) -> int:
    return len(text.split())


def token_words(ids: Sequence[int]) -> str:
    """Token ids as the simulator's words (`#<id>`)."""
    return " ".join(f"#{token}" for token in ids)


def prompt_text(req: pb.PredictOptions) -> str:
    """What the simulator treats as the prompt: the message contents (chat), `Prompt`, or its token ids."""
    if req.Messages:
        return "\n".join(f"{m.role}: {m.content}" for m in req.Messages)
    return req.Prompt or token_words(req.EmbeddingTokens)


def prompt_tokens(req: pb.PredictOptions) -> list[str]:
    """The prompt as tokens (words): every message's content in order, or the prompt."""
    if req.Messages:
        return [word for message in req.Messages for word in message.content.split()]
    return prompt_text(req).split()


def simulated_words(model: str, prompt: str, count: int) -> list[str]:
    """`count` words chosen by a hash of (model, prompt): same inputs, same words."""
    stream = hashlib.shake_256(f"{model}\0{prompt}".encode()).digest(2 * count)
    return [_WORDS[int.from_bytes(stream[2 * i : 2 * i + 2], "little") % len(_WORDS)] for i in range(count)]


def simulated_embedding(model: str, text: str, dim: int) -> list[float]:
    """A deterministic unit vector derived from a hash of (model, text)."""
    raw = hashlib.shake_256(f"{model}\0{text}".encode()).digest(2 * dim)
    values = [(v / 32767.5) - 1.0 for v in struct.unpack(f"<{dim}H", raw)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def word_token_id(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % VOCAB_SIZE


class SimulatorEngine(SimulatedMedia):
    """Deterministic fake model; see the module docstring for its options."""

    name = "simulator"

    def __init__(self) -> None:
        self._model = ""
        self._context_tokens = 0  # ModelOptions.ContextSize; 0: no limit
        self._settings = SimulatorSettings()
        self._loaded = False
        self.kv_cache: KVCache | None = None
        self._prefill_slots: threading.Semaphore | None = None
        self._fault_dir = os.environ.get(FAULT_DIR_ENV, "")

    @property
    def settings(self) -> SimulatorSettings:
        return self._settings

    @property
    def parallel(self) -> int:
        """Requests served at once (option `parallel`); the servicer admits this many."""
        return self._settings.parallel if self._loaded else 1

    @property
    def blocks(self) -> bool:
        """Whether a call may sleep: with zero simulated time it runs inline, without a thread hop."""
        return (
            not self._loaded
            or self._settings.prompt_token_time_s > 0
            or self._settings.output_token_time_s > 0
        )

    def load(self, opts: pb.ModelOptions) -> None:
        try:
            settings = SimulatorSettings.from_options(list(opts.Options))
        except OptionError as exc:
            raise LoadError(str(exc)) from None
        if settings.load_time_s > 0:
            time.sleep(settings.load_time_s)
        if settings.load_fail:
            raise LoadError(settings.load_fail)
        self._model = opts.Model or opts.ModelFile
        self._context_tokens = max(opts.ContextSize, 0)
        self._settings = settings
        self.kv_cache = (
            KVCache(settings.kv_cache_tokens, settings.kv_block_tokens) if settings.kv_cache_tokens else None
        )
        self._prefill_slots = (
            threading.Semaphore(settings.prefill_concurrency) if settings.prefill_concurrency else None
        )
        self._loaded = True

    def predict(self, req: pb.PredictOptions) -> pb.Reply:
        replies = list(self.predict_stream(req))
        final = replies[-1]
        final.message = b"".join(reply.message for reply in replies[:-1])
        calls = [call for reply in replies[:-1] for delta in reply.chat_deltas for call in delta.tool_calls]
        if calls:
            final.chat_deltas.append(pb.ChatDelta(tool_calls=calls))
        return final

    def _check_fault(self) -> None:
        if self._fault_dir and (fault := injected_fault(self._fault_dir)) is not None:
            raise fault

    def predict_stream(self, req: pb.PredictOptions) -> Iterator[pb.Reply]:
        self._check_fault()
        if not req.Prompt and not req.Messages and not req.EmbeddingTokens:
            raise InvalidRequestError(
                "PredictOptions needs a Prompt (or its token ids in EmbeddingTokens) or Messages"
            )
        max_tokens = requested_max_tokens(req, DEFAULT_MAX_TOKENS_SIMULATOR)
        tokens = prompt_tokens(req)
        if self._context_tokens:
            check_prompt_fits(len(tokens), self._context_tokens)
        if req.Tools:  # the deterministic tool-call mode (simulator_tools.py)
            calls = requested_calls(req)
            if calls:
                return self._tool_calls(calls, tokens)
        answer = tool_results_answer(req) if req.Messages else None
        if answer is not None:
            return self._stream(answer.split(" "), tokens)
        words = simulated_words(self._model, prompt_text(req), max_tokens)
        return self._stream(words, tokens)

    def _tool_calls(self, calls: list[pb.ToolCallDelta], tokens: list[str]) -> Iterator[pb.Reply]:
        started = time.perf_counter()
        self._prefill(tokens)
        first_token_at = time.perf_counter()
        yield pb.Reply(chat_deltas=[pb.ChatDelta(tool_calls=calls)])
        yield final_reply(
            tokens=len(calls),
            prompt_tokens=len(tokens),
            prompt_time_s=first_token_at - started,
            generation_time_s=time.perf_counter() - first_token_at,
        )

    def _prefill(self, tokens: list[str]) -> None:
        cache, slots = self.kv_cache, self._prefill_slots
        uncached = len(tokens) - (cache.cached(tokens) if cache is not None else 0)
        if slots is not None:
            slots.acquire()
        try:
            _sleep(self._settings.prompt_token_time_s * uncached)
        finally:
            if slots is not None:
                slots.release()
        if cache is not None:
            cache.store(tokens)

    def _stream(self, words: list[str], tokens: list[str]) -> Iterator[pb.Reply]:
        started = time.perf_counter()
        n_prompt = len(tokens)
        self._prefill(tokens)
        first_token_at = time.perf_counter()
        for index, word in enumerate(words):
            _sleep(self._settings.output_token_time_s)
            yield piece_reply(word if index == 0 else f" {word}")
        if self.kv_cache is not None:
            self.kv_cache.store(tokens + words)
        finished = time.perf_counter()
        yield final_reply(
            tokens=len(words),
            prompt_tokens=n_prompt,
            prompt_time_s=first_token_at - started,
            generation_time_s=finished - first_token_at,
        )

    def embed(self, req: pb.PredictOptions) -> pb.EmbeddingResult:
        self._check_fault()
        text = req.Embeddings or req.Prompt or token_words(req.EmbeddingTokens)
        if not text:
            raise InvalidRequestError(
                "Embedding needs the text in PredictOptions.Embeddings (or its token ids in EmbeddingTokens)"
            )
        n_tokens = count_words(text)
        if self._context_tokens:
            check_prompt_fits(n_tokens, self._context_tokens, generating=False)
        vector = simulated_embedding(self._model, text, self._settings.embedding_dim)
        return pb.EmbeddingResult(
            embeddings=vector,
            dim=len(vector),
            tokens=n_tokens,
            prompt_tokens=n_tokens,
            layout=pb.EMBEDDING_LAYOUT_FINAL,
        )

    def tokenize(self, req: pb.PredictOptions) -> pb.TokenizationResponse:
        if req.Messages:
            words = [word for message in req.Messages for word in message.content.split()]
        else:
            words = req.Prompt.split()
        ids = [word_token_id(word) for word in words]
        return pb.TokenizationResponse(length=len(ids), tokens=ids)

    def free(self) -> None:
        self._model = ""
        self._loaded = False


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)
