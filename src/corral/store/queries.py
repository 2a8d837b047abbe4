"""Named SQL queries loaded from `queries/*.sql`.

Each query starts with `-- name: <name>` followed by a one-line `--` comment saying what it does.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

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
