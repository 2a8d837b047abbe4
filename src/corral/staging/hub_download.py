"""Download a managed Hugging Face snapshot on the frontend (controller), with ``HF_TOKEN`` used only here.

Hub API used (the same on huggingface.co and on a mirror selected with ``HF_ENDPOINT``):

* ``GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true`` -> ``sha`` (the commit) and
  ``siblings`` (``rfilename``, ``size``, ``lfs.sha256``);
* ``GET {endpoint}/{repo}/resolve/{commit}/{path}`` -> the file (redirects followed; the token is
  not forwarded to another host).

Files land in ``.incomplete-<selection>/`` and the directory is renamed into ``snapshots/`` only when
every selected file is there with the right size (and LFS sha256): a snapshot that exists is
committed and complete. A cross-process lock file keeps two frontends on one models dir from writing
the same snapshot; files finished before a crash are kept and not downloaded again.
"""

from __future__ import annotations

import asyncio
import fcntl
import fnmatch
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import httpx

from corral.models.huggingface import HuggingFaceSource, committed_snapshot, ref_path, snapshot_path
from corral.staging.errors import HubDownloadFailed
from corral.staging.hashing import record_hash

log = logging.getLogger(__name__)

HUB_TIMEOUT = httpx.Timeout(connect=30.0, read=300.0, write=60.0, pool=60.0)
DOWNLOAD_CHUNK_BYTES = 1 << 20
PROGRESS_EVERY_BYTES = 8 << 20
COMMIT_RE = re.compile(
    r"[0-9a-fA-F]{7,64}"
)  # the hub's commit id names the snapshot directory: nothing else may


@dataclass(frozen=True)
class HubFile:
    path: str  # repo-relative, '/'-separated
    size_bytes: int | None
    lfs_sha256: str | None


class HubClient:
    """Frontend-only access to the hub; holds the token and never hands it to anything else."""

    def __init__(self, endpoint: str, token: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._token = token
        self._locks: dict[Path, asyncio.Lock] = {}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    async def ensure_snapshot(self, models_dir: Path, source: HuggingFaceSource, progress) -> Path:  # type: ignore[no-untyped-def]
        """The committed snapshot of ``source`` under ``models_dir``, downloading what is missing."""
        lock = self._locks.setdefault(ref_path(models_dir, source), asyncio.Lock())
        # built in a thread: a client loads the CA bundle (0.1-0.3 s of CPU) when it is made
        client = await asyncio.to_thread(httpx.AsyncClient, timeout=HUB_TIMEOUT, follow_redirects=True)
        async with lock, client as http:
            try:
                commit, files = await self._resolve(http, source)
            except HubDownloadFailed as exc:
                existing = committed_snapshot(models_dir, source)
                if existing is not None and exc.status is None:
                    log.warning("hub unreachable (%s); using the committed snapshot %s", exc, existing)
                    return existing
                raise
            selection = source.selection_name(commit)
            final = snapshot_path(models_dir, source, selection)
            if not final.is_dir():
                await self._download_all(http, source, commit, files, final, progress)
            _write_ref(ref_path(models_dir, source), selection)
            return final

    async def _resolve(self, http: httpx.AsyncClient, source: HuggingFaceSource) -> tuple[str, list[HubFile]]:
        url = f"{self.endpoint}/api/models/{source.repo}/revision/{quote(source.revision, safe='')}"
        try:
            response = await http.get(url, params={"blobs": "true"}, headers=self._headers())
        except httpx.HTTPError as exc:
            raise HubDownloadFailed(
                source.repo,
                None,
                f"cannot reach the hub at {self.endpoint}: {exc!r}; "
                "check HF_ENDPOINT and the frontend's network",
            ) from None
        if response.status_code != 200:
            raise HubDownloadFailed(source.repo, response.status_code, _status_hint(response, source))
        try:
            payload = response.json()
            commit = str(payload["sha"])
            siblings = payload.get("siblings") or []
        except (ValueError, KeyError, TypeError):
            raise HubDownloadFailed(
                source.repo, 200, f"unexpected answer from {url}: {response.text[:200]!r}"
            ) from None
        if not COMMIT_RE.fullmatch(commit):  # '../..' would put the snapshot outside the models directory
            raise HubDownloadFailed(
                source.repo,
                200,
                f"the hub at {self.endpoint} answered commit {commit[:80]!r}, "
                "not a hex commit id; nothing was downloaded (check HF_ENDPOINT)",
            )
        files = [f for f in (_hub_file(s) for s in siblings) if f is not None and _selected(f.path, source)]
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
        http: httpx.AsyncClient,
        source: HuggingFaceSource,
        commit: str,
        files: list[HubFile],
        final: Path,
        progress,
    ) -> None:  # type: ignore[no-untyped-def]
        incomplete = final.with_name(f".incomplete-{final.name}")
        incomplete.mkdir(parents=True, exist_ok=True)
        lock_file = await asyncio.to_thread(_lock_exclusive, incomplete.with_name(f".{final.name}.lock"))
        try:
            if final.is_dir():  # another frontend finished it while we waited for the lock
                return
            for index, hub_file in enumerate(files, start=1):
                progress.on_file(index, len(files), hub_file.size_bytes or 0)
                await self._download(http, source, commit, hub_file, incomplete, progress)
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

    async def _download(
        self,
        http: httpx.AsyncClient,
        source: HuggingFaceSource,
        commit: str,
        hub_file: HubFile,
        into: Path,
        progress,
    ) -> None:  # type: ignore[no-untyped-def]
        target = into.joinpath(*hub_file.path.split("/"))
        if target.is_file() and hub_file.size_bytes in (None, target.stat().st_size):
            progress.on_bytes(target.stat().st_size, target.stat().st_size)
            return  # finished before an interruption
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        url = f"{self.endpoint}/{source.repo}/resolve/{commit}/{quote(hub_file.path)}"
        digest = hashlib.sha256()
        try:
            async with http.stream("GET", url, headers=self._headers()) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise HubDownloadFailed(
                        source.repo,
                        response.status_code,
                        f"GET {hub_file.path}: {_status_hint(response, source)}",
                    )
                total = hub_file.size_bytes or int(response.headers.get("content-length") or 0)
                received = await _save(response, part, digest, total, progress)
        except httpx.HTTPError as exc:
            raise HubDownloadFailed(
                source.repo, None, f"downloading {hub_file.path} from {self.endpoint}: {exc!r}"
            ) from None
        _verify(source, hub_file, received, digest.hexdigest(), part)
        os.replace(part, target)
        try:
            record_hash(target, digest.hexdigest())  # the stager need not re-hash it
        except OSError:
            pass


async def _save(response: httpx.Response, part: Path, digest, total: int, progress) -> int:  # type: ignore[no-untyped-def]
    received = 0
    reported = 0
    with open(part, "wb") as file:
        async for chunk in response.aiter_bytes(DOWNLOAD_CHUNK_BYTES):
            await asyncio.to_thread(_write_and_hash, file, digest, chunk)
            received += len(chunk)
            if received - reported >= PROGRESS_EVERY_BYTES:
                reported = received
                progress.on_bytes(received, max(total, received))
    progress.on_bytes(received, max(total, received))
    return received


def _write_and_hash(file, digest, chunk: bytes) -> None:  # type: ignore[no-untyped-def]
    file.write(chunk)
    digest.update(chunk)


def _verify(source: HuggingFaceSource, hub_file: HubFile, received: int, actual: str, part: Path) -> None:
    problem = None
    if hub_file.size_bytes is not None and received != hub_file.size_bytes:
        problem = f"got {received} bytes, the hub lists {hub_file.size_bytes}"
    elif hub_file.lfs_sha256 is not None and actual != hub_file.lfs_sha256:
        problem = f"sha256 {actual} does not match the hub's {hub_file.lfs_sha256}"
    if problem is not None:
        part.unlink(missing_ok=True)
        raise HubDownloadFailed(source.repo, 200, f"{hub_file.path}: {problem}")


def _hub_file(sibling: object) -> HubFile | None:
    if not isinstance(sibling, dict) or not isinstance(sibling.get("rfilename"), str):
        return None
    path = sibling["rfilename"]
    parts = PurePosixPath(path).parts
    if not path or path.startswith("/") or "\\" in path or any(p in ("..", ".") for p in parts):
        log.warning("ignoring unsafe file name %r in a hub listing", path)
        return None
    lfs_field = sibling.get("lfs")
    lfs: dict[str, Any] = lfs_field if isinstance(lfs_field, dict) else {}
    size = lfs.get("size", sibling.get("size"))
    sha = lfs.get("sha256")
    return HubFile(path, size if isinstance(size, int) else None, sha if isinstance(sha, str) else None)


def _selected(path: str, source: HuggingFaceSource) -> bool:
    if not source.include:
        return not path.startswith(".git")
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in source.include)


def _status_hint(response: httpx.Response, source: HuggingFaceSource) -> str:
    if response.status_code in (401, 403):
        return (
            f"HTTP {response.status_code}: repo {source.repo!r} is gated or private; set HF_TOKEN on the "
            "frontend (workers never need it)"
        )
    if response.status_code == 404:
        return f"HTTP 404: repo {source.repo!r} or revision {source.revision!r} not found on the hub"
    return f"HTTP {response.status_code}: {response.text[:200]!r}"


def _lock_exclusive(path: Path):  # type: ignore[no-untyped-def]
    file = open(path, "a+b")
    fcntl.flock(file.fileno(), fcntl.LOCK_EX)
    return file


def _write_ref(path: Path, selection: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(selection, encoding="utf-8")
    os.replace(temp, path)
