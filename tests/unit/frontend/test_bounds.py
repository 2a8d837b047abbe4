"""Request fields bounded to their protobuf type and column: the message names the field and the range."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from corral.frontend.admin.model_configs import DEPTH_MAX, depth, parse_yaml
from corral.frontend.errors import validation_message
from corral.frontend.inference.schemas import ChatCompletionRequest, CompletionRequest, RerankRequest
from corral.frontend.node_api.routes import HeartbeatUpdate, RegisterNodeRequest
from corral.placement.vram_budget import BadVramBudget, parse_budget

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def message(model: type[BaseModel], body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return validation_message(caught.value)[1]


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("max_tokens", 3_000_000_000, "must be between 1 and 2147483647"),  # PredictOptions.Tokens is int32
        ("max_tokens", 1e20, "must be between 1 and 2147483647"),  # orjson reads ints past 64 bits as floats
        ("max_tokens", "9999999999", "must be between 1 and 2147483647"),
        ("seed", 2**40, "must be between -2147483648 and 2147483647"),
        ("max_completion_tokens", 0, "must be between 1 and 2147483647"),
        ("temperature", float("nan"), "must be a finite number between 0 and 2"),
        ("top_p", 1.5, "must be a finite number between 0 and 1"),
        ("presence_penalty", -3, "must be a finite number between -2 and 2"),
        ("model", "m" * 256, "String should have at most 255 characters"),
    ],
)
def test_an_out_of_range_sampling_field_names_itself_and_its_range(
    field: str, value: Any, expected: str
) -> None:
    assert (
        message(ChatCompletionRequest, {**CHAT, field: value})
        == f"invalid request: field '{field}': {expected}"
    )


def test_completions_share_the_bounds() -> None:
    assert message(CompletionRequest, {"model": "m", "prompt": "p", "seed": -(2**31) - 1}) == (
        "invalid request: field 'seed': must be between -2147483648 and 2147483647"
    )


RERANK = {"model": "m", "query": "q", "documents": ["a", "b"]}


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"top_n": -1}, "field 'top_n': must be between 0 and 1024"),
        ({"top_n": 2**70}, "field 'top_n': must be between 0 and 1024"),
        ({"documents": []}, "field 'documents': List should have at least 1 item after validation, not 0"),
        (
            {"documents": ["d"] * 1025},
            "field 'documents': List should have at most 1024 items after validation, not 1025",
        ),
        (
            {"documents": ["d", "x" * 65537]},
            "field 'documents.1': String should have at most 65536 characters",
        ),
        ({"query": ""}, "field 'query': String should have at least 1 character"),
    ],
)
def test_rerank_bounds_name_the_field(fields: dict[str, Any], expected: str) -> None:
    assert message(RerankRequest, {**RERANK, **fields}) == f"invalid request: {expected}"


def test_rerank_accepts_its_bounds() -> None:
    body = RerankRequest.model_validate(
        {**RERANK, "documents": ["d"] * 1024, "top_n": 1024, "query": "q" * 65536}
    )
    assert (len(body.documents), body.top_n, body.return_documents) == (1024, 1024, True)


def test_values_at_the_bounds_are_accepted() -> None:
    body = ChatCompletionRequest.model_validate(
        {**CHAT, "max_tokens": 2**31 - 1, "seed": -(2**31), "temperature": 2}
    )
    assert (body.max_tokens, body.seed) == (2**31 - 1, -(2**31))


@pytest.mark.parametrize(
    "fields, expected",
    [
        (
            {"address": "a" * 300},
            "invalid request: field 'address': String should have at most 255 characters",
        ),
        (
            {"total_vram": 2**70},
            "invalid request: field 'total_vram': must be between 0 and 9223372036854775807",
        ),
        (
            {"labels": {"k" * 200: "v"}},
            "invalid request: field 'labels': key '"
            + "k" * 40
            + "…': String should have at most 128 characters",
        ),
        (
            {"labels": {f"k{i}": "v" for i in range(257)}},
            "invalid request: field 'labels': Dictionary should have at most 256 items after validation, not more",
        ),
        ({"token": "t" * 5000}, "invalid request: field 'token': String should have at most 4096 characters"),
    ],
)
def test_a_registration_field_is_bounded_by_its_column(fields: dict[str, Any], expected: str) -> None:
    assert message(RegisterNodeRequest, {"name": "n", **fields}) == expected


def test_a_heartbeat_is_bounded_by_its_columns() -> None:
    assert message(HeartbeatUpdate, {"available_disk": 2**63}) == (
        "invalid request: field 'available_disk': must be between 0 and 9223372036854775807"
    )
    assert message(HeartbeatUpdate, {"gpu_vendor": "v" * 33}) == (
        "invalid request: field 'gpu_vendor': String should have at most 32 characters"
    )


def test_a_vram_budget_past_bigint_is_refused() -> None:
    with pytest.raises(BadVramBudget, match="is too large; the most is 9223372036854775807 bytes"):
        parse_budget("99999999999TB")
    assert parse_budget("8000000TB") == (None, 8 * 10**18)


def test_yaml_aliases_are_refused_before_they_can_expand() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b]\n"
    with pytest.raises(yaml.YAMLError, match=r"YAML aliases \(\*name\) are not accepted in a model config"):
        parse_yaml(bomb.encode())


def test_nesting_is_measured_without_recursion_and_deep_yaml_is_a_yaml_error() -> None:
    deep: Any = {}
    for _ in range(10_000):
        deep = {"k": deep}
    assert depth(deep) > DEPTH_MAX and depth({"a": {"b": [1]}}) == 3
    # In a thread of its own, as the frontend parses bodies (asyncio.to_thread): a RecursionError leaves
    # CPython 3.11's AST recursion counter of its thread off, and pytest's main thread must still parse
    # (assertion rewriting) later modules.
    with concurrent.futures.ThreadPoolExecutor(1) as pool, pytest.raises(yaml.YAMLError):
        pool.submit(parse_yaml, b"[" * 50_000 + b"]" * 50_000).result()
