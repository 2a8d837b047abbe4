"""The compiled modules (corral/native.py) keep the rules mypyc needs to run them as their source runs: read from
the source, so a change that would only break the compiled build fails here, in the pure-Python run too."""

from __future__ import annotations

import ast

import pytest

from corral import native


def _tree(module: str) -> ast.Module:
    return ast.parse(native.source_of(module).read_text(encoding="utf-8"))


@pytest.mark.parametrize("module", native.MODULES)
def test_an_except_name_is_bound_to_one_exception_type_per_function(module: str) -> None:
    """mypyc types a name by its first `except ... as name` in a function and checks the later ones against it:
    `except A as exc` then `except Exception as exc` raises TypeError where the second clause runs."""
    mixed = []
    for fn in ast.walk(_tree(module)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            types: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.ExceptHandler) and node.name:
                    types.setdefault(node.name, set()).add(ast.unparse(node.type) if node.type else "")
            mixed += [f"{fn.name}:{fn.lineno} {name} {sorted(t)}" for name, t in types.items() if len(t) > 1]
    assert mixed == []


@pytest.mark.parametrize("module", native.MODULES)
def test_no_async_generator(module: str) -> None:
    """mypyc compiles no async generator (`asynccontextmanager` is one): the build of the group fails."""
    found = [
        f"{fn.name}:{fn.lineno}"
        for fn in ast.walk(_tree(module))
        if isinstance(fn, ast.AsyncFunctionDef)
        and any(isinstance(node, ast.Yield | ast.YieldFrom) for node in ast.walk(fn))
    ]
    assert found == []


@pytest.mark.parametrize("module", native.MODULES)
def test_no_class_is_made_at_run_time(module: str) -> None:
    """A compiled class cannot be subclassed by one made with `type(...)` (the protocol's limits are bound by a
    factory, not a subclass)."""
    made = [
        f"line {node.lineno}"
        for node in ast.walk(_tree(module))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "type"
        and len(node.args) == 3
    ]
    assert made == []


EXCEPTION_BASES = {"Exception", "BaseException", "ValueError", "RuntimeError", "OSError"}


@pytest.mark.parametrize("module", native.MODULES)
def test_an_exception_class_attribute_is_a_classvar(module: str) -> None:
    """Compiled, a plain class attribute of an exception class that a subclass sets again is missing on the
    subclass's instances (AttributeError where it is read): it is declared `ClassVar`."""
    tree = _tree(module)
    exceptions = set(EXCEPTION_BASES)
    plain = []
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):  # in order: bases first
        if not any(ast.unparse(base) in exceptions for base in cls.bases):
            continue
        exceptions.add(cls.name)
        for statement in cls.body:
            if isinstance(statement, ast.Assign) or (
                isinstance(statement, ast.AnnAssign) and "ClassVar" not in ast.unparse(statement.annotation)
            ):
                plain.append(f"{cls.name}:{statement.lineno}")
    assert plain == []
