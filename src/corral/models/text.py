"""Text that can be stored: every string of a decoded JSON or YAML document must be valid Unicode.

JSON's `"\\ud800"` and YAML's `"\\ud800"` escapes decode to a lone surrogate: a Python string that
UTF-8 cannot encode, so neither a models-directory file nor PostgreSQL can hold it (both refuse it
with a UnicodeEncodeError, which reached clients as a 500). A document is checked once, where it
enters, and refused naming the field.
"""

from __future__ import annotations

from typing import Any


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _part(key: Any) -> str:
    """A path part as it can be quoted in a message (a bad key shows its escapes, e.g. `a\\ud800`)."""
    text = str(key)
    return text.encode(errors="backslashreplace").decode()


def invalid_text(value: Any) -> str | None:
    """The dotted path (`description`, `options.2`) of the first string in `value` — a mapping key or a
    value — that is not valid Unicode text; None when every string is. Iterative: a deep document
    cannot exhaust the stack here."""
    todo: list[tuple[Any, str]] = [(value, "")]
    while todo:
        item, path = todo.pop()
        if isinstance(item, str):
            if not _encodes(item):
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{_part(key)}" if path else _part(key)
                if isinstance(key, str) and not _encodes(key):
                    return where
                todo.append((child, where))
        elif isinstance(item, list | tuple):
            todo.extend(
                (child, f"{path}.{index}" if path else str(index)) for index, child in enumerate(item)
            )
    return None


def text_problem(field: str) -> str:
    """The sentence for a field `invalid_text` found (the caller says which field, e.g. `description`)."""
    return (
        f"field '{field}' is not valid text: it holds a lone UTF-16 surrogate (an escape like \\ud800 "
        "without its pair), which UTF-8 cannot store; send the character itself or a complete surrogate pair"
    )
