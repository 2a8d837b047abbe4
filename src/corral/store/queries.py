"""Named SQL queries loaded from `queries/*.sql`.

Each query starts with `-- name: <name>` followed by a one-line `--` comment saying what it does.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

_NAME_RE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def _all() -> dict[str, str]:
    queries: dict[str, str] = {}
    for entry in resources.files("corral.store").joinpath("queries").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text()
        parts = _NAME_RE.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"duplicate SQL query name {name!r} in {entry.name}")
            queries[name] = body.strip()
    return queries


def q(name: str) -> str:
    return _all()[name]


async def delete_in_batches(pool: Any, name: str, batch: int) -> int:
    """Run delete query `name` (it takes a row limit, $1, and returns how many rows went) until a pass deletes
    fewer than `batch`: a long backlog goes in short transactions. Returns the total."""
    total = 0
    while True:
        gone = int(await pool.fetchval(q(name), batch))
        total += gone
        if gone < batch:
            return total
