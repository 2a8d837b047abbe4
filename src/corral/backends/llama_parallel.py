"""Continuous batching for the llama-cpp engine: up to `parallel` sequences decoded together in one context.

The reference's llama.cpp backend reads `parallel` (or `n_parallel`) from a model's `options:` and runs that many
slots with continuous batching; this is the same thing on llama-cpp-python's low-level API:

* The context is created with `n_seq_max = parallel` and a KV cache split per sequence (`kv_unified` off): each
  slot has `context_size` cells of its own, so the total `n_ctx` is `context_size x parallel` and a request sees
  the same window whatever `parallel` is (llama.cpp's server splits one `--ctx-size` between its slots instead).
  Split, a sequence's cells sit where they would if it ran alone, so its attention sums in the same order and a
  greedy answer does not depend on what runs beside it; one shared cache measured ~20% faster per 4-sequence step
  here (CPU) but placed a sequence's cells among the others' and changed greedy answers.
* One thread (`BatchLoop`) owns the context. Each step it builds one `llama_batch` holding the next token of every
  running sequence and chunks of the prompts of newly admitted ones (up to `n_batch` tokens in all), calls
  `llama_decode` once, and samples each sequence that produced logits with its own sampler chain (the chain
  `Llama.generate` builds: logit bias, penalties, grammar, then greedy or top-k/typical/top-p/min-p/temperature
  and a seeded draw), so a request gives the same tokens whether it runs alone or beside others.
* A sequence's text goes to its own caller through a queue (stop strings and UTF-8 handled as in
  llama_generate.py); when it ends (EOS, stop string, token budget, or its caller went away) its slot is free for
  the next request, in arrival order.
* With `reuse_prefix` (the model's `cache_prompt:true`, the default, for a model without sliding-window attention;
  llama_prompt_cache.py is the single-sequence path's), a free slot keeps the KV cells of what it last held (its prompt and the tokens fed
  after it), and a new request takes the free slot whose cells share the longest prefix with its prompt (as
  llama.cpp's server picks a slot by prompt similarity): only the rest of its prompt is evaluated (at least its
  last token, whose logits give the first new one). The next turn of a conversation, which prefix-cache routing
  sends back to this replica, so skips its history. As with the single-sequence path's cache, a reused prefix is
  faster and not bit-identical to a fresh evaluation. Without it (or after an error) the cells are removed
  (`llama_memory_seq_rm`) and every prompt is evaluated whole.
* `exclusive()` lets a call that needs the whole context (logprobs, images, embeddings, reranking: they go
  through `Llama`'s own single-sequence path) wait for the running sequences to end and keep new ones out.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import heapq
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import llama_cpp
import llama_cpp._internals as internals
from llama_cpp import Llama
from llama_cpp.llama_grammar import LlamaGrammar

from corral.backends.engine import EngineError
from corral.backends.llama_generate import GenerationStats, Sampling
from corral.backends.llama_prompt_cache import shared_prefix
from corral.backends.stop_scanner import StopScanner

log = logging.getLogger(__name__)

PENALTY_LAST_N = 64  # Llama's default `last_n_tokens_size`, so penalties weigh the same tokens as alone


class DecodeError(EngineError):
    """llama_decode failed for a batch; the sequences in it end with this error."""


@contextlib.contextmanager
def sequences_in_context(n_seq: int) -> Iterator[None]:
    """While `Llama(...)` is built inside this block, its context holds `n_seq` sequences with a KV cache of their
    own each, and the model's weights stay in their file layout (`use_extra_bufts` off: llama.cpp's CPU repacking
    of quantized weights multiplies one row and several rows with different kernels, so a Q4_K model such as Gemma
    gave another greedy answer beside other sequences than alone; without it the answers are the same, and one
    token or four sequences' tokens cost the same time here). `Llama` has no parameter for either: it starts from
    `llama_context_default_params()` and `llama_model_default_params()`, so for the load (one at a time in a backend
    process) those functions answer with these fields set."""
    module = llama_cpp.llama_cpp
    context_defaults, model_defaults = module.llama_context_default_params, module.llama_model_default_params

    def context_params() -> llama_cpp.llama_context_params:
        defaults: llama_cpp.llama_context_params = context_defaults()
        defaults.n_seq_max = n_seq
        defaults.kv_unified = False
        return defaults

    def model_params() -> llama_cpp.llama_model_params:
        defaults: llama_cpp.llama_model_params = model_defaults()
        defaults.use_extra_bufts = False
        return defaults

    module.llama_context_default_params, module.llama_model_default_params = context_params, model_params
    try:
        yield
    finally:
        module.llama_context_default_params, module.llama_model_default_params = (
            context_defaults,
            model_defaults,
        )


@dataclass
class SequenceRequest:
    """One generation submitted to the loop; `pieces` carries its text, then None (or the error that ended it)."""

    prompt: list[int]
    sampling: Sampling
    grammar: LlamaGrammar | None
    stops: tuple[str, ...]
    seed: int
    budget: int  # new tokens at most (already cut to the slot's context)
    stats: GenerationStats = field(default_factory=GenerationStats)
    pieces: queue.SimpleQueue[str | BaseException | None] = field(default_factory=queue.SimpleQueue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)  # its slot is free again


class _Sequence:
    """A request running in slot `seq_id`: what is fed, what is sampled, what was sent."""

    def __init__(self, loop: BatchLoop, request: SequenceRequest, seq_id: int, kept: int = 0) -> None:
        self.request, self.seq_id = request, seq_id
        self.fed = kept  # prompt tokens in the batch so far (or in the slot's cells already)
        self.pos = kept  # next position in this sequence
        self.generated: list[int] = []  # the tokens sampled, in order (each fed the step after)
        self.last = -1  # the token sampled last, fed next step
        self.sampler = loop.sampler_for(request)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.scanner = StopScanner(request.stops)
        self.started = time.perf_counter()
        self.first_token_at = self.started
        request.stats.prompt_tokens, request.stats.finish_reason = len(request.prompt), "length"

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.request.prompt)


class BatchLoop:
    """The thread that owns the context and decodes every running sequence together (see the module docstring)."""

    def __init__(self, llm: Llama, slots: int, *, reuse_prefix: bool = False) -> None:
        self._llm = llm
        self._slots = slots
        self._reuse_prefix = reuse_prefix
        self._kept: dict[int, list[int]] = {}  # a free slot's id → the tokens its KV cells still hold
        # slot id → when it was last taken (a count of `_uses`): the least recently used goes first
        self._used: dict[int, int] = {}
        self._uses = itertools.count()
        self._n_batch = llm.n_batch
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._memory = llama_cpp.llama_get_memory(llm.ctx)
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._free_ids = list(range(slots))  # a heap: the lowest free id first
        self._waiting: deque[SequenceRequest] = deque()
        self._running: list[_Sequence] = []
        self._prefill_order: list[int] = []  # seq ids still prefilling, in arrival order
        self._cond = threading.Condition()
        self._exclusive_wanted = 0
        self._exclusive_held = False
        self._stopping = False
        self.steps = 0  # llama_decode calls so far (tests and benchmarks read it)
        self.widest = 0  # most sequences decoded in one step so far
        self.reused = 0  # prompt tokens found in a slot's cells, not evaluated again
        self._thread = threading.Thread(target=self._run, name="llama-batch", daemon=True)
        self._thread.start()

    @property
    def slots(self) -> int:
        return self._slots

    def sampler_for(self, request: SequenceRequest) -> internals.LlamaSampler:
        """The chain `Llama._init_sampler` builds for these settings (logit bias natively, not in Python)."""
        sampling, llm = request.sampling, self._llm
        chain = internals.LlamaSampler()
        if sampling.logit_bias:
            chain.add_logit_bias(llm.n_vocab(), dict(sampling.logit_bias))
        chain.add_penalties(
            n_vocab=llm.n_vocab(),
            penalty_last_n=PENALTY_LAST_N,
            penalty_repeat=sampling.repeat_penalty,
            penalty_freq=sampling.frequency_penalty,
            penalty_present=sampling.presence_penalty,
        )
        if request.grammar is not None:
            chain.add_grammar(llm._model, request.grammar)
        seed = request.seed & 0xFFFFFFFF
        if sampling.temperature < 0:
            chain.add_dist(seed)
        elif sampling.temperature == 0:
            chain.add_greedy()
        else:
            chain.add_top_k(sampling.top_k)
            chain.add_typical(1.0, 1)
            chain.add_top_p(sampling.top_p, 1)
            chain.add_min_p(sampling.min_p, 1)
            chain.add_temp(sampling.temperature)
            chain.add_dist(seed)
        return chain

    # ---- callers' side -------------------------------------------------------------------

    def pieces(self, request: SequenceRequest) -> Iterator[str]:
        """Submit `request` when first iterated and yield its text; closing this stops the sequence and returns
        only once the loop has freed its slot (so the slot is really free when the caller's call ends)."""
        with self._cond:
            if self._stopping:
                raise DecodeError("the model is being unloaded")
            self._waiting.append(request)
            self._cond.notify_all()
        try:
            while (item := request.pieces.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not request.ended.is_set():
                request.cancelled.set()
                with self._cond:
                    self._cond.notify_all()
                request.ended.wait()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The whole context for the caller: waits for running sequences to end; none start meanwhile."""
        with self._cond:
            self._exclusive_wanted += 1
            try:
                self._cond.wait_for(lambda: not self._running and not self._exclusive_held)
            finally:
                self._exclusive_wanted -= 1
            self._exclusive_held = True
            self._kept.clear()  # the single-sequence path evaluates from position 0 over every sequence's cells
        try:
            yield
        finally:
            with self._cond:
                self._exclusive_held = False
                self._cond.notify_all()

    def close(self) -> None:
        """Stop the thread: sequences still running end with an error; then the batch is freed."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        llama_cpp.llama_batch_free(self._batch)

    # ---- the loop thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._has_work)
                if self._stopping:
                    break
                self._admit()
            try:
                self._step()
            except Exception as exc:  # never let the thread die with callers waiting
                log.exception("parallel decode step failed")
                for sequence in list(self._running):
                    self._end(sequence, DecodeError(f"{type(exc).__name__}: {exc}"))
        for sequence in list(self._running):
            self._end(sequence, DecodeError("the model was unloaded while this request ran"))
        with self._cond:
            waiting, self._waiting = list(self._waiting), deque()
        for request in waiting:
            request.pieces.put(DecodeError("the model was unloaded before this request started"))
            request.ended.set()

    def _has_work(self) -> bool:
        if self._stopping or self._running:
            return True
        return bool(self._waiting) and not self._exclusive_held and not self._exclusive_wanted

    def _admit(self) -> None:
        """Waiting requests take free slots in arrival order (none while a caller waits for the whole context)."""
        while self._waiting and self._free_ids and not self._exclusive_wanted and not self._exclusive_held:
            request = self._waiting.popleft()
            seq_id, kept = self._slot_for(request.prompt)
            # the cells past the shared prefix go (all of them without one: whatever an exclusive call left there)
            if kept and not llama_cpp.llama_memory_seq_rm(self._memory, seq_id, kept, -1):
                kept = 0  # this memory cannot drop a tail: evaluate the prompt whole
            if not kept:
                llama_cpp.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
            self.reused += kept
            try:
                # kept in seq id order: llama.cpp splits a batch whose sequences come out of order into more
                # micro-batches (measured slower); prompt chunks still go in arrival order (`_prefill_order`)
                bisect.insort(self._running, _Sequence(self, request, seq_id, kept), key=lambda s: s.seq_id)
                self._prefill_order.append(seq_id)
            except Exception as exc:
                heapq.heappush(self._free_ids, seq_id)
                request.pieces.put(exc)
                request.ended.set()

    def _slot_for(self, prompt: list[int]) -> tuple[int, int]:
        """A free slot for `prompt`, and how many of its first tokens that slot's cells already hold (at most all but
        the prompt's last token, which is evaluated for its logits). With `reuse_prefix`: the slot sharing the
        longest prefix (the lowest id among equals) when it holds at least half of the prompt (llama.cpp's server's
        default `--slot-prompt-similarity 0.5`), else the one used least recently, so that cells another
        conversation may come back for are overwritten last; without it, the lowest free id."""
        kept, best, shared = self._kept, self._free_ids[0], 0
        if self._reuse_prefix:
            limit, free = len(prompt) - 1, sorted(self._free_ids)
            for seq_id in free:
                n = shared_prefix(kept.get(seq_id, []), prompt[:limit])
                if n > shared:
                    best, shared = seq_id, n
            if shared * 2 < len(prompt):  # not this prompt's history: keep the cells used most recently
                best = min(free, key=lambda seq_id: self._used.get(seq_id, -1))
                shared = shared_prefix(kept.get(best, []), prompt[:limit])
            self._used[best] = next(self._uses)
        self._free_ids.remove(best)
        heapq.heapify(self._free_ids)
        kept.pop(best, None)
        return best, shared

    def _step(self) -> None:
        for sequence in [s for s in self._running if s.request.cancelled.is_set()]:
            self._end(sequence, None)
        if not self._running:
            return
        self._batch.n_tokens = 0
        outputs = [(s, self._add(s, s.last, logits=True)) for s in self._running if not s.prefilling]
        outputs += self._add_prompt_chunks()
        self.widest = max(self.widest, len(outputs))
        status = llama_cpp.llama_decode(self._llm.ctx, self._batch)
        self.steps += 1
        if status != 0:
            why = "no room left in the KV cache" if status == 1 else f"llama_decode returned {status}"
            for sequence in list(self._running):
                self._end(sequence, DecodeError(f"decoding failed: {why}"))
            return
        for sequence, index in outputs:
            token = int(sequence.sampler.sample(self._llm._ctx, index))
            if self._accept(sequence, token):
                self._end(sequence, None)

    def _add_prompt_chunks(self) -> list[tuple[_Sequence, int]]:
        """Prompt tokens of the sequences still prefilling, in arrival order, as many as the batch holds; the
        batch index of each prompt's last token (its logits give the first generated token)."""
        outputs: list[tuple[_Sequence, int]] = []
        room = self._n_batch - self._batch.n_tokens
        by_id = {sequence.seq_id: sequence for sequence in self._running}
        for seq_id in list(self._prefill_order):
            sequence = by_id[seq_id]
            if room <= 0:
                break
            prompt = sequence.request.prompt
            chunk = prompt[sequence.fed : sequence.fed + room]
            for offset, token in enumerate(chunk):
                last = sequence.fed + offset == len(prompt) - 1
                index = self._add(sequence, token, logits=last)
                if last:
                    outputs.append((sequence, index))
            sequence.fed += len(chunk)
            room -= len(chunk)
            if not sequence.prefilling:
                self._prefill_order.remove(seq_id)
        return outputs

    def _add(self, sequence: _Sequence, token: int, *, logits: bool) -> int:
        batch, index = self._batch, int(self._batch.n_tokens)
        batch.token[index] = token
        batch.pos[index] = sequence.pos
        batch.n_seq_id[index] = 1
        batch.seq_id[index][0] = sequence.seq_id
        batch.logits[index] = logits
        batch.n_tokens = index + 1
        sequence.pos += 1
        return index

    def _accept(self, sequence: _Sequence, token: int) -> bool:
        """Take a sampled token; True when the sequence is finished (the llama_generate.py rules)."""
        request, stats = sequence.request, sequence.request.stats
        if stats.completion_tokens == 0:
            sequence.first_token_at = time.perf_counter()
            stats.prompt_time_s = sequence.first_token_at - sequence.started
        if not request.sampling.ignore_eos and llama_cpp.llama_vocab_is_eog(self._vocab, token):
            stats.finish_reason = "stop"
            return True
        stats.completion_tokens += 1
        sequence.last = token
        sequence.generated.append(token)
        text = sequence.scanner.feed(sequence.decoder.decode(self._llm.detokenize([token])))
        if text:
            request.pieces.put(text)
        if sequence.scanner.stopped:
            stats.finish_reason = "stop"
            return True
        return stats.completion_tokens >= request.budget

    def _end(self, sequence: _Sequence, error: BaseException | None) -> None:
        """Free the sequence's slot (its KV cells kept for a later prompt with `reuse_prefix` and no error, else
        removed); its caller gets the tail of its text and the end (or `error`)."""
        request = sequence.request
        held: list[int] = []
        if self._reuse_prefix and error is None:
            held = (request.prompt + sequence.generated)[: sequence.pos]  # cells 0 .. pos-1: prompt, then fed
        else:
            llama_cpp.llama_memory_seq_rm(self._memory, sequence.seq_id, -1, -1)
        sequence.sampler.close()
        request.stats.generation_time_s = time.perf_counter() - sequence.first_token_at
        if error is None:
            tail = sequence.scanner.feed(sequence.decoder.decode(b"", final=True)) + sequence.scanner.flush()
            if tail:
                request.pieces.put(tail)
        request.pieces.put(error)
        with self._cond:
            self._running.remove(sequence)
            heapq.heappush(self._free_ids, sequence.seq_id)
            if held and not self._exclusive_held:
                self._kept[sequence.seq_id] = held
            if sequence.seq_id in self._prefill_order:
                self._prefill_order.remove(sequence.seq_id)
            self._cond.notify_all()
        request.ended.set()
