"""GBNF grammars for the llama.cpp sampler: each distinct text compiled once, kept in a bounded LRU.

A request's grammar (`PredictOptions.Grammar`, or the tool-call grammar built from `Tools`) is compiled
by llama.cpp's own parser the first time its text is seen: text it refuses is an InvalidRequestError
carrying llama.cpp's reason, never a crash of the sampler (a grammar llama.cpp cannot parse yields no
sampler at all). Later requests with the same text reuse the checked grammar.
"""

from __future__ import annotations

from collections import OrderedDict

import llama_cpp
from llama_cpp import Llama
from llama_cpp.llama_grammar import LlamaGrammar

from corral.backends.engine import InvalidRequestError
from corral.backends.llama_log import captured_llama_log

GRAMMAR_CACHE_ENTRIES = 64
MAX_REASON_CHARS = 300


class GrammarCache:
    def __init__(self, entries: int = GRAMMAR_CACHE_ENTRIES) -> None:
        self._entries: OrderedDict[str, LlamaGrammar] = OrderedDict()
        self._size = entries
        self.compiled = 0  # grammars compiled since the start (tests and benchmarks read it)

    def get(self, llm: Llama, text: str, field: str = "Grammar") -> LlamaGrammar | None:
        """The grammar for `text` ('' → None); `field` names the request field in errors."""
        if not text:
            return None
        grammar = self._entries.get(text)
        if grammar is not None:
            self._entries.move_to_end(text)
            return grammar
        grammar = compile_grammar(llm, text, field)
        self.compiled += 1
        self._entries[text] = grammar
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return grammar


def compile_grammar(llm: Llama, text: str, field: str) -> LlamaGrammar:
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    with captured_llama_log() as llama_log:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
    if not sampler:
        reason = llama_log.error_summary() or "llama.cpp's grammar parser refused it"
        raise InvalidRequestError(
            f"{field} is not a valid GBNF grammar with a `root` rule: {reason[:MAX_REASON_CHARS]}"
        )
    llama_cpp.llama_sampler_free(sampler)
    return LlamaGrammar.from_string(text, verbose=False)
