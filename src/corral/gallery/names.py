"""Backend names: a backend name becomes a directory under LOCALAI_BACKENDS_PATH, so it is a plain name."""

from __future__ import annotations

import re

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
