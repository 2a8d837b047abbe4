"""Node defaults applied to a model's load options, and the hash of the options a backend is loaded with."""

from __future__ import annotations

import pytest

from corral.bus.messages import LoadDefaults
from corral.loading.attempt_options import options_hash, with_node_defaults
from corral.proto import backend_pb2


def _staged(models_dir: str, threads: int = 0, context_size: int = 0) -> backend_pb2.ModelOptions:
    """Options as staging leaves them on a worker whose models directory is `models_dir`."""
    base = f"{models_dir}/llama3"
    return backend_pb2.ModelOptions(
        Model="llama3",
        ModelPath=base,
        ModelFile=f"{base}/llama3.gguf",
        MMProj=f"{base}/mmproj.gguf",
        LoraAdapters=[f"{base}/lora.bin"],
        Options=[f"draft:{base}/draft.gguf", "cache_prompt:false"],
        Threads=threads,
        ContextSize=context_size,
    )


@pytest.mark.parametrize(
    "model_threads, node_threads, loaded",
    [
        (0, 4, 4),  # the model sets none: the node's default
        (2, 4, 2),  # the model's own value wins
        (0, 0, 0),  # neither: the backend decides
    ],
)
def test_a_field_the_model_leaves_at_zero_takes_the_nodes_default(
    model_threads: int, node_threads: int, loaded: int
) -> None:
    staged = _staged("/w1/models", threads=model_threads)
    final = with_node_defaults(staged, LoadDefaults(threads=node_threads, context_size=2048))
    assert (final.Threads, final.ContextSize) == (loaded, 2048)
    assert staged.Threads == model_threads  # a copy: the staged options are untouched


def test_a_worker_that_says_no_defaults_loads_the_options_as_staged() -> None:
    staged = _staged("/w1/models", threads=3)
    assert with_node_defaults(staged, None) == staged


def test_the_same_options_under_two_workers_models_directories_hash_the_same() -> None:
    first, second = options_hash(_staged("/w1/models")), options_hash(_staged("/srv/other-worker/models"))
    assert first == second and len(first) == 64 and int(first, 16) >= 0


def test_options_that_differ_in_a_node_default_hash_differently() -> None:
    one = with_node_defaults(_staged("/w1/models"), LoadDefaults(threads=1))
    two = with_node_defaults(_staged("/w2/models"), LoadDefaults(threads=2))
    assert options_hash(one) != options_hash(two)
    assert options_hash(one) == options_hash(
        with_node_defaults(_staged("/w3/models"), LoadDefaults(threads=1))
    )


def test_a_path_outside_the_model_directory_still_counts() -> None:
    inside, outside = _staged("/w1/models"), _staged("/w1/models")
    outside.Tokenizer = "/opt/tokenizers/llama3.json"
    assert options_hash(inside) != options_hash(outside)
