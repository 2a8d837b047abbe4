"""How the llama-cpp engine's single-sequence path evaluates a prompt, reusing cached cells (`cache_prompt`).

llama.cpp's CPU kernels do not give a token the same activations whatever micro-batch it is evaluated in: the
repacked Q4_K kernels take rows four at a time and llamafile's tiles change with the row count, so a prompt
evaluated after a reused prefix is not bit-identical to the same prompt evaluated whole (logits moved by up to
~1 on Gemma 3 270M). That is numerics, not a wrong cache, but it moves close greedy choices: after another
prompt sharing only `<bos>`, Gemma answered "Name three colours. mendatang" for "Name three colours.\\n(a)".

Three modes (`cache_prompt:` of the model's options):
* `true` (the default, as llama.cpp's server and llama-cpp-python): keep every cell the last request left that
  the prompt shares (its prompt, then the tokens it generated, so the next turn of a conversation evaluates only
  its new message) and evaluate the rest. Fastest; a greedy answer may differ with what ran before.
* `exact`: a greedy answer never depends on what ran before (below). Keeps less.
* `false`: evaluate every prompt whole, in the chunks `exact` uses (so `exact` answers as `false` does).

In `exact` (and `false`) the chunks a prompt is evaluated in are a function of the prompt alone:
* the model's chat head (the tokens every chat its template renders begins with, e.g. Gemma's
  `<bos><start_of_turn>user\\n`) is a chunk of its own when the prompt begins with it;
* after it (or from the first token), chunks of `stride` tokens, the last one shorter.
Each chunk is one `llama_decode`. A later prompt keeps the previous prompt's cells up to the last chunk end the
two prompts share (with equal tokens before it), short of its own last chunk (evaluated for its logits). Every
cell kept was computed by the same decode, of the same tokens, on the same cells before it, as a fresh evaluation
would compute it now: the answer is the fresh evaluation's, whatever ran before. What is given up: the cells of
a partial last chunk and of the generated tokens (decoded a token at a time) are evaluated again by the next
turn, and a chat prompt that misses the cached head pays one more (small) decode.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import llama_cpp
from llama_cpp import Llama

STRIDE_TOKENS = 256  # a chunk after the head: measured as fast per token here as one batch of 500 (CPU)
MIN_HEAD_TOKENS = 2  # a head of `<bos>` alone saves nothing and would cost every prompt a decode


def chunk_ends(prompt: Sequence[int], head: Sequence[int], stride: int) -> list[int]:
    """Where each chunk of `prompt` ends: after the head when the prompt begins with it, then every `stride`
    tokens, and at the prompt's end."""
    n = len(prompt)
    start = len(head) if head and n > len(head) and list(prompt[: len(head)]) == list(head) else 0
    ends = [start] if start else []
    ends += range(start + stride, n, stride)
    if n:
        ends.append(n)
    return ends


def shared_prefix(held: Sequence[int], prompt: Sequence[int]) -> int:
    n = 0
    for a, b in zip(held, prompt, strict=False):
        if a != b:
            break
        n += 1
    return n


def reusable(
    held: Sequence[int], held_ends: Sequence[int], prompt: Sequence[int], ends: Sequence[int]
) -> int:
    """How many first tokens of `prompt` the cells of `held` (evaluated in chunks ending at `held_ends`) give
    exactly: the last end both prompts have, at most their shared prefix, before the prompt's last chunk."""
    limit = min(shared_prefix(held, prompt), ends[-2] if len(ends) > 1 else 0)
    keep = 0
    for end in held_ends[: bisect.bisect_right(held_ends, limit)]:
        if end in ends:
            keep = end
    return keep


MODES = ("true", "exact", "false")  # cache_prompt's values (the first is the default)


class PromptCache:
    """What the context's cells hold of the last prompt evaluated through it, and the evaluation of the next."""

    def __init__(self, llm: Llama, head: Sequence[int], *, mode: str, stride: int = STRIDE_TOKENS) -> None:
        if mode not in MODES:
            raise ValueError(f"cache_prompt mode {mode!r} is not one of {', '.join(MODES)}")
        self._llm = llm
        self._memory = llama_cpp.llama_get_memory(llm.ctx)
        self.head = list(head) if len(head) >= MIN_HEAD_TOKENS else []
        self.stride = max(1, min(stride, llm.n_batch))
        self.mode = mode
        self._valid = False  # the cells hold what the last evaluation through here left (and its generation)
        self._held_ends: list[int] = []  # exact: where the chunks of the last prompt evaluated ended
        self.reused = 0  # prompt tokens taken from the cells, not evaluated again (a count over all prompts)

    def forget(self) -> None:
        """Something else used the context (an embedding, an image, other sequences): nothing is reusable."""
        self._valid, self._held_ends = False, []

    def evaluate(self, prompt: list[int]) -> int:
        """Evaluate `prompt` into the context, reusing what it can; returns the tokens reused. Afterwards the
        context's logits are those of the prompt's last token and `Llama.generate(prompt)` samples at once."""
        if self.mode == "true":
            return self._evaluate_rest(prompt)
        llm, ends = self._llm, chunk_ends(prompt, self.head, self.stride)
        keep = reusable(self._held(), self._held_ends, prompt, ends) if self.mode == "exact" else 0
        start = keep = self._start_at(prompt, keep)
        for end in ends:
            if end > start:
                llm.eval(prompt[start:end])
                start = end
        self._valid, self._held_ends = True, ends
        self.reused += keep
        return keep

    def _evaluate_rest(self, prompt: list[int]) -> int:
        """`true`: keep the longest prefix the cells hold (all but the prompt's last token), evaluate the rest."""
        keep = self._start_at(prompt, max(0, min(shared_prefix(self._held(), prompt), len(prompt) - 1)))
        self._llm.eval(prompt[keep:])
        self._valid = True
        self.reused += keep
        return keep

    def _held(self) -> list[int]:
        """The tokens in the cells (llama-cpp-python's record: the last prompt, then what it generated)."""
        return list(self._llm.input_ids[: self._llm.n_tokens]) if self._valid else []

    def _start_at(self, prompt: list[int], keep: int) -> int:
        """Make the context hold `prompt[:keep]` (0 if its cells do not hold it after all) and nothing after;
        nothing is reusable until the evaluation that follows is whole."""
        if keep and not self._cells_hold(prompt, keep):
            keep = 0
        self.forget()
        if keep:
            self._llm.n_tokens = keep  # llama-cpp-python's count of tokens in the cells; eval drops the rest
        else:
            self._llm.reset()
        return keep

    def _cells_hold(self, prompt: list[int], keep: int) -> bool:
        """The cells still hold positions 0 .. keep-1 of these tokens (a defence: callers `forget` on other uses)."""
        llm, memory = self._llm, self._memory
        if llm.n_tokens < keep or list(llm.input_ids[:keep]) != prompt[:keep]:
            return False
        return bool(
            llama_cpp.llama_memory_seq_pos_min(memory, 0) == 0
            and llama_cpp.llama_memory_seq_pos_max(memory, 0) >= keep - 1
        )


def chat_head(llm: Llama, rendered: Sequence[tuple[str, bool]]) -> list[int]:
    """The tokens every one of these rendered chats (text, add_bos) begins with."""
    tokens = [llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True) for text, add_bos in rendered]
    n = min((shared_prefix(tokens[0], other) for other in tokens[1:]), default=0)
    return tokens[0][:n] if tokens else []
