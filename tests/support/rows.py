"""`present(value)`: a lookup's result that the test expects to exist (a row, a config), narrowed from Optional."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None, what: str = "the looked-up row") -> T:
    assert value is not None, f"{what} does not exist"
    return value
