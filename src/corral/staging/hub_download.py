"""Download a managed Hugging Face snapshot on the frontend (controller), with ``HF_TOKEN`` used only here.

The hub protocol is ``huggingface_hub``'s (the same on huggingface.co and on a mirror selected with
``HF_ENDPOINT``): ``HfApi.model_info(files_metadata=True)`` resolves the revision to a commit and lists the
files with their sizes and LFS sha256, ``hf_hub_download(local_dir=...)`` fetches one file at that commit
(HEAD for its metadata, then GET; redirects to a CDN or bucket are followed without the token). The
library runs in a thread of its own; the event loop only waits.

What corral keeps around the library:

* the reference layout: files land in ``.incomplete-<selection>/`` and the directory is renamed into
  ``snapshots/<selection>`` only when every selected file is there with the listed size and LFS sha256
  (the library's own ``.cache/huggingface`` bookkeeping is removed first), so a snapshot that exists is
  committed and complete; ``refs/<revision>`` names the selection;
* the commit id the hub answers names a directory, so it must be hex (``../..`` is refused before
  anything is written); file names with ``..``, ``.`` or ``\\`` segments or a leading ``/`` are dropped
  from the listing (the library refuses them too, and every file it returns is checked to be inside
  the snapshot);
* a cross-process lock file keeps two frontends on one models dir from writing the same snapshot; files
  finished before a crash are kept (the library's metadata says which) and not downloaded again;
* the sha256 of every file is recorded beside it (the stager need not hash it again);
* errors name the fix: HF_TOKEN for a gated repo, HF_ENDPOINT for an unreachable hub,
  ``huggingface.include`` for patterns that match nothing, and the library's timeout knobs
  ``HF_HUB_ETAG_TIMEOUT`` (metadata) and ``HF_HUB_DOWNLOAD_TIMEOUT`` (file bodies), seconds, read from
  the frontend's environment;
* the token is passed explicitly (``False`` when unset, so the library never reads a token of its own from
  the environment or ``~/.cache/huggingface``); nothing else receives it and it is never logged;
* two library switches are pinned when it is first loaded (:func:`_library`): telemetry off (otherwise the
  first request fetches ``/api/agent-harnesses`` from the endpoint in the process's ``HF_ENDPOINT`` -- not
  ``--hf-endpoint`` -- without the token, and caches it under ``HF_HOME``), and Xet off (files come over
  plain HTTP through ``/resolve`` as before: every chunk passes the cancellation check and nothing is
  written outside the models dir, where hf_xet would keep a chunk cache under ``HF_HOME``).
"""

from __future__ import annotations

import asyncio
import fcntl
import fnmatch
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from corral.models.huggingface import HuggingFaceSource, committed_snapshot, ref_path, snapshot_path
from corral.staging.errors import HubDownloadFailed
from corral.staging.hashing import (
    hash_sidecar_path,
    read_trusted_hash,
    record_hash,
    remove_sidecars,
    sha256_file,
)

if TYPE_CHECKING:
    from huggingface_hub.hf_api import RepoSibling

log = logging.getLogger(__name__)

PROGRESS_EVERY_BYTES = 8 << 20
COMMIT_RE = re.compile(
    r"[0-9a-fA-F]{7,64}"
)  # the hub's commit id names the snapshot directory: nothing else may
LIBRARY_DIR = ".cache"  # huggingface_hub's bookkeeping inside a local_dir (metadata, locks, tree cache)
ETAG_TIMEOUT_KNOB = "HF_HUB_ETAG_TIMEOUT"
DOWNLOAD_TIMEOUT_KNOB = "HF_HUB_DOWNLOAD_TIMEOUT"
HUB_THREADS = 4  # downloads at once on one frontend; each holds one thread for its whole file

T = TypeVar("T")
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


class Progress(Protocol):
    """What a download reports to (the stager's progress: the loading job's figures)."""

    def on_file(self, index: int, total_files: int, total_bytes: int) -> None: ...
    def on_bytes(self, bytes_sent: int, total_bytes: int) -> None: ...
    def on_hash(self, done_bytes: int, total_bytes: int) -> None: ...


@dataclass(frozen=True)
class HubFile:
    path: str  # repo-relative, '/'-separated
    size_bytes: int | None
    lfs_sha256: str | None


class DownloadCancelled(Exception):
    """Raised inside the download thread when the waiting task was cancelled (stops at the next chunk)."""


class HubClient:
    """Frontend-only access to the hub; holds the token and never hands it to anything else."""

    def __init__(self, endpoint: str, token: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._token = token
        self._locks: dict[Path, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"HubClient(endpoint={self.endpoint!r}, token={'set' if self._token else 'unset'})"

    @property
    def _library_token(self) -> str | bool:
        return self._token or False  # False: send none, never look one up in the environment or on disk

    async def ensure_snapshot(self, models_dir: Path, source: HuggingFaceSource, progress: Progress) -> Path:
        """The committed snapshot of ``source`` under ``models_dir``, downloading what is missing."""
        lock = self._locks.setdefault(ref_path(models_dir, source), asyncio.Lock())
        async with lock:
            try:
                commit, files = await _in_thread(lambda cancel: self._resolve(source))
            except HubDownloadFailed as exc:
                existing = committed_snapshot(models_dir, source)
                if existing is not None and exc.status is None:
                    log.warning("hub unreachable (%s); using the committed snapshot %s", exc, existing)
                    return existing
                raise
            selection = source.selection_name(commit)
            final = snapshot_path(models_dir, source, selection)
            if not final.is_dir():
                await self._download_all(source, commit, files, final, progress)
            _write_ref(ref_path(models_dir, source), selection)
            return final

    def _resolve(self, source: HuggingFaceSource) -> tuple[str, list[HubFile]]:
        _library()
        from huggingface_hub import HfApi, constants

        api = HfApi(endpoint=self.endpoint, token=self._library_token, library_name="corral")
        try:
            info = api.model_info(
                source.repo,
                revision=source.revision,
                files_metadata=True,
                timeout=constants.HF_HUB_ETAG_TIMEOUT,
            )
        except (
            KeyError,
            TypeError,
            AttributeError,
            json.JSONDecodeError,
        ) as exc:  # not a listing it can read
            raise HubDownloadFailed(
                source.repo,
                200,
                f"unexpected answer from {self.endpoint} for revision {source.revision!r}: {exc!r}; "
                "check HF_ENDPOINT",
            ) from None
        except Exception as exc:
            raise self._failure(source, exc, "resolving the revision") from None
        commit = str(info.sha)
        if info.sha is None or not COMMIT_RE.fullmatch(commit):  # '../..' would put the snapshot elsewhere
            raise HubDownloadFailed(
                source.repo,
                200,
                f"the hub at {self.endpoint} answered commit {commit[:80]!r}, "
                "not a hex commit id; nothing was downloaded (check HF_ENDPOINT)",
            )
        listed = (_hub_file(s) for s in info.siblings or [])
        files = [f for f in listed if f is not None and _selected(f.path, source)]
        if not files:
            raise HubDownloadFailed(
                source.repo,
                200,
                f"no file of revision {source.revision!r} matches "
                f"huggingface.include {list(source.include)!r}",
            )
        return commit, files

    async def _download_all(
        self,
        source: HuggingFaceSource,
        commit: str,
        files: list[HubFile],
        final: Path,
        progress: Progress,
    ) -> None:
        incomplete = final.with_name(f".incomplete-{final.name}")
        incomplete.mkdir(parents=True, exist_ok=True)
        lock_file = await asyncio.to_thread(_lock_exclusive, incomplete.with_name(f".{final.name}.lock"))
        try:
            if final.is_dir():  # another frontend finished it while we waited for the lock
                return
            loop = asyncio.get_running_loop()
            for index, hub_file in enumerate(files, start=1):
                size = hub_file.size_bytes or 0
                progress.on_file(index, len(files), size)

                def fetch(cancel: threading.Event, hub_file: HubFile = hub_file) -> int:
                    return self.download_file(
                        source,
                        commit,
                        hub_file,
                        incomplete,
                        on_bytes=_on_loop(loop, progress.on_bytes, cancel),
                        on_hash=_on_loop(loop, progress.on_hash, cancel),
                    )

                done = await _in_thread(fetch)
                progress.on_bytes(done, max(size, done))
            await asyncio.to_thread(_keep_only, incomplete, files)
            os.replace(incomplete, final)
            log.info(
                "committed Hugging Face snapshot %s@%s (%d files) at %s",
                source.repo,
                commit,
                len(files),
                final,
            )
        finally:
            lock_file.close()

    def download_file(
        self,
        source: HuggingFaceSource,
        commit: str,
        hub_file: HubFile,
        into: Path,
        *,
        on_bytes: Callable[[int, int], None],
        on_hash: Callable[[int, int], None],
    ) -> int:
        """Fetch one listed file of ``commit`` into ``into`` (blocking; runs in a hub thread), verify its
        size and LFS sha256 against the listing and record its hash; return its size."""
        _library()
        from huggingface_hub import hf_hub_download

        try:
            fetched = hf_hub_download(
                source.repo,
                hub_file.path,
                revision=commit,
                endpoint=self.endpoint,
                token=self._library_token,
                local_dir=into,
                # never read from (or write to) a cache outside the models dir: this one stays empty
                cache_dir=into / LIBRARY_DIR / "no-cache",
                library_name="corral",
                tqdm_class=_progress_bar_class(on_bytes, hub_file.size_bytes),
            )
        except DownloadCancelled:
            raise
        except Exception as exc:
            raise self._failure(source, exc, f"downloading {hub_file.path}") from None
        target = Path(fetched)
        if not target.resolve().is_relative_to(into.resolve()):  # the library's own check, checked
            raise HubDownloadFailed(source.repo, 200, f"{hub_file.path}: landed outside the snapshot")
        return _verify_and_record(source, hub_file, target, on_hash)

    def _failure(self, source: HuggingFaceSource, exc: BaseException, doing: str) -> HubDownloadFailed:
        """The library's exception as the error corral reports (status None: the hub was not reached)."""
        import httpx2
        from huggingface_hub.errors import FileMetadataError, HfHubHTTPError, OfflineModeIsEnabled

        known = (HfHubHTTPError, OfflineModeIsEnabled, httpx2.RequestError, FileMetadataError)
        # the library wraps a failed metadata call (LocalEntryNotFoundError from the HEAD's error): unwrap once
        cause = exc if isinstance(exc, known) or not isinstance(exc.__cause__, known) else exc.__cause__
        if isinstance(cause, HfHubHTTPError) and cause.response is not None:
            status = cause.response.status_code
            hint = _status_hint(status, _body(cause.response), source)
            return HubDownloadFailed(
                source.repo, status, hint if doing == "resolving the revision" else f"{doing}: {hint}"
            )
        if isinstance(cause, OfflineModeIsEnabled):
            return HubDownloadFailed(
                source.repo, None, f"{doing}: HF_HUB_OFFLINE is set in the frontend's environment"
            )
        if isinstance(cause, httpx2.TimeoutException):
            knob = DOWNLOAD_TIMEOUT_KNOB if _is_body_request(cause) else ETAG_TIMEOUT_KNOB
            return HubDownloadFailed(
                source.repo,
                None,
                f"{doing}: the hub at {self.endpoint} did not answer in time ({cause!r}); raise {knob} "
                "(seconds, the frontend's environment) or check HF_ENDPOINT and the frontend's network",
            )
        if isinstance(cause, httpx2.RequestError):
            return HubDownloadFailed(
                source.repo,
                None,
                f"cannot reach the hub at {self.endpoint} ({doing}): {cause!r}; "
                "check HF_ENDPOINT and the frontend's network",
            )
        if isinstance(cause, FileMetadataError):
            return HubDownloadFailed(source.repo, 200, f"{doing}: {cause}")
        if isinstance(exc, ValueError):  # an invalid repo id or an unsafe file name, refused by the library
            return HubDownloadFailed(source.repo, 200, f"{doing}: refused by huggingface_hub: {exc}")
        return HubDownloadFailed(source.repo, 200, f"{doing}: {type(exc).__name__}: {exc}")


def _keep_only(tree: Path, files: list[HubFile]) -> None:
    """Leave in ``tree`` the listed files and their hash sidecars only: the library's ``.cache/`` goes, and so
    does anything an interrupted earlier attempt (or an older corral's ``.part`` file) left behind."""
    shutil.rmtree(tree / LIBRARY_DIR, ignore_errors=True)
    listed = [tree.joinpath(*f.path.split("/")) for f in files]
    keep = {*listed, *(hash_sidecar_path(path) for path in listed)}
    for path in [p for p in tree.rglob("*") if p.is_file() or p.is_symlink()]:
        if path not in keep:
            path.unlink(missing_ok=True)


def _library() -> None:
    """Load huggingface_hub (in a hub thread: 0.4 s of CPU, kept off the event loop and out of the
    frontend's start) and pin the switches the module docstring names."""
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = True
    constants.HF_HUB_DISABLE_XET = True


def _verify_and_record(
    source: HuggingFaceSource, hub_file: HubFile, target: Path, on_hash: Callable[[int, int], None]
) -> int:
    before = os.stat(target)
    if hub_file.size_bytes is not None and before.st_size != hub_file.size_bytes:
        _refuse(source, hub_file, target, f"got {before.st_size} bytes, the hub lists {hub_file.size_bytes}")
    recorded = read_trusted_hash(target)  # written below on an earlier, verified pass
    actual = recorded if recorded is not None else sha256_file(target, on_progress=on_hash)
    if hub_file.lfs_sha256 is not None and actual != hub_file.lfs_sha256.lower():
        _refuse(source, hub_file, target, f"sha256 {actual} does not match the hub's {hub_file.lfs_sha256}")
    if recorded is None:
        try:
            record_hash(target, actual, before)  # the stager need not re-hash it
        except OSError:
            pass
    return before.st_size


def _refuse(source: HuggingFaceSource, hub_file: HubFile, target: Path, problem: str) -> NoReturn:
    remove_sidecars(target)
    target.unlink(missing_ok=True)
    raise HubDownloadFailed(source.repo, 200, f"{hub_file.path}: {problem}")


def _progress_bar_class(on_bytes: Callable[[int, int], None], listed: int | None) -> type[Any]:
    """A tqdm stand-in for huggingface_hub: forwards bytes to ``on_bytes`` (which raises when cancelled)."""

    class Bar:
        def __init__(
            self, *args: object, total: int | None = None, initial: int = 0, **kwargs: object
        ) -> None:
            self.total = listed or total or 0
            self.n = initial

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def update(self, n: float | None = 1) -> None:
            self.n += int(n or 0)
            on_bytes(self.n, max(self.total, self.n))

        def close(self) -> None:
            pass

        def __getattr__(self, name: str) -> Callable[..., None]:  # set_description, refresh, ...
            return lambda *args, **kwargs: None

    return Bar


def _on_loop(
    loop: asyncio.AbstractEventLoop, callback: Callable[[int, int], None], cancel: threading.Event
) -> Callable[[int, int], None]:
    """A progress callback for the hub thread: throttled, delivered on the loop, raises once cancelled."""
    last = [-PROGRESS_EVERY_BYTES]

    def report(done: int, total: int) -> None:
        if cancel.is_set():
            raise DownloadCancelled
        if done - last[0] >= PROGRESS_EVERY_BYTES or done >= total:
            last[0] = done
            loop.call_soon_threadsafe(callback, done, total)

    return report


async def _in_thread(work: Callable[[threading.Event], T]) -> T:
    """Run ``work`` in a hub thread. Cancelling the caller tells the thread to stop (at its next chunk)
    and waits for it, so no download outlives the snapshot lock."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(HUB_THREADS, thread_name_prefix="corral-hub")
    cancel = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(_executor, work, cancel)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.set()
        await asyncio.wait([future])
        if not future.cancelled():
            future.exception()  # retrieved: DownloadCancelled (or whatever ended it) is expected here
        raise


def _hub_file(sibling: RepoSibling) -> HubFile | None:
    path = sibling.rfilename
    if not isinstance(path, str):
        return None
    parts = PurePosixPath(path).parts
    if not path or path.startswith("/") or "\\" in path or any(p in ("", "..", ".") for p in path.split("/")):
        log.warning("ignoring unsafe file name %r in a hub listing", path)
        return None
    if parts[0] == LIBRARY_DIR:
        log.warning(
            "ignoring %r in a hub listing: %s/ holds the downloader's own bookkeeping", path, LIBRARY_DIR
        )
        return None
    lfs = sibling.lfs
    size = lfs.size if lfs is not None else sibling.size
    sha = lfs.sha256 if lfs is not None else None
    return HubFile(path, size if isinstance(size, int) else None, sha if isinstance(sha, str) else None)


def _selected(path: str, source: HuggingFaceSource) -> bool:
    if not source.include:
        return not path.startswith(".git")
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in source.include)


def _status_hint(status: int, body: str, source: HuggingFaceSource) -> str:
    if status in (401, 403):
        return (
            f"HTTP {status}: repo {source.repo!r} is gated or private; set HF_TOKEN on the "
            "frontend (workers never need it)"
        )
    if status == 404:
        return f"HTTP 404: repo {source.repo!r} or revision {source.revision!r} not found on the hub"
    return f"HTTP {status}: {body[:200]!r}"


def _body(response: Any) -> str:
    try:
        return str(response.text)
    except Exception:  # a streamed body not read
        return ""


def _is_body_request(exc: Any) -> bool:
    try:
        request = exc.request
    except RuntimeError:  # no request attached
        return False
    return bool(request.method == "GET" and "/resolve/" in str(request.url))


def _lock_exclusive(path: Path) -> IO[bytes]:
    file = open(path, "a+b")
    fcntl.flock(file.fileno(), fcntl.LOCK_EX)
    return file


def _write_ref(path: Path, selection: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(selection, encoding="utf-8")
    os.replace(temp, path)
