"""Model and alias names: the one validator every entry uses (YAML, admin API, scheduling rules, NATS).

A name becomes a file name in the models directory (`<name>.yaml`), a PostgreSQL key
(varchar(255)) and part of NATS subjects and replica keys, so it must be a plain name: letters,
digits and `._-:@+` (model ids like `qwen2.5:7b` or `gemma-3-270m@q4`), at most 255 characters,
not starting with `.` and without `..` — never a path.
"""

from __future__ import annotations

import re
from typing import cast

NAME_MAX_CHARS = 255  # model_config_states.model_name, node_models.model_name, scheduling rules
ALLOWED = "letters, digits and . _ - : @ +"
_NAME_RE = re.compile(r"[A-Za-z0-9._:@+-]+")


class InvalidName(ValueError):
    """A model or alias name is not a plain name; the message quotes it and says what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field {field!r}: {message}")
        self.field = field


def name_problem(name: object) -> str | None:
    """Why `name` is not a valid model/alias name, or None when it is."""
    if not isinstance(name, str) or not name:
        return "is required (a model or alias name)"
    shown = name if len(name) <= 64 else f"{name[:64]}…"
    if len(name) > NAME_MAX_CHARS:
        return f"must be at most {NAME_MAX_CHARS} characters, got {len(name)} ({shown!r})"
    if "/" in name or "\\" in name:
        return f"{shown!r} must not contain '/' or '\\' (a name, not a path)"
    if ".." in name:
        return f"{shown!r} must not contain '..'"
    if name.startswith("."):
        return f"{shown!r} must not start with '.'"
    if _NAME_RE.fullmatch(name) is None:
        return f"{shown!r} may contain only {ALLOWED}"
    return None


def validate_name(name: object, field: str = "name") -> str:
    """`name` itself when it is a valid model/alias name; InvalidName naming `field` otherwise."""
    problem = name_problem(name)
    if problem is not None:
        raise InvalidName(field, problem)
    return cast(str, name)


def is_valid_name(name: object) -> bool:
    return name_problem(name) is None


# Backend names: a backend name becomes a directory under LOCALAI_BACKENDS_PATH, so it is a plain name.
BACKEND_NAME_MAX_CHARS = 128
_BACKEND_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class InvalidBackendName(ValueError):
    """A backend name that could escape the backends directory or is not a plain name."""


def backend_name_problem(name: object) -> str | None:
    """Why `name` cannot be a backend name (a directory name), or None when it can."""
    if not isinstance(name, str) or not name:
        return "is required (a backend name such as 'llama-cpp')"
    shown = name if len(name) <= 64 else f"{name[:64]}…"
    if len(name) > BACKEND_NAME_MAX_CHARS:
        return f"must be at most {BACKEND_NAME_MAX_CHARS} characters, got {len(name)} ({shown!r})"
    if "/" in name or "\\" in name or "\x00" in name:
        return f"{shown!r} must not contain '/', '\\' or NUL (a name, not a path)"
    if ".." in name:
        return f"{shown!r} must not contain '..'"
    if _BACKEND_NAME_RE.fullmatch(name) is None:
        return f"{shown!r} may contain only letters, digits and . _ - (not starting with . _ -)"
    return None


def validate_backend_name(name: object, field: str = "backend") -> str:
    problem = backend_name_problem(name)
    if problem is not None:
        raise InvalidBackendName(f"field {field!r} {problem}")
    assert isinstance(name, str)
    return name
