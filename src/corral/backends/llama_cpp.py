"""Engine on llama-cpp-python: GGUF models, completion, chat (template), streaming, embeddings.

LoadModel fields used: `ModelFile` (absolute path; if empty `ModelPath`/`Model`), `MMProj` (a projector: the
model reads images, llama_vision.py), `ContextSize`
(0 = the model's training context, capped at 4096), `Threads` (0 = all CPUs), `Embeddings`,
`Seed`, `NGPULayers`, `NBatch` (0 = 512; for embeddings and reranking also the micro-batch, so the longest
input), `MLock`, `FlashAttention`, `Reranking` (a cross-encoder GGUF
served by Rerank with llama.cpp's rank pooling, llama_rerank.py).
Options: `chat_format:<name>` (built-in template for models without one), `parallel:<n>` (or `n_parallel:<n>`, the
reference's names; default `LLAMACPP_PARALLEL` from the environment, else 1: up to n requests decoded together with
continuous batching in one context, each with its own `context_size` window, llama_parallel.py; requests asking
for logprobs or carrying images, embeddings and reranking take the whole context, one at a time) and
`cache_prompt:true|exact|false` (llama_prompt_cache.py): `true`, the default, keeps the cells of the prefix the
last request left (prompt and generated tokens; with parallel > 1 the cells a slot kept, except for a model with
sliding-window attention such as Gemma 3, whose slots evaluate each prompt whole), fastest, though a greedy answer
may differ with what ran before, as with llama.cpp's server; `exact` (parallel 1) keeps only whole chunks a fresh
evaluation computes alike, so a greedy answer never depends on what ran before; `false` evaluates each prompt whole.
Generation uses our own token loop (not `create_completion`) so that token counts are exact
and streamed pieces never contain part of a stop string or a broken UTF-8 sequence.
A prompt may come as token ids (`EmbeddingTokens`, the reference's field for Embedding, read by
Predict too when `Prompt` is empty); each Reply carries the logprobs of its text's tokens when
`Logprobs` > 0 (llama_logprobs.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import Llama

from corral.backends.engine import (
    DEFAULT_MAX_TOKENS_LLAMA,
    ContextLengthError,
    InvalidRequestError,
    LoadError,
    NotSupportedError,
    check_prompt_fits,
    final_reply,
    piece_reply,
)
from corral.backends.llama_chat import ChatFormatter, embedded_formatter, named_formatter, render_chat
from corral.backends.llama_generate import GRAMMARS, GenerationRequest, generate_pieces, sampling_from_request
from corral.backends.llama_log import captured_llama_log
from corral.backends.llama_logprobs import LogprobRecorder, check_token_ids
from corral.backends.llama_parallel import BatchLoop, SequenceRequest, sequences_in_context
from corral.backends.llama_prompt_cache import PromptCache, chat_head
from corral.backends.llama_rerank import PairFormat, check_reranker_file
from corral.backends.llama_rerank import rerank as rerank_pairs
from corral.backends.llama_tools import call_replies, requested_tools
from corral.backends.llama_vision import VisionProjector, load_projector
from corral.backends.model_root import models_root_from_env, path_outside_root
from corral.backends.options import OptionError, option_bool, option_int, parse_options, unknown_options
from corral.grammar.tool_calls import CallScanner, ToolMode
from corral.models.gguf_header import GGUFHeaderError, read_gguf_header
from corral.proto import backend_pb2 as pb
from corral.proto.replies import merged_logprobs

log = logging.getLogger(__name__)
_GRAMMAR_LOCK = threading.Lock()

KNOWN_OPTIONS = ("chat_format", "cache_prompt", "parallel", "n_parallel")
PARALLEL_ENV = "LLAMACPP_PARALLEL"  # the reference's process-wide default for `parallel`
MAX_DEFAULT_CONTEXT_TOKENS = 4096
DEFAULT_BATCH_TOKENS = 512


def resolve_model_file(opts: pb.ModelOptions) -> Path:
    """`ModelFile` if set (relative paths are under `ModelPath`), else `ModelPath/Model`."""
    if opts.ModelFile:
        path = Path(opts.ModelFile)
        if not path.is_absolute() and opts.ModelPath:
            path = Path(opts.ModelPath) / path
    elif opts.Model:
        path = Path(opts.ModelPath or ".") / opts.Model
    else:
        raise LoadError("LoadModel needs ModelOptions.ModelFile (absolute path to a .gguf file)")
    root = models_root_from_env()
    problem = path_outside_root(path, root) if root is not None else None
    if problem is not None:
        raise LoadError(problem)
    if not path.is_file():
        what = "is a directory, not a .gguf file" if path.is_dir() else "does not exist"
        raise LoadError(
            f"model file {path} {what} (ModelFile={opts.ModelFile!r}, ModelPath={opts.ModelPath!r}, "
            f"Model={opts.Model!r})"
        )
    return path


def _check_embedding_fits(llm: Llama, n_tokens: int) -> None:
    """One input is embedded in one batch (`n_batch`, at most the context); llama-cpp-python would cut a
    longer one silently."""
    if n_tokens > llm.n_batch:
        raise ContextLengthError(
            f"the input is {n_tokens} tokens but this model embeds at most {llm.n_batch} in one input "
            f"(its batch size; context window {llm.n_ctx()}); shorten the input"
        )


def _embed_token_ids(llm: Llama, ids: list[int]) -> tuple[Any, int]:
    """`Llama.embed` of these token ids as they are: it tokenizes its text input, so for this one call the
    tokenizer answers `ids` (engine calls are serialised: nothing else tokenizes meanwhile)."""
    _check_embedding_fits(llm, len(ids))
    llm.tokenize = lambda *_args, **_kwargs: ids  # type: ignore[method-assign]
    try:
        return llm.embed("", normalize=True, return_count=True)  # type: ignore[no-any-return]
    finally:
        del llm.tokenize


def _slots_reuse_safely(llm: Llama, path: Path) -> bool:
    """False for a sliding-window-attention model: parallel slots would keep cells computed beside other
    sequences, and Gemma 3's greedy answers moved with them, so such a model's slots evaluate each prompt whole."""
    window: int = llama_cpp.llama_model_n_swa(llm.model)
    if window > 0:
        log.info(
            "%s uses sliding-window attention (%d tokens): its parallel slots evaluate each prompt whole",
            path.name,
            window,
        )
    return window <= 0


def _cache_prompt_mode(options: dict[str, str]) -> str:
    """`cache_prompt`: exact, or a true/false word (default true)."""
    if options.get("cache_prompt", "").strip().lower() == "exact":
        return "exact"
    try:
        return "true" if option_bool(options, "cache_prompt", True) else "false"
    except OptionError:
        raise OptionError(
            f"option cache_prompt must be true, exact or false, got {options['cache_prompt']!r}"
        ) from None


def _reuses_cells(llm: Llama) -> bool:
    """A recurrent or hybrid model's memory cannot drop the tail of a sequence: it evaluates each prompt whole."""
    return not (llama_cpp.llama_model_is_recurrent(llm.model) or llama_cpp.llama_model_is_hybrid(llm.model))


def _chat_head(llm: Llama, formatter: ChatFormatter | None) -> list[int]:
    """The tokens every chat the model's template renders begins with ([] without a template)."""
    if formatter is None:
        return []
    rendered = []
    for content in ("a", "b", "Hello.", "1"):
        messages = [pb.Message(role="user", content=content)]
        try:
            chat = render_chat(formatter, pb.PredictOptions(Messages=messages, UseTokenizerTemplate=True))
        except InvalidRequestError:
            return []
        rendered.append((chat.text, chat.add_bos))
    return chat_head(llm, rendered)


def requested_parallel(options: dict[str, str]) -> int:
    """`parallel` (or `n_parallel`) from the options, else `LLAMACPP_PARALLEL`, else 1; at most llama.cpp's
    limit of sequences in one context."""
    key = next((name for name in ("parallel", "n_parallel") if options.get(name, "") != ""), "")
    if key:
        parallel = option_int(options, key, 1, min_value=1)
    else:
        key = "parallel"
        try:
            parallel = option_int({key: os.environ.get(PARALLEL_ENV, "")}, key, 1, min_value=1)
        except OptionError as exc:
            raise OptionError(f"{exc} (from the environment variable {PARALLEL_ENV})") from None
    most = int(llama_cpp.llama_max_parallel_sequences())
    if parallel > most:
        raise OptionError(f"option {key} must be <= {most} (llama.cpp's limit of sequences in one context)")
    return parallel


def default_context_tokens(path: Path) -> int:
    """The GGUF's `<arch>.context_length`, capped at 4096 (4096 if it cannot be read)."""
    try:
        arch = read_gguf_header(path, ("general.architecture",)).str_field("general.architecture")
        key = f"{arch}.context_length"
        trained = read_gguf_header(path, ("general.architecture", key)).int_field(key) if arch else None
    except (OSError, GGUFHeaderError) as exc:  # llama.cpp reports unreadable files itself
        log.debug("could not read context length from %s: %s", path, exc)
        return MAX_DEFAULT_CONTEXT_TOKENS
    return min(trained, MAX_DEFAULT_CONTEXT_TOKENS) if trained and trained > 0 else MAX_DEFAULT_CONTEXT_TOKENS


class LlamaCppEngine:
    name = "llama-cpp"

    def __init__(self) -> None:
        self._llm: Llama | None = None
        self._formatter: ChatFormatter | None = None
        self._embeddings = False
        self._seed = 0
        self._prompts: PromptCache | None = None  # the single-sequence path's prompt evaluation
        self._model_label = ""
        self._projector: VisionProjector | None = None
        self._pair_format: PairFormat | None = None  # loaded for reranking
        self._batcher: BatchLoop | None = None  # parallel > 1: the sequences decoded together
        self._window = 0  # parallel > 1: the context positions of one sequence
        self.parallel = 1  # requests served at once (the servicer admits this many)

    def load(self, opts: pb.ModelOptions) -> None:
        path = resolve_model_file(opts)
        try:
            options = parse_options(opts.Options)
            cache_prompt = _cache_prompt_mode(options)
            parallel = requested_parallel(options)
        except OptionError as exc:
            raise LoadError(str(exc)) from None
        ignored = unknown_options(options, KNOWN_OPTIONS)
        if ignored:
            log.info("llama-cpp ignores options %s (known: %s)", ", ".join(ignored), ", ".join(KNOWN_OPTIONS))
        formatter = named_formatter(options["chat_format"]) if options.get("chat_format") else None
        n_ctx = opts.ContextSize if opts.ContextSize > 0 else default_context_tokens(path)
        n_threads = opts.Threads if opts.Threads > 0 else (os.cpu_count() or 1)
        n_batch = opts.NBatch if opts.NBatch > 0 else DEFAULT_BATCH_TOKENS
        if opts.Reranking:
            check_reranker_file(path)
            if parallel > 1:
                log.warning(
                    "%s: parallel:%d does not apply to a reranking model; it scores one call at a time",
                    path.name,
                    parallel,
                )
                parallel = 1
        window = n_ctx
        if parallel > 1:  # one window per sequence; each step holds a token of every sequence at least
            n_ctx, n_batch = window * parallel, max(n_batch, parallel)
        with (
            captured_llama_log() as llama_log,
            sequences_in_context(parallel) if parallel > 1 else contextlib.nullcontext(),
        ):
            try:
                llm = Llama(
                    model_path=str(path),
                    n_ctx=n_ctx,
                    n_batch=n_batch,
                    # a non-causal model (BERT) evaluates an input in one micro-batch: let it be the whole batch
                    n_ubatch=n_batch if opts.Embeddings or opts.Reranking else DEFAULT_BATCH_TOKENS,
                    n_threads=n_threads,
                    n_threads_batch=n_threads,
                    n_gpu_layers=opts.NGPULayers,
                    seed=opts.Seed if opts.Seed > 0 else llama_cpp.LLAMA_DEFAULT_SEED,
                    embedding=opts.Embeddings or opts.Reranking,
                    pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK
                    if opts.Reranking
                    else llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED,
                    use_mmap=True,
                    use_mlock=opts.MLock,
                    flash_attn=opts.FlashAttention.lower() in ("on", "true", "1", "yes"),
                    verbose=False,
                )
            except Exception as exc:
                cause = llama_log.error_summary() or str(exc)
                raise LoadError(f"llama.cpp could not load {path}: {cause}") from None
        try:
            self._formatter = formatter or embedded_formatter(llm)
            with captured_llama_log() as projector_log:
                try:
                    self._projector = load_projector(llm, opts.MMProj, use_gpu=opts.NGPULayers != 0)
                except LoadError as exc:
                    cause = projector_log.error_summary()
                    raise LoadError(f"{exc}{': ' + cause if cause else ''}") from None
            self._pair_format = PairFormat.of(llm) if opts.Reranking else None
        except LoadError:
            llm.close()
            raise
        mode = cache_prompt if _reuses_cells(llm) else "false"
        # with parallel > 1 the single-sequence path takes a context other sequences used: it evaluates whole
        self._prompts = PromptCache(
            llm, _chat_head(llm, self._formatter), mode=mode if parallel == 1 else "false"
        )
        slots_reuse = mode == "true" and _slots_reuse_safely(llm, path)  # slots cannot keep cells exactly
        self._batcher = BatchLoop(llm, parallel, reuse_prefix=slots_reuse) if parallel > 1 else None
        self.parallel, self._window = parallel, window
        self._llm, self._embeddings, self._seed = llm, opts.Embeddings, max(opts.Seed, 0)
        self._model_label = opts.Model or path.name
        log.info(
            "llama.cpp loaded %s: n_ctx=%d parallel=%d threads=%d embeddings=%s reranking=%s chat=%s",
            path,
            llm.n_ctx(),
            parallel,
            n_threads,
            opts.Embeddings,
            opts.Reranking,
            options.get("chat_format") or ("embedded template" if self._formatter else "none"),
        )

    @property
    def reused_prompt_tokens(self) -> int:
        """Prompt tokens found in the KV cells and not evaluated again (the single path's and the parallel slots')."""
        slots = self._batcher.reused if self._batcher is not None else 0
        return slots + (self._prompts.reused if self._prompts is not None else 0)

    def _forget_prompt(self) -> None:
        """Another use of the context follows: the cells hold nothing a later prompt may keep."""
        if self._prompts is not None:
            self._prompts.forget()

    def _loaded(self) -> Llama:
        if self._llm is None:
            raise NotSupportedError("llama-cpp backend: model not loaded")
        return self._llm

    def _prompt(
        self, llm: Llama, req: pb.PredictOptions, mode: ToolMode | None
    ) -> tuple[list[int], tuple[str, ...]]:
        """Prompt tokens and template stop strings for a request (`mode`: how it may call tools)."""
        if req.Videos or req.Audios:
            raise InvalidRequestError("the llama-cpp backend reads no video or audio; drop Videos/Audios")
        if req.Images and self._projector is None:
            raise InvalidRequestError(
                f"model {self._model_label!r} reads no images: it was loaded without a projector "
                "(set mmproj: in its model config); drop Images"
            )
        if req.UseTokenizerTemplate and req.Messages:
            if self._formatter is None:
                raise NotSupportedError(
                    f"model {self._model_label!r} has no chat template; load it with option "
                    "chat_format:<name> (e.g. chatml, gemma, llama-2) or send a plain Prompt"
                )
            chat = render_chat(self._formatter, req, mode)
            return self._tokens(llm, chat.text, chat.add_bos, req), chat.stop
        if req.Prompt:
            return self._tokens(llm, req.Prompt, True, req), ()
        if req.EmbeddingTokens:  # a prompt of token ids, taken as they are
            return check_token_ids(req.EmbeddingTokens, llm.n_vocab(), "the prompt (EmbeddingTokens)"), ()
        raise InvalidRequestError(
            "PredictOptions needs a Prompt (or its token ids in EmbeddingTokens), or Messages "
            "with UseTokenizerTemplate=true"
        )

    def _tokens(self, llm: Llama, text: str, add_bos: bool, req: pb.PredictOptions) -> list[int]:
        """The prompt's tokens; with images, the prompt is evaluated here (llama_vision.py)."""
        if req.Images and self._projector is not None:
            self._forget_prompt()  # the projector evaluates from position 0
            return self._projector.evaluate(llm, text, add_bos, list(req.Images))
        return llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def predict_stream(self, req: pb.PredictOptions) -> Iterator[pb.Reply]:
        llm = self._loaded()
        if self._pair_format is not None:
            raise NotSupportedError(
                f"model {self._model_label!r} was loaded for reranking: it scores (query, document) "
                "pairs and generates no text; use /v1/rerank"
            )
        batcher = self._batcher
        if batcher is None:
            return self._single_stream(llm, req)
        if req.Logprobs > 0 or req.Images:  # read the context's logits / evaluate into it: the whole context
            return self._exclusive_stream(batcher, llm, req)
        return self._batched_stream(batcher, llm, req)

    def _single_stream(self, llm: Llama, req: pb.PredictOptions) -> Iterator[pb.Reply]:
        """One sequence through `Llama.generate` (the only path when parallel is 1)."""
        mode, tool_grammar = requested_tools(req)
        prompt_tokens, template_stops = self._prompt(llm, req, mode)
        sampling = sampling_from_request(req, DEFAULT_MAX_TOKENS_LLAMA, llm.n_vocab())
        if tool_grammar:
            sampling = dataclasses.replace(sampling, grammar=tool_grammar)
        if self._batcher is not None:  # the context is split: this sequence has one window of it
            check_prompt_fits(len(prompt_tokens), self._window)
            sampling = dataclasses.replace(
                sampling, max_tokens=min(sampling.max_tokens, self._window - len(prompt_tokens))
            )
        generation = GenerationRequest(
            prompt_tokens=prompt_tokens,
            sampling=sampling,
            stops=tuple(req.StopPrompts) + template_stops,
            seed=req.Seed if req.Seed > 0 else (self._seed or random.getrandbits(32)),
            prompt_cache=None if req.Images else self._prompts,  # with images: evaluated just now
            logprobs=LogprobRecorder(llm, req.TopLogprobs) if req.Logprobs > 0 else None,
        )
        scanner = CallScanner(mode.text_allowed) if mode is not None else None
        return self._stream(generate_pieces(llm, generation), generation, scanner)

    def _exclusive_stream(self, batcher: BatchLoop, llm: Llama, req: pb.PredictOptions) -> Iterator[pb.Reply]:
        """The single-sequence path with the whole context, taken when first iterated (so a stream never started
        holds nothing); its errors come from the iteration."""
        with batcher.exclusive():
            yield from self._single_stream(llm, req)

    def _batched_stream(self, batcher: BatchLoop, llm: Llama, req: pb.PredictOptions) -> Iterator[pb.Reply]:
        """A sequence decoded beside the others (llama_parallel.py); validated here, submitted when iterated."""
        mode, tool_grammar = requested_tools(req)
        prompt_tokens, template_stops = self._prompt(llm, req, mode)
        sampling = sampling_from_request(req, DEFAULT_MAX_TOKENS_LLAMA, llm.n_vocab())
        if tool_grammar:
            sampling = dataclasses.replace(sampling, grammar=tool_grammar)
        check_prompt_fits(len(prompt_tokens), self._window)
        with _GRAMMAR_LOCK:  # callers' threads validate at once; the cache is an OrderedDict
            grammar = GRAMMARS.get(llm, sampling.grammar)
        request = SequenceRequest(
            prompt=prompt_tokens,
            sampling=sampling,
            grammar=grammar,
            stops=tuple(req.StopPrompts) + template_stops,
            seed=req.Seed if req.Seed > 0 else (self._seed or random.getrandbits(32)),
            budget=min(sampling.max_tokens, self._window - len(prompt_tokens)),
        )
        generation = GenerationRequest(
            prompt_tokens=prompt_tokens,
            sampling=sampling,
            stops=request.stops,
            seed=request.seed,
            stats=request.stats,
        )
        scanner = CallScanner(mode.text_allowed) if mode is not None else None
        return self._stream(batcher.pieces(request), generation, scanner)

    def _stream(
        self, pieces: Iterator[str], generation: GenerationRequest, scanner: CallScanner | None
    ) -> Iterator[pb.Reply]:
        """Replies of the generated pieces; with tools, `scanner` turns call text into tool-call deltas."""
        recorder = generation.logprobs
        try:
            for piece in pieces:
                for reply in (
                    call_replies(scanner.feed(piece)) if scanner is not None else [piece_reply(piece)]
                ):
                    if recorder is not None:
                        reply.logprobs = recorder.take()
                    yield reply
        finally:
            pieces.close()  # type: ignore[attr-defined]  # a generator: stops the token loop now
        if scanner is not None:
            yield from call_replies(scanner.finish())
        stats = generation.stats
        final = final_reply(
            tokens=stats.completion_tokens,
            prompt_tokens=stats.prompt_tokens,
            prompt_time_s=stats.prompt_time_s,
            generation_time_s=stats.generation_time_s,
        )
        if recorder is not None:
            final.logprobs = (
                recorder.take()
            )  # tokens whose text never came out (an unfinished UTF-8 sequence)
        yield final

    def predict(self, req: pb.PredictOptions) -> pb.Reply:
        replies = list(self.predict_stream(req))
        final = replies[-1]
        final.message = b"".join(reply.message for reply in replies[:-1])
        if req.Logprobs > 0:
            final.logprobs = merged_logprobs([reply.logprobs for reply in replies])
        return final

    def _whole_context(self) -> contextlib.AbstractContextManager[None]:
        """With parallel > 1, the context to itself (no sequence decoding); else nothing to wait for."""
        return self._batcher.exclusive() if self._batcher is not None else contextlib.nullcontext()

    def embed(self, req: pb.PredictOptions) -> pb.EmbeddingResult:
        self._forget_prompt()  # embedding clears the cells
        with self._whole_context():
            return self._embed(req)

    def _embed(self, req: pb.PredictOptions) -> pb.EmbeddingResult:
        llm = self._loaded()
        if self._pair_format is not None:
            raise NotSupportedError(
                f"model {self._model_label!r} was loaded for reranking: its output is a relevance "
                "score, not an embedding; use /v1/rerank, or drop reranking: true"
            )
        if not self._embeddings:
            raise NotSupportedError(
                f"model {self._model_label!r} was loaded without embeddings; set embeddings: true in its "
                "model config (ModelOptions.Embeddings=true) and load it again"
            )
        text = req.Embeddings or req.Prompt
        if text:
            _check_embedding_fits(llm, len(llm.tokenize(text.encode("utf-8"))))
            vector, n_tokens = llm.embed(text, normalize=True, return_count=True)
        elif req.EmbeddingTokens:
            vector, n_tokens = _embed_token_ids(
                llm, check_token_ids(req.EmbeddingTokens, llm.n_vocab(), "EmbeddingTokens")
            )
        else:
            raise InvalidRequestError(
                "Embedding needs the text in PredictOptions.Embeddings (or its token ids in EmbeddingTokens)"
            )
        layout = pb.EMBEDDING_LAYOUT_FINAL
        if vector and isinstance(vector[0], list):  # pooling NONE: one vector per token
            vector, layout = [value for row in vector for value in row], pb.EMBEDDING_LAYOUT_PER_TOKEN
        return pb.EmbeddingResult(
            embeddings=vector,
            dim=llm.n_embd(),
            tokens=n_tokens,
            prompt_tokens=n_tokens,
            layout=layout,
        )

    def rerank(self, req: pb.RerankRequest) -> pb.RerankResult:
        llm = self._loaded()
        if self._pair_format is None:
            raise NotSupportedError(
                f"model {self._model_label!r} was loaded without reranking; set reranking: true in its model config "
                "(ModelOptions.Reranking=true, a cross-encoder GGUF) and load it again"
            )
        self._forget_prompt()
        with self._whole_context():
            return rerank_pairs(llm, self._pair_format, req)

    def tokenize(self, req: pb.PredictOptions) -> pb.TokenizationResponse:
        llm = self._loaded()
        ids = llm.tokenize(req.Prompt.encode("utf-8"), add_bos=False, special=True) if req.Prompt else []
        return pb.TokenizationResponse(length=len(ids), tokens=ids)

    def free(self) -> None:
        batcher, self._batcher, self.parallel = self._batcher, None, 1
        if batcher is not None:
            batcher.close()  # before the context it decodes in
        llm, self._llm, self._formatter, self._pair_format = self._llm, None, None, None
        self._prompts = None
        projector, self._projector = self._projector, None
        if projector is not None:
            projector.close()  # before the model it was built on
        if llm is not None:
            llm.close()
