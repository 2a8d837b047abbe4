"""The README's endpoint × field table is generated from the request models and `request_fields`, says what each
endpoint really does with each field, and a stale README block fails here naming the command that rewrites it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from corral.frontend.inference import field_table, media_requests, request_fields
from corral.frontend.inference.field_table import ENDPOINTS, HARMLESS, IMPLEMENTED, UNKNOWN, cell
from corral.frontend.inference.schemas import _Request

BODIES: dict[str, dict[str, Any]] = {  # the smallest valid body of each endpoint
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "m", "prompt": "p"},
    "/v1/embeddings": {"model": "m", "input": "x"},
    "/v1/rerank": {"model": "m", "query": "q", "documents": ["a"]},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/v1/audio/speech": {"model": "m", "input": "hi"},
    "/tts": {"model": "m", "input": "hi"},
    "/v1/images/generations": {"model": "m", "prompt": "a fox"},
}


def test_the_readme_block_is_the_generated_table() -> None:
    readme = (Path(__file__).resolve().parents[4] / field_table.README).read_text(encoding="utf-8")
    assert field_table.readme_block(readme) == field_table.table(), (
        f"README.md's request fields table is stale: run `{field_table.COMMAND}`"
    )


def test_every_endpoint_policy_has_a_column() -> None:
    policies = {
        p.endpoint
        for module in (request_fields, media_requests)
        for p in vars(module).values()
        if isinstance(p, request_fields.FieldPolicy)
    }
    assert {field_table.policy(model).endpoint for model in ENDPOINTS} == policies == BODIES.keys()


def refusals(model: type[_Request], body: dict[str, Any]) -> set[tuple[str, str]]:
    """The field-policy errors (code, field) validating `body` raises."""
    try:
        model.model_validate(body)
    except ValidationError as caught:
        return {
            (e["type"], e["ctx"]["param"])
            for e in caught.errors()
            if e["type"] in ("unknown_parameter", "unsupported_parameter")
        }
    return set()


@pytest.mark.parametrize("model", ENDPOINTS, ids=lambda m: m.__name__)
def test_each_cell_says_what_validation_does_with_the_field(model: type[_Request]) -> None:
    body = BODIES[field_table.policy(model).endpoint]
    for line in field_table.table().splitlines():
        name = line.split("`")[1] if line.startswith("| `") else None
        if name is None or name in body:
            continue
        found, said = refusals(model, {**body, name: "on"}), cell(model, name)  # no off value is "on"
        if said in (IMPLEMENTED, HARMLESS):  # "on" may be a bad value for a read field, never a refused field
            assert found == set(), (name, said)
        elif said == UNKNOWN:
            assert found == {("unknown_parameter", name)}, name
        else:
            assert found == {("unsupported_parameter", name)}, name
            for off in (None, *field_table.policy(model).not_yet[name]):
                assert refusals(model, {**body, name: off}) == set(), (name, off)


def test_a_not_yet_cell_lists_null_and_the_off_values_as_json() -> None:
    chat = field_table.ENDPOINTS[0]
    assert cell(chat, "service_tier") == '400 unless `null`, `"auto"`, `"default"`'
    assert cell(chat, "modalities") == '400 unless `null`, `["text"]`'
    assert (cell(chat, "messages"), cell(chat, "user"), cell(chat, "prompt")) == (
        IMPLEMENTED,
        HARMLESS,
        UNKNOWN,
    )


def test_rows_are_grouped_by_the_best_any_endpoint_gives_and_sorted_within_a_group() -> None:
    lines = field_table.table().splitlines()
    groups = [i for i, line in enumerate(lines) if line.startswith("| **")]
    assert [lines[i].split("**")[1] for i in groups] == [title for _, title in field_table.GROUPS]
    for start, end in zip(groups, [*groups[1:], len(lines)], strict=True):
        names = [line.split("`")[1] for line in lines[start + 1 : end]]
        assert names == sorted(names)
    assert "| `model` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |" in lines
    assert (
        lines.index("| `model` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |")
        < groups[1]
        < lines.index(next(line for line in lines if line.startswith("| `user` |")))
        < groups[2]
    )


def test_write_replaces_only_the_block_between_the_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# before\n\n{field_table.BEGIN}\nold table\n{field_table.END}\n\n## after\n", encoding="utf-8"
    )
    monkeypatch.setattr(field_table, "README", readme)
    assert field_table.main(["--write"]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text == f"# before\n\n{field_table.BEGIN}\n{field_table.table()}{field_table.END}\n\n## after\n"
    assert field_table.readme_block(text) == field_table.table()


def test_a_readme_without_the_markers_is_an_error_naming_them() -> None:
    with pytest.raises(
        ValueError, match="README.md has no <!-- fields:begin --> … <!-- fields:end --> block"
    ):
        field_table.readme_block("# no table here\n")


def test_an_unknown_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert field_table.main(["--wirte"]) == 2
    assert "usage: python -m corral.frontend.inference.field_table [--write]" in capsys.readouterr().err
