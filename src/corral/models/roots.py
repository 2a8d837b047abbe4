"""Where a model's files may live: the models directory, its Hugging Face snapshots, and the roots the operator lists.

Every path a model config names -- ``parameters.model``, each artifact field (``mmproj``, LoRA, tokenizer, …)
and every ``options`` entry whose value is a path -- must resolve, symlinks included, under one of:

* the models directory (``--models-path``);
* the Hugging Face snapshot root below it (``.artifacts/huggingface``; it may be a link to a bigger disk);
* a directory the operator lists in ``CORRAL_MODEL_PATH_ROOTS`` (``--model-path-roots``).

An absolute path, a ``..`` that climbs out, or a symlink that points out is refused whether the file exists
or not (a file present only on the workers would still be read from outside what the operator gave corral).
A value that is no path (a hub id, a template name) stays allowed: relative and without ``..``, it resolves
inside the models directory unless a symlink there leads out.

Pure path logic plus ``realpath``/``exists``; nothing here writes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from corral.models.huggingface import hub_root

PATH_ROOTS_SETTING = "CORRAL_MODEL_PATH_ROOTS"
PATH_MAX_BYTES = 4096  # PATH_MAX of Linux
NAME_MAX_BYTES = 255  # the longest file name of common Linux filesystems


class PathOutsideRoots(ValueError):
    """A model config names a file outside the models directory and the roots the operator listed: move the file
    under the models directory, or list its directory in CORRAL_MODEL_PATH_ROOTS (``--model-path-roots``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _under(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def malformed(value: str) -> str | None:
    """Why ``value`` cannot be a path at all (a NUL byte, longer than the system allows), or None."""
    if "\x00" in value:
        return "contains a NUL byte"
    size_bytes = len(value.encode("utf-8", errors="surrogatepass"))
    if size_bytes > PATH_MAX_BYTES:
        return f"is {size_bytes} bytes long; the longest path is {PATH_MAX_BYTES} bytes"
    longest = max(len(part.encode("utf-8", errors="surrogatepass")) for part in value.split(os.sep))
    if longest > NAME_MAX_BYTES:
        return f"has a path component of {longest} bytes; the longest file name is {NAME_MAX_BYTES} bytes"
    return None


def looks_like_path(value: str) -> bool:
    """An absolute path or one with a ``..`` segment: a file name whatever else it could be."""
    return os.path.isabs(value) or ".." in value.split(os.sep)


@dataclass(frozen=True)
class ModelRoots:
    """The directories a frontend reads model files from: its models directory and the listed extra roots."""

    models_dir: Path
    extra: tuple[Path, ...] = ()

    @cached_property
    def owned(self) -> tuple[str, ...]:
        """The real paths corral itself manages (models directory, snapshot root): hash sidecars go only there.

        Resolved once per object (a config's check, a staging plan): build a new one to see the disk anew."""
        return os.path.realpath(self.models_dir), os.path.realpath(hub_root(self.models_dir))

    @cached_property
    def real_roots(self) -> tuple[str, ...]:
        return (*self.owned, *(os.path.realpath(root) for root in self.extra))

    def contains(self, path: Path | str) -> bool:
        """``path`` resolves (symlinks included) under one of the roots."""
        real = os.path.realpath(path)
        return any(_under(real, root) for root in self.real_roots)

    def owns(self, path: Path | str) -> bool:
        """``path`` resolves under the models directory (or its snapshot root), where corral may write beside it."""
        real = os.path.realpath(path)
        return any(_under(real, root) for root in self.owned)

    def describe(self) -> str:
        text = f"the models directory {os.path.realpath(self.models_dir)}"
        if self.extra:
            text += f" and {PATH_ROOTS_SETTING} ({', '.join(str(root) for root in self.extra)})"
        return text

    def outside(self, what: str, value: str, real: str, field: str = "") -> PathOutsideRoots:
        return PathOutsideRoots(
            field,
            f"{what}: {value!r} resolves to {real}, outside {self.describe()}; keep "
            f"model files under it, or list the directory in {PATH_ROOTS_SETTING}",
        )

    def require(self, what: str, path: Path) -> None:
        """Raise :class:`PathOutsideRoots` unless ``path`` (already resolved from a config) is inside."""
        if not self.contains(path):
            raise self.outside(what, str(path), os.path.realpath(path))

    def check(self, field: str, value: str, bases: Sequence[Path], *, always_path: bool = True) -> None:
        """Raise :class:`PathOutsideRoots` when ``value`` names a file outside the roots.

        Absolute values stand alone; relative ones are read against ``bases`` in order, as the config resolves
        them: the first base where the file exists is the one checked, and when it exists under none, every
        reading must stay inside. ``always_path=False`` (an option's value) checks only a value that names a
        file: an absolute path, a ``..`` path, or one that exists.
        """
        # strings, not Paths: a config may hold thousands of options, and pathlib costs ~10 µs a path here
        candidates = (
            [value] if os.path.isabs(value) else [os.path.join(base, value) for base in dict.fromkeys(bases)]
        )
        existing = [c for c in candidates if os.path.exists(c)]  # False for a name the system refuses
        if not always_path and not existing and not looks_like_path(value):
            return
        problem = malformed(value)
        if problem is not None:
            raise PathOutsideRoots(
                field,
                f"field {field!r}: {value[:64]!r}{'…' if len(value) > 64 else ''} "
                f"{problem}; name a file under {self.describe()}",
            )
        for candidate in existing[:1] or candidates:
            real = os.path.realpath(candidate)
            if not any(_under(real, root) for root in self.real_roots):
                raise self.outside(f"field {field!r}", value, real, field)
