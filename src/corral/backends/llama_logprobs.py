"""What the llama-cpp engine reads from the logits beside the sampled token: logprobs, and logit bias.

Logprobs (`PredictOptions.Logprobs` > 0, `TopLogprobs` alternatives, at most `MAX_TOP_LOGPROBS`) are the
model's own distribution at each generated position: the log-softmax of the raw logits (before
temperature, penalties, bias or grammar), as llama-cpp-python's `create_completion` computes them. The
logits of the last evaluated position are still in the context when `Llama.generate` yields the token
sampled from them, so no `logits_all` (a vocabulary-sized row kept per token) is needed: one
log-sum-exp over the vocabulary per token (Gemma's 262,144 entries: ~0.5 ms), only when asked.

On the wire (`Reply.logprobs`, the reference's field) each reply carries the entries of the tokens whose
text it carries, as JSON in OpenAI's chat shape: `{"content": [{"token", "logprob", "bytes",
"top_logprobs": [{"token", "logprob", "bytes"}]}]}`; the frontend turns them into the completions shape.

Logit bias (`PredictOptions.LogitBias`, the reference's field: JSON `{"token id": bias}`, bias in
-100..100) is added to the logits by a logits processor, the first step of llama.cpp's sampler chain.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp import Llama, LogitsProcessorList

from corral.backends.engine import InvalidRequestError

MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS = 100.0
LOGPROB_FLOOR = -9999.0  # what OpenAI reports for a token of probability 0 (JSON has no -inf)


def _entry(token: str, raw: bytes, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": max(logprob, LOGPROB_FLOOR), "bytes": list(raw)}


class LogprobRecorder:
    """Records the logprob of each generated token (and its top alternatives); `take` hands over the
    entries recorded since the last `take`, as the JSON one Reply carries."""

    def __init__(self, llm: Llama, top: int) -> None:
        if not 0 <= top <= MAX_TOP_LOGPROBS:
            raise InvalidRequestError(f"TopLogprobs must be 0..{MAX_TOP_LOGPROBS}, got {top}")
        self._llm, self._top, self._n_vocab = llm, top, llm.n_vocab()
        self._pending: list[dict[str, Any]] = []

    def _text(self, token: int) -> tuple[str, bytes]:
        raw = self._llm.detokenize([token])
        return raw.decode("utf-8", errors="replace"), raw

    def record(self, token: int) -> None:
        """The logprob of `token`, sampled from the logits of the last evaluated position."""
        logits = np.ctypeslib.as_array(self._llm._ctx.get_logits_ith(-1), shape=(self._n_vocab,))
        peak = float(logits.max())
        log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
        text, raw = self._text(token)
        entry = _entry(text, raw, float(logits[token]) - log_total)
        entry["top_logprobs"] = self._alternatives(logits, log_total)
        self._pending.append(entry)

    def _alternatives(self, logits: npt.NDArray[np.float32], log_total: float) -> list[dict[str, Any]]:
        if self._top == 0:
            return []
        best = np.argpartition(logits, -self._top)[-self._top :]
        best = best[np.argsort(-logits[best], kind="stable")]
        return [_entry(*self._text(int(token)), float(logits[token]) - log_total) for token in best]

    def drop_last(self) -> None:
        """Forget the last token's entry (it completed a stop string, whose text is not returned)."""
        if self._pending:
            self._pending.pop()

    def take(self) -> bytes:
        """The entries recorded since the last call, as `Reply.logprobs` JSON (b"" when there are none)."""
        if not self._pending:
            return b""
        entries, self._pending = self._pending, []
        return json.dumps({"content": entries}, ensure_ascii=False).encode("utf-8")


def check_token_ids(ids: Sequence[int], n_vocab: int, field: str) -> list[int]:
    """Token ids the model has; any other is refused naming the field (llama.cpp would abort on it)."""
    for token in ids:
        if not 0 <= token < n_vocab:
            raise InvalidRequestError(
                f"{field} holds token id {token}, outside this model's vocabulary "
                f"(0..{n_vocab - 1}); send ids from this model's tokenizer"
            )
    return list(ids)


def parse_logit_bias(text: str, n_vocab: int) -> dict[int, float]:
    """`{"token id": bias}` JSON, checked: ids in the vocabulary, biases in -100..100."""
    try:
        raw = json.loads(text)
        bias = {int(token): float(value) for token, value in raw.items()}
    except (ValueError, TypeError, AttributeError):
        raise InvalidRequestError(
            f"LogitBias must be a JSON object of token id to bias, got {text[:80]!r}"
        ) from None
    check_token_ids(list(bias), n_vocab, "LogitBias")
    for token, value in bias.items():
        if not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
            raise InvalidRequestError(
                f"LogitBias for token {token} is {value:g}; a bias must be "
                f"-{MAX_LOGIT_BIAS:g}..{MAX_LOGIT_BIAS:g}"
            )
    return bias


def logit_bias_processor(bias: dict[int, float]) -> LogitsProcessorList | None:
    """A logits processor adding `bias` (None when there is none)."""
    if not bias:
        return None
    ids = np.fromiter(bias.keys(), dtype=np.intc, count=len(bias))
    values = np.fromiter(bias.values(), dtype=np.single, count=len(bias))

    def add_bias(_input_ids: Any, logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        logits[ids] += values
        return logits

    processor: Callable[[Any, npt.NDArray[np.single]], npt.NDArray[np.single]] = add_bias
    return LogitsProcessorList([processor])
