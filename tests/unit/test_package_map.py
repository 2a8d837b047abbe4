"""The package map of `corral/__init__.py` held against the code: every import (lazy ones inside functions
too) between corral's packages, read from the source."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import corral

ROOT = Path(corral.__file__).parent
GENERATED = ("gallery/backends/",)  # the gallery backends run in their own venvs; they import no corral


def _package(module: str) -> str | None:
    """`corral.loading.job` -> `loading`; a top-level module (`corral.__main__`) belongs to no package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (ROOT / parts[1]).is_dir()) else None


def _imports() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files of the first that import the second."""
    edges: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(GENERATED) or "/" not in rel:
            continue
        source = rel.split("/", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("corral."):
                targets = (
                    [node.module]
                    if _package(node.module)
                    else [f"{node.module}.{a.name}" for a in node.names]
                )
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("corral.")]
            else:
                continue
            for target in targets:
                package = _package(target)
                if package is not None and package != source:
                    edges[source][package].add(rel)
    return edges


EDGES = _imports()


def _cycle() -> list[str] | None:
    """A cycle among the packages, or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(package: str) -> list[str] | None:
        state[package] = 1
        path.append(package)
        for target in sorted(EDGES.get(package, {})):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        state[package] = 2
        path.pop()
        return None

    for package in sorted(EDGES):
        if package not in state and (found := visit(package)) is not None:
            return found
    return None


def test_the_map_reads_the_imports_it_is_about() -> None:
    assert "routing" in EDGES["frontend"] and "worker" in EDGES["up"]


def test_no_package_cycle() -> None:
    assert _cycle() is None, " -> ".join(_cycle() or [])


def test_nothing_imports_worker_but_up() -> None:
    importers = {
        p: sorted(files) for p, targets in EDGES.items() for t, files in targets.items() if t == "worker"
    }
    assert set(importers) == {"up"}, importers


@pytest.mark.parametrize(
    ("package", "must_not"),
    [
        ("loading", "routing"),  # it receives an evictor; the router uses loading, never the other way
        ("node", "frontend"),
        ("placement", "store"),  # pure functions over a snapshot
        ("store", "routing"),
        ("bus", "store"),
        ("backends", "frontend"),
        ("staging", "placement"),  # file transfer knows nothing about scheduling
    ],
)
def test_a_package_does_not_reach_up(package: str, must_not: str) -> None:
    assert must_not not in EDGES.get(package, {}), sorted(EDGES[package][must_not])


def test_the_bottom_imports_nothing_of_corral_above_it() -> None:
    assert dict(EDGES.get("runtime", {})) == {}
    assert set(EDGES.get("config", {})) <= {"models"}
    assert set(EDGES.get("models", {})) <= {"runtime"}


def test_only_the_commands_import_the_frontend() -> None:
    importers = {p for p, targets in EDGES.items() if "frontend" in targets}
    assert importers <= {"cli", "up"}, importers
