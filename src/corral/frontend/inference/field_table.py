"""The README's table of OpenAI request fields: endpoint × field → supported, generated from the one list.

Each endpoint's request model names what it reads; its `FieldPolicy` (`request_fields`) what passes unread
and what is refused unless off. Regenerate the README's block after changing either:

    python -m corral.frontend.inference.field_table --write

(without `--write` it prints the block); a unit test fails while the README's block is stale.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from corral.frontend.inference.media_requests import ImageRequest, SpeechRequest, TTSRequest
from corral.frontend.inference.request_fields import FieldPolicy
from corral.frontend.inference.responses_request import ResponsesRequest
from corral.frontend.inference.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    RerankRequest,
    _Request,
)

ENDPOINTS: tuple[type[_Request], ...] = (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    RerankRequest,
    ResponsesRequest,
    SpeechRequest,
    TTSRequest,
    ImageRequest,
)  # the multipart /v1/audio/transcriptions form is checked by media_requests itself

README = Path(
    "README.md"
)  # the checkout's, relative to where the command runs (its root), not to this module
BEGIN, END = "<!-- fields:begin -->", "<!-- fields:end -->"
COMMAND = "python -m corral.frontend.inference.field_table --write"

IMPLEMENTED, HARMLESS, UNKNOWN = "✓", "accepted, unread", "—"
# Rows are grouped by the best a field gets on any endpoint, in this order.
GROUPS = (
    (IMPLEMENTED, "read by at least one endpoint"),
    (HARMLESS, "accepted unread (they cannot change the answer), read by none"),
    ("400", "not supported yet on any endpoint"),
)
LEGEND = (
    f"`{IMPLEMENTED}` read and honoured · `{HARMLESS}` passes without effect · `400 unless …` a `400` "
    "`unsupported_parameter` naming the field unless it is one of those values · "
    f"`{UNKNOWN}` not a field of that endpoint: a `400` `unknown_parameter` naming it.\n"
    f"Generated from `src/corral/frontend/inference/request_fields.py` and the request models: `{COMMAND}`.\n"
)


def policy(model: type[_Request]) -> FieldPolicy:
    if model.field_policy is None:
        raise TypeError(f"{model.__name__} has no field_policy")
    return model.field_policy


def cell(model: type[_Request], name: str) -> str:
    """What `model`'s endpoint does with a top-level field `name`."""
    fields = policy(model)
    if name in model.model_fields:  # the names `FieldPolicy.accepted` is given
        return IMPLEMENTED
    if name in fields.harmless:
        return HARMLESS
    if name in fields.not_yet:
        offs = ", ".join(f"`{orjson.dumps(off).decode()}`" for off in (None, *fields.not_yet[name]))
        return f"400 unless {offs}".replace("|", "\\|")
    return UNKNOWN


def _group(cells: Sequence[str]) -> int:
    return next(i for i, (mark, _) in enumerate(GROUPS) if any(c.startswith(mark) for c in cells))


def table(endpoints: Sequence[type[_Request]] = ENDPOINTS) -> str:
    """The Markdown block: legend, then one row per field of any endpoint, grouped, sorted within a group."""
    names = set()
    for model in endpoints:
        names |= model.model_fields.keys() | policy(model).harmless | policy(model).not_yet.keys()
    rows: list[list[tuple[str, list[str]]]] = [[] for _ in GROUPS]
    for name in sorted(names):
        cells = [cell(model, name) for model in endpoints]
        rows[_group(cells)].append((name, cells))
    lines = [
        f"| field | {' | '.join(f'`{policy(m).endpoint}`' for m in endpoints)} |",
        "|---" * (len(endpoints) + 1) + "|",
    ]
    for (_, title), group in zip(GROUPS, rows, strict=True):
        if group:
            lines.append(f"| **{title}** |" + " |" * len(endpoints))
            lines += [f"| `{name}` | {' | '.join(cells)} |" for name, cells in group]
    return LEGEND + "\n" + "\n".join(lines) + "\n"


def _block_bounds(text: str) -> tuple[int, int]:
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise ValueError(f"README.md has no {BEGIN} … {END} block")
    return begin + len(BEGIN), end


def readme_block(text: str) -> str:
    """The README's generated block, between the markers (without them)."""
    begin, end = _block_bounds(text)
    return text[begin:end].strip("\n") + "\n"


def with_block(text: str, block: str) -> str:
    """`text` with its block between the markers replaced by `block`."""
    begin, end = _block_bounds(text)
    return f"{text[:begin]}\n{block}{text[end:]}"


def main(argv: Sequence[str] = ()) -> int:
    if list(argv) not in ([], ["--write"]):
        print(
            f"usage: python -m corral.frontend.inference.field_table [--write]  (--write rewrites {README.name}'s block)",
            file=sys.stderr,
        )
        return 2
    if not argv:
        sys.stdout.write(table())
        return 0
    if not README.is_file():
        print(f"no {README} here: run the command from the checkout's root", file=sys.stderr)
        return 2
    README.write_text(with_block(README.read_text(encoding="utf-8"), table()), encoding="utf-8")
    print(f"wrote the fields table into {README}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
