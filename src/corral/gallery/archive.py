"""Unpacking a backend archive (.tar.gz/.tgz/.tar/.zip) without letting a member escape the target.

Members with absolute paths or `..`, links pointing outside, and device files are refused
(tar: the standard `data` filter; zip: checked here, symlinks refused outright). The caller
unpacks into a staging directory and removes it whole on any error.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

ItemProgress = Callable[[str, int, int], None]  # (member name, members done, members total)
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_MEMBERS = 200_000


class ArchiveError(Exception):
    """The archive is unreadable or has a member that would escape the target."""


def is_archive(location: str) -> bool:
    return location.lower().split("?", 1)[0].endswith(ARCHIVE_SUFFIXES)


def extract(archive: Path, target: Path, kind: str, progress: ItemProgress | None = None) -> None:
    """Unpack `archive` (named like `kind`, e.g. `x.tar.gz`) into the existing directory `target`."""
    try:
        if kind.lower().split("?", 1)[0].endswith(".zip"):
            _extract_zip(archive, target, progress)
        else:
            _extract_tar(archive, target, progress)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise ArchiveError(f"archive {kind} is unreadable or refused: {exc}") from None


def _extract_tar(archive: Path, target: Path, progress: ItemProgress | None) -> None:
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        if len(members) > MAX_MEMBERS:
            raise ArchiveError(f"archive has {len(members)} members; at most {MAX_MEMBERS}")
        for i, member in enumerate(members, 1):
            if member.name.startswith("/") or ".." in Path(member.name).parts:
                raise ArchiveError(
                    f"archive member {member.name!r} would be written outside the backend directory"
                )
            tar.extract(member, target, filter="data")
            if progress:
                progress(member.name, i, len(members))


def _inside(target: Path, name: str) -> Path:
    dest = (target / name).resolve()
    if name.startswith("/") or "\x00" in name or not dest.is_relative_to(target.resolve()):
        raise ArchiveError(f"archive member {name!r} would be written outside the backend directory")
    return dest


def _extract_zip(archive: Path, target: Path, progress: ItemProgress | None) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ArchiveError(f"archive has {len(infos)} members; at most {MAX_MEMBERS}")
        for i, info in enumerate(infos, 1):
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise ArchiveError(f"archive member {info.filename!r} is a symbolic link; refused")
            dest = _inside(target, info.filename)
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dest, "wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                if mode & 0o111:
                    os.chmod(dest, 0o755)
            if progress:
                progress(info.filename, i, len(infos))


def tree_digest(root: Path) -> str:
    """SHA-256 over a directory: each regular file's relative path and content digest, in sorted order.

    Lets a gallery pin a directory entry the way it pins an archive (`sha256`).
    """
    outer = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files:
        inner = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                inner.update(chunk)
        outer.update(path.relative_to(root).as_posix().encode() + b"\0" + inner.hexdigest().encode() + b"\n")
    return outer.hexdigest()
