"""Cross-encoder reranking on llama.cpp's rank pooling (`LLAMA_POOLING_TYPE_RANK`), as llama.cpp's server does it.

A model config with `reranking: true` (`ModelOptions.Reranking`) is loaded with embeddings on and rank pooling,
what `llama-server --reranking` does for bge-reranker, jina-reranker or Qwen3-reranker GGUFs. Each (query,
document) pair is formatted as the server's `format_prompt_rerank` does: the model's `rerank` template
(`tokenizer.chat_template.rerank`, `{query}` and `{document}` replaced, special tokens parsed) when it has one,
else `[BOS] query [EOS] [SEP] document [EOS]` with each special token only where the vocabulary's add_bos /
add_eos / add_sep flags ask for it (a BERT reranker: `[CLS] q [SEP] d [SEP]`; XLM-RoBERTa: `<s> q </s></s> d
</s>`). The score is the pair's first classifier output, `llama_get_embeddings_seq(ctx, seq)[0]`, a raw logit
as the server returns it (`Llama.embed` would read `n_embd` floats where rank pooling writes `n_cls_out`).

Pairs are evaluated several at a time, one sequence id each, in batches of at most `min(n_batch, n_ubatch)`
tokens (llama.cpp evaluates a non-causal batch in one micro-batch); a pair longer than that is refused, naming
the query or the document. Results come best first (ties by document index), cut to `top_n`; usage counts
every token evaluated, as the server's `prompt_tokens` and `total_tokens` do.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

from corral.backends.engine import ContextLengthError, InvalidRequestError, LoadError
from corral.models.gguf_header import GGUFHeaderError, read_gguf_header
from corral.proto import backend_pb2 as pb

log = logging.getLogger(__name__)

RANK_POOLING = int(llama_cpp.LLAMA_POOLING_TYPE_RANK)
_POOLING_NAMES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


def check_reranker_file(path: Path) -> None:
    """Refuse a GGUF whose header names another pooling than rank: it has no classifier head, so the 'score'
    would be one coordinate of an embedding. A file without the key is let through, as llama-server does."""
    try:
        arch = read_gguf_header(path, ("general.architecture",)).str_field("general.architecture")
        key = f"{arch}.pooling_type"
        pooling = read_gguf_header(path, ("general.architecture", key)).int_field(key) if arch else None
    except (OSError, GGUFHeaderError) as exc:  # llama.cpp reports unreadable files itself
        log.debug("could not read the pooling type of %s: %s", path, exc)
        return
    if pooling is None:
        log.warning(
            "%s names no pooling type; reranking with llama.cpp rank pooling assumes it has a classifier "
            "head",
            path.name,
        )
    elif pooling != RANK_POOLING:
        raise LoadError(
            f"{path.name} is not a reranker: its GGUF pooling_type is {_POOLING_NAMES.get(pooling, pooling)}, "
            "llama.cpp rank pooling needs a cross-encoder converted with its classifier head (pooling_type rank, "
            "e.g. bge-reranker-v2-m3 or jina-reranker GGUFs); drop `reranking: true` from its model config"
        )


@dataclass(frozen=True)
class PairFormat:
    """How llama.cpp's server lays out one (query, document) pair for this model."""

    template: str | None
    bos: int | None  # None: not added
    eos: int | None
    sep: int | None

    @classmethod
    def of(cls, llm: Llama) -> PairFormat:
        """The model's format; LoadError when its vocabulary cannot form a pair (the checks of llama.cpp's
        common_init_from_params, which only warns)."""
        raw = llama_cpp.llama_model_chat_template(llm.model, b"rerank")
        template = raw.decode("utf-8") if raw else None
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        bos, eos, sep = (
            llama_cpp.llama_vocab_bos(vocab),
            llama_cpp.llama_vocab_eos(vocab),
            llama_cpp.llama_vocab_sep(vocab),
        )
        null = llama_cpp.LLAMA_TOKEN_NULL
        if template is None:
            if bos == null:
                raise LoadError(
                    "the model's vocabulary has no BOS token, so llama.cpp cannot form a rerank pair"
                )
            if eos == null and sep == null:
                raise LoadError(
                    "the model's vocabulary has no EOS or SEP token and no rerank template, so "
                    "llama.cpp cannot form a rerank pair"
                )
        eos = eos if eos != null else sep  # the server's fallback
        return cls(
            template=template,
            bos=bos if llama_cpp.llama_vocab_get_add_bos(vocab) else None,
            eos=eos if llama_cpp.llama_vocab_get_add_eos(vocab) else None,
            sep=sep if llama_cpp.llama_vocab_get_add_sep(vocab) else None,
        )

    def tokens(self, llm: Llama, query: str, document: str) -> list[int]:
        if self.template is not None:  # replaced in this order, special tokens parsed: as the server does
            text = self.template.replace("{query}", query).replace("{document}", document)
            return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        query_ids = llm.tokenize(query.encode("utf-8"), add_bos=False, special=False)
        document_ids = llm.tokenize(document.encode("utf-8"), add_bos=False, special=False)
        return [
            *_present(self.bos),
            *query_ids,
            *_present(self.eos),
            *_present(self.sep),
            *document_ids,
            *_present(self.eos),
        ]


def _present(token: int | None) -> list[int]:
    return [] if token is None else [token]


def pair_limit_tokens(llm: Llama) -> int:
    """The most tokens one pair may have: one batch, evaluated in one micro-batch (non-causal attention)."""
    n_ubatch: int = llm.context_params.n_ubatch  # a ctypes struct field
    return min(llm.n_batch, n_ubatch, llm.n_ctx())


def _check_fits(llm: Llama, fmt: PairFormat, query: str, pairs: list[list[int]]) -> None:
    limit = pair_limit_tokens(llm)
    longest = max(range(len(pairs)), key=lambda i: len(pairs[i]))
    if len(pairs[longest]) <= limit:
        return
    alone = len(fmt.tokens(llm, query, ""))
    knob = f"this model reads at most {limit} tokens per pair (its batch size and context window)"
    if alone > limit:
        raise ContextLengthError(
            f"the query is {alone} tokens with the pair's special tokens but {knob}; shorten the query"
        )
    raise ContextLengthError(
        f"documents[{longest}] makes a pair of {len(pairs[longest])} tokens with the query but "
        f"{knob}; shorten documents[{longest}] (or the query)"
    )


def _scores(llm: Llama, pairs: list[list[int]]) -> list[float]:
    """Each pair's score, several pairs (one sequence each) per llama.cpp batch."""
    limit, max_sequences = pair_limit_tokens(llm), llm.context_params.n_seq_max
    scores: list[float] = []
    start = 0
    while start < len(pairs):
        end, used = start, 0
        while end < len(pairs) and end - start < max_sequences and used + len(pairs[end]) <= limit:
            used += len(pairs[end])
            end += 1
        scores += _evaluate(llm, pairs[start:end])
        start = end
    return scores


def _evaluate(llm: Llama, batch: list[list[int]]) -> list[float]:
    llm._batch.reset()
    for seq, tokens in enumerate(batch):
        llm._batch.add_sequence(tokens, seq, True)
    llm._ctx.kv_cache_clear()
    try:
        llm._ctx.decode(llm._batch)
        scores = []
        for seq in range(len(batch)):
            row = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, seq)
            if not row:
                raise RuntimeError(f"llama.cpp returned no rank score for sequence {seq}")
            scores.append(float(row[0]))
        return scores
    finally:
        llm._batch.reset()
        llm._ctx.kv_cache_clear()


def rerank(llm: Llama, fmt: PairFormat, req: pb.RerankRequest) -> pb.RerankResult:
    """The documents of `req` best first (ties: lower index first), cut to `top_n` (0: all)."""
    if not req.query:
        raise InvalidRequestError("Rerank needs a non-empty query")
    if not req.documents:
        raise InvalidRequestError("Rerank needs at least one document")
    if req.top_n < 0:
        raise InvalidRequestError(f"Rerank top_n must be >= 0 (0 = all documents), got {req.top_n}")
    documents = list(req.documents)
    pairs = [fmt.tokens(llm, req.query, document) for document in documents]
    _check_fits(llm, fmt, req.query, pairs)
    scores = _scores(llm, pairs)
    order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))
    if req.top_n > 0:
        order = order[: req.top_n]
    evaluated = sum(len(pair) for pair in pairs)
    return pb.RerankResult(
        usage=pb.Usage(total_tokens=evaluated, prompt_tokens=evaluated),
        results=[pb.DocumentResult(index=i, text=documents[i], relevance_score=scores[i]) for i in order],
    )
