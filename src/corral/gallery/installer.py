"""Installing a gallery entry into `<backends path>/<name>`: fetched, verified, unpacked, venv'd, published.

Every install is built in a staging directory beside the target (`.install-<name>-*`, same
filesystem) and renamed into place only when complete, `metadata.json` written last: a crash or
error at any step leaves nothing under the backend's name, and `clean_leftovers()` (run when the
worker starts) removes what a killed worker left behind. A replaced backend is renamed aside
(`.trash-*`) before the new one is renamed in, then removed. All methods block: call them from a
thread.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from corral.gallery.archive import ArchiveError, extract, is_archive, tree_digest
from corral.gallery.fetch import FetchError, download
from corral.gallery.index import GalleryEntry, GalleryRef, PythonSection, is_url, resolve_location
from corral.gallery.metadata import RUN_FILE, BackendMetadata, write_metadata
from corral.gallery.registry import INSTALL_PREFIX, TRASH_PREFIX

INTEGRITY_KNOB = "LOCALAI_REQUIRE_BACKEND_INTEGRITY"
ARCHIVE_MAX_BYTES = 64 << 30
PIP_TAIL_LINES = 20
VENV_DIR = "venv"
COMMON_DIR = "common"  # where python.common lands in an installed backend (its run.sh puts it on PYTHONPATH)
INHERIT_PTH = "_corral_worker_packages.pth"

# (phase, file name, current, total, counts bytes?) — phases as the reference's progress events
Progress = Callable[[str, str, int, int, bool], None]


class InstallError(Exception):
    """An install failed; nothing of it is left behind. The message names the step and the cause."""


def _noop(phase: str, file_name: str, current: int, total: int, is_bytes: bool) -> None:
    return None


def _describe_os_error(exc: OSError, where: Path) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"disk full while installing into {where}: {exc.strerror or exc}; free space and retry"
    return f"{exc.strerror or exc} ({exc.filename or where})"


class BackendInstaller:
    def __init__(
        self, backends_path: Path, *, require_integrity: bool, timeout_s: float, python: str = sys.executable
    ) -> None:
        self.backends_path = backends_path
        self.require_integrity = require_integrity
        self.timeout_s = timeout_s
        self.python = python

    def clean_leftovers(self) -> list[str]:
        """Remove staging and trash directories a crashed or killed install left behind."""
        removed: list[str] = []
        try:
            entries = list(os.scandir(self.backends_path))
        except OSError:
            return removed
        for entry in entries:
            if entry.name.startswith((INSTALL_PREFIX, TRASH_PREFIX)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.name)
        return removed

    def install(self, entry: GalleryEntry, gallery: GalleryRef, progress: Progress = _noop) -> Path:
        """Install `entry` as `<backends path>/<entry.name>`, replacing an existing install atomically."""
        location = resolve_location(gallery.url, entry.uri)
        progress("resolving", entry.name, 0, 0, False)
        if entry.sha256 is None and self.require_integrity:
            raise InstallError(
                f"backend {entry.name!r} in gallery {gallery.name!r} has no sha256 digest and "
                f"{INTEGRITY_KNOB} is on; add the digest to the gallery or turn the setting off"
            )
        target = self.backends_path / entry.name
        try:
            self.backends_path.mkdir(parents=True, exist_ok=True)
            stage = Path(tempfile.mkdtemp(prefix=f"{INSTALL_PREFIX}{entry.name}-", dir=self.backends_path))
        except OSError as exc:
            raise InstallError(
                f"cannot install backend {entry.name!r}: {_describe_os_error(exc, self.backends_path)}"
            ) from None
        try:
            root, digest = self._unpack(entry, location, stage, progress)
            if entry.python is not None:
                if entry.python.common is not None:
                    self._copy_common(
                        entry, resolve_location(gallery.url, entry.python.common), root, progress
                    )
                self._python(entry.python, root, target, progress)
            meta = BackendMetadata(
                name=entry.name,
                alias=entry.alias,
                description=entry.description or None,
                installed_at=datetime.now(UTC).isoformat(),
                gallery_url=gallery.url,
                version=entry.version,
                uri=location,
                digest=digest,
            )
            write_metadata(root, meta)
            self._publish(root, target)
        except OSError as exc:
            raise InstallError(
                f"install of backend {entry.name!r} failed: {_describe_os_error(exc, stage)}"
            ) from None
        except (FetchError, ArchiveError) as exc:
            raise InstallError(f"install of backend {entry.name!r} failed: {exc}") from None
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return target

    def remove(self, name: str) -> bool:
        """Delete `<backends path>/<name>` (renamed aside first, so it vanishes at once). False if absent."""
        target = self.backends_path / name
        if not target.exists():
            return False
        trash = Path(tempfile.mkdtemp(prefix=f"{TRASH_PREFIX}{name}-", dir=self.backends_path))
        os.rename(target, trash / name)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _publish(self, root: Path, target: Path) -> None:
        """Rename the finished install into place; an existing install is renamed aside first, then removed."""
        if not (target.exists() or target.is_symlink()):
            os.rename(root, target)
            return
        trash = Path(tempfile.mkdtemp(prefix=f"{TRASH_PREFIX}{target.name}-", dir=self.backends_path))
        os.rename(target, trash / target.name)
        os.rename(root, target)
        shutil.rmtree(trash, ignore_errors=True)

    def _unpack(
        self, entry: GalleryEntry, location: str, stage: Path, progress: Progress
    ) -> tuple[Path, str | None]:
        unpacked = stage / "root"
        unpacked.mkdir()
        if is_archive(location):
            digest: str | None = self._fetch_archive(entry, location, stage, unpacked, progress)
        elif is_url(location):
            raise InstallError(
                f"backend {entry.name!r}: uri {location} must be a .tar.gz/.tgz/.tar/.zip archive "
                "(a URL cannot name a directory)"
            )
        else:
            digest = self._copy_directory(entry, Path(location), unpacked, progress)
        return self._backend_root(entry, unpacked), digest

    def _fetch_archive(
        self, entry: GalleryEntry, location: str, stage: Path, unpacked: Path, progress: Progress
    ) -> str:
        archive = stage / "archive"
        file_name = location.rsplit("/", 1)[-1]

        def on_bytes(done: int, total: int) -> None:
            progress("downloading", file_name, done, total, True)

        with open(archive, "wb") as out:
            digest = download(location, out, self.timeout_s, ARCHIVE_MAX_BYTES, on_bytes)
        if entry.sha256 is not None and digest != entry.sha256:
            raise InstallError(
                f"backend {entry.name!r}: digest mismatch for {location}: gallery says sha256 "
                f"{entry.sha256}, downloaded file has {digest}; refusing to install"
            )

        def on_member(member: str, done: int, total: int) -> None:
            progress("extracting", member, done, total, False)

        extract(archive, unpacked, file_name, on_member)
        archive.unlink()
        return digest

    def _copy_directory(
        self, entry: GalleryEntry, source: Path, unpacked: Path, progress: Progress
    ) -> str | None:
        if not source.is_dir():
            raise InstallError(
                f"backend {entry.name!r}: uri {source} is neither a directory nor a "
                ".tar.gz/.tgz/.tar/.zip archive"
            )
        _copy_tree(source, unpacked, progress)
        digest = tree_digest(unpacked) if entry.sha256 is not None or self.require_integrity else None
        if entry.sha256 is not None and digest != entry.sha256:
            raise InstallError(
                f"backend {entry.name!r}: digest mismatch for directory {source}: gallery says "
                f"sha256 {entry.sha256}, its files hash to {digest}; refusing to install"
            )
        return digest

    @staticmethod
    def _copy_common(entry: GalleryEntry, location: str, root: Path, progress: Progress) -> None:
        """The gallery's shared backend code (`python.common`) into `<backend>/common`, beside backend.py."""
        source = Path(location)
        if is_url(location) or not source.is_dir():
            raise InstallError(
                f"backend {entry.name!r}: python.common {location} is not a directory (the shared "
                "code is copied from the gallery's own directory; an archive ships its common/)"
            )
        if (root / COMMON_DIR).exists():
            raise InstallError(
                f"backend {entry.name!r} ships its own {COMMON_DIR}/ and its entry names "
                f"python.common {location} too; drop one of them"
            )
        (root / COMMON_DIR).mkdir()
        _copy_tree(source, root / COMMON_DIR, progress)

    @staticmethod
    def _backend_root(entry: GalleryEntry, unpacked: Path) -> Path:
        """The directory holding run.sh: the unpacked root, or its single top-level directory."""
        if (unpacked / RUN_FILE).is_file():
            root = unpacked
        else:
            children = [p for p in unpacked.iterdir()]
            if len(children) != 1 or not (children[0] / RUN_FILE).is_file():
                raise InstallError(
                    f"backend {entry.name!r} has no {RUN_FILE} at its top level (nor in a single "
                    "top-level directory); a backend directory needs run.sh"
                )
            root = children[0]
        run_file = root / RUN_FILE
        if run_file.is_symlink():
            raise InstallError(f"backend {entry.name!r}: {RUN_FILE} must be a regular file, not a link")
        run_file.chmod(run_file.stat().st_mode | 0o755)
        return root

    def _python(self, section: PythonSection, root: Path, target: Path, progress: Progress) -> None:
        requirements = root / section.requirements
        if not requirements.is_file():
            raise InstallError(f"python.requirements {section.requirements!r} is not a file in the backend")
        venv = root / VENV_DIR
        progress("downloading", "venv", 0, 0, False)
        self._run(
            [self.python, "-m", "venv", "--without-pip", str(venv)], root, "create the virtual environment"
        )
        venv_python = venv / "bin" / "python"
        if section.inherit_worker_packages:
            self._inherit(venv)
        argv = [
            self.python,
            "-m",
            "pip",
            "--python",
            str(venv_python),
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            "--timeout",
            f"{self.timeout_s:g}",
            "-r",
            str(requirements),
        ]
        for link in section.find_links:
            argv += ["--find-links", link if is_url(link) else str((root / link).resolve())]
        if section.no_index:
            argv.append("--no-index")
        self._run(argv, root, "install the Python requirements", progress)
        _relocate_venv(venv, root, target)

    def _inherit(self, venv: Path) -> None:
        """A .pth appending the worker's own site-packages: the backend's packages come first."""
        site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
        worker_sites = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
        site.mkdir(parents=True, exist_ok=True)
        (site / INHERIT_PTH).write_text("".join(f"{p}\n" for p in sorted(worker_sites)))

    def _run(self, argv: list[str], cwd: Path, what: str, progress: Progress | None = None) -> None:
        tail: deque[str] = deque(maxlen=PIP_TAIL_LINES)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        with subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            errors="replace",
        ) as proc:
            assert proc.stdout is not None
            step = 0
            for line in proc.stdout:
                line = line.rstrip()
                tail.append(line)
                if progress and line.startswith(
                    ("Collecting ", "Downloading ", "Processing ", "Installing ")
                ):
                    step += 1
                    progress("downloading", line.split(" ", 2)[1], step, 0, False)
        if proc.returncode != 0:
            lines = "\n".join(tail)
            if "No space left on device" in lines:
                raise InstallError(
                    f"disk full while trying to {what} in {cwd}; free space and retry:\n{lines}"
                )
            raise InstallError(f"could not {what} (exit code {proc.returncode}); last lines:\n{lines}")


def _copy_tree(source: Path, dest: Path, progress: Progress) -> None:
    """Copy a backend directory (links kept as links, no venv or caches); an OSError (disk full) stops it at once."""
    files = []
    for root, dirs, names in os.walk(source):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not (Path(root) == source and d == VENV_DIR)]
        rel = Path(root).relative_to(source)
        for name in names + [d for d in dirs if (Path(root) / d).is_symlink()]:
            files.append(rel / name)
        for d in dirs:
            if not (Path(root) / d).is_symlink():
                (dest / rel / d).mkdir(parents=True, exist_ok=True)
    for i, rel in enumerate(files, 1):
        src = source / rel
        if src.is_symlink():
            os.symlink(os.readlink(src), dest / rel)
        else:
            shutil.copy2(src, dest / rel)
        progress("extracting", str(rel), i, len(files), False)


def _relocate_venv(venv: Path, built_at: Path, target: Path) -> None:
    """Rewrite the staging path to the final one in the venv's scripts (activate, shebangs) before publishing.

    `venv/bin/python` is a symlink and finds its packages relative to itself, so only these text
    files name the directory; after the atomic rename every path in them is right.
    """
    old, new = str(built_at), str(target)
    for path in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if old in text:
            path.write_text(text.replace(old, new))
