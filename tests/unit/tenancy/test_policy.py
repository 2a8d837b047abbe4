"""API keys' policy (tenancy/policy.py): allowed models by name and glob, and the admin API's field checks."""

from __future__ import annotations

import pytest

from corral.tenancy.policy import (
    CURRENT_POLICY,
    MODELS_MAX,
    KeyPolicy,
    allowed_names,
    check_limit,
    check_models,
    check_priority,
    model_refusal,
)


@pytest.mark.parametrize(
    "models, model, allowed",
    [
        ((), "anything", True),  # no list: every model
        (("llama-3",), "llama-3", True),
        (("llama-3",), "llama-3b", False),  # a name is exact
        (("llama-*",), "llama-3:8b", True),
        (("llama-*",), "Llama-3", False),  # case-sensitive, as model names are
        (("qwen2.5:?b", "phi"), "qwen2.5:7b", True),
        (("qwen2.5:?b", "phi"), "qwen2.5:14b", False),
        (("gemma-[23]*",), "gemma-3-270m", True),
        (("gemma-[!23]*",), "gemma-3-270m", False),
    ],
)
def test_a_key_allows_the_models_its_names_and_globs_match(
    models: tuple[str, ...], model: str, allowed: bool
) -> None:
    assert KeyPolicy("k", models=models).allows(model) is allowed


def test_the_refusal_names_the_model_the_key_and_how_to_change_its_models() -> None:
    token = CURRENT_POLICY.set(KeyPolicy("id-1", "team-a", models=("llama-*",)))
    try:
        assert model_refusal("llama-3") is None
        assert model_refusal("gpt-4", alias_of="llama-3") is None  # an alias of an allowed model
        assert model_refusal("qwen") == (
            "the API key 'team-a' may not use model 'qwen'; its models: llama-* "
            "(PATCH /api/keys/id-1 with `models` to change them)"
        )
        assert allowed_names(["gemma", "llama-3", "qwen"]) == ["llama-3"]
    finally:
        CURRENT_POLICY.reset(token)
    assert model_refusal("qwen") is None  # no key: every model
    assert allowed_names(["gemma", "qwen"]) == ["gemma", "qwen"]


def test_the_billed_tenant_is_the_tenant_else_the_name_else_the_id() -> None:
    assert KeyPolicy("id", "name", "tenant").caller().tenant == "tenant"
    assert KeyPolicy("id", "name").caller().tenant == "name"
    assert KeyPolicy("id").caller().tenant == "id"
    assert KeyPolicy("id", priority="low").caller().priority == "low"


@pytest.mark.parametrize(
    "entries, message",
    [
        ([""], "entry 0: must be a non-empty model name or glob"),
        (["ok", "a/b"], "entry 1: 'a/b' may contain only letters, digits and . _ - : @ +, and the glob"),
        (["x" * 256], "entry 0: must be at most 255 characters, got 256"),
        (["m"] * (MODELS_MAX + 1), f"at most {MODELS_MAX} model names or globs, got {MODELS_MAX + 1}"),
    ],
)
def test_a_bad_model_list_is_refused_saying_what_is_wrong(entries: list[str], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        check_models(entries)
    assert str(refused.value).startswith(message)


def test_a_model_list_keeps_its_order_and_drops_duplicates() -> None:
    assert check_models(["b", "a*", "b"]) == ("b", "a*")


def test_limits_and_priorities_are_checked() -> None:
    assert check_limit(0) == 0 and check_limit((1 << 63) - 1) == (1 << 63) - 1
    for bad in (-1, 1 << 63):
        with pytest.raises(ValueError, match="between 0 \\(unlimited\\) and 9223372036854775807"):
            check_limit(bad)
    assert check_priority("batch") == "batch"
    with pytest.raises(
        ValueError, match="unknown priority class 'urgent'; one of critical, high, normal, low, batch"
    ):
        check_priority("urgent")
