"""Frontend side of ephemeral request inputs: stage a request's files on the worker that serves it, then
release them, whatever happens to the request.

An endpoint that receives a file (a multipart audio upload, an image part, a data URL) uses it like this::

    async with request_inputs(staging_ctx, StagingTarget(node_name, node_http_address)) as inputs:
        audio_path = await inputs.stage("audio", upload.filename, await upload.read())
        reply = await backend.AudioTranscription(TranscriptRequest(dst=audio_path, ...))
    # here every staged input is deleted on the worker and its reservation dropped

* The target is the node the chosen replica runs on (its file server, the worker's base port - 1).
* Each file goes to ``ephemeral/<category>/<8-char request id>/<basename>`` with one verified ``PUT``
  (``X-Content-SHA256``); :meth:`RequestInputs.stage` returns the worker-local path to hand to the backend.
* The worker reserves the file's size before writing it and refuses it when its ephemeral budget or its
  free-space headroom would be passed: :class:`~corral.staging.errors.InputStorageFull` (answer the client
  ``exc.client_status`` (503) with ``Retry-After: exc.retry_after_s`` and ``exc.message``). Any other
  failure is :class:`~corral.staging.errors.RequestInputFailed`.
* Leaving the block -- normally, by an exception, or by cancellation (a client disconnect) -- calls
  ``POST /v1/files/release`` with the exact keys, including one whose upload was cut. The release is
  shielded from a second cancellation and bounded by :data:`RELEASE_TIMEOUT_S`; if it fails it is logged,
  never raised over the request's own outcome, and the worker's one-hour recovery sweep removes the files.

Inputs always go over the worker's file server, in S3 mode too (it runs on every worker): a request's
input is read once by one worker, so a round trip through the bucket would only add latency and leave
an object to delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import secrets
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import quote

import httpx

from corral.staging.ephemeral_http import RELEASE_PATH
from corral.staging.errors import InputStorageFull, RequestInputFailed
from corral.staging.keys import EPHEMERAL_KEY_PREFIX, is_reserved_name, validate_key
from corral.staging.receiver import HEADER_CONTENT_SHA256
from corral.staging.stager import StagingContext, StagingTarget

log = logging.getLogger(__name__)

REQUEST_ID_HEX_CHARS = 8  # the reference's `ephemeral/<category>/<8-char request id>/<basename>`
MAX_NAME_CHARS = 100
HASH_IN_THREAD_BYTES = 1 << 20  # hash larger inputs off the event loop
PUT_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=120.0, pool=10.0)
RELEASE_TIMEOUT_S = 10.0
_CATEGORY_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_releases: set[asyncio.Task[None]] = set()  # releases that outlive a twice-cancelled request


@dataclass
class RequestInputs:
    """One request's inputs on one worker; use it as an ``async with`` block (see the module docstring)."""

    http: httpx.AsyncClient
    worker_http_address: str  # host:port of the worker's file server
    token: str  # the registration token (the worker's file server bearer)
    request_id: str = field(default_factory=lambda: secrets.token_hex(REQUEST_ID_HEX_CHARS // 2))
    keys: list[str] = field(default_factory=list)  # every key a PUT was attempted for, in order
    released: bool = False

    @property
    def worker_url(self) -> str:
        return f"http://{self.worker_http_address}"

    async def __aenter__(self) -> RequestInputs:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if not self.keys:
            self.released = True
            return
        release = asyncio.create_task(self.release(), name=f"release-inputs-{self.request_id}")
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:  # cancelled again while releasing: the release still finishes
            _releases.add(release)
            release.add_done_callback(_releases.discard)
            raise

    def key_for(self, category: str, filename: str) -> str:
        """The key the next input of ``category`` named ``filename`` gets (its name made safe and unique)."""
        if not _CATEGORY_RE.match(category):
            raise ValueError(f"input category {category!r} must be 1-32 of a-z, 0-9, '_', '-' (e.g. 'audio')")
        base = f"{EPHEMERAL_KEY_PREFIX}{category}/{self.request_id}/"
        name = safe_input_name(filename)
        stem, dot, suffix = name.rpartition(".") if "." in name[1:] else (name, "", "")
        key, copy = base + name, 1
        while key in self.keys:
            copy += 1
            key = f"{base}{stem}-{copy}{dot}{suffix}"
        validate_key(key)
        return key

    async def stage(self, category: str, filename: str, data: bytes) -> str:
        """Put ``data`` on the worker as this request's input; returns the worker-local path for the backend.

        Raises :class:`InputStorageFull` when the worker has no room for it (nothing was written), else
        :class:`RequestInputFailed` on any other refusal or when the worker is unreachable.
        """
        if self.released:
            raise RuntimeError(f"request {self.request_id}'s inputs were already released")
        key = self.key_for(category, filename)
        self.keys.append(key)  # before the PUT: a cut upload is released too
        digest = (
            (await asyncio.to_thread(_sha256, data)) if len(data) > HASH_IN_THREAD_BYTES else _sha256(data)
        )
        headers = {
            "Authorization": f"Bearer {self.token}",
            HEADER_CONTENT_SHA256: digest,
            "Content-Type": "application/octet-stream",
        }
        try:
            answer = await self.http.put(
                f"{self.worker_url}/v1/files/{quote(key)}", content=data, headers=headers, timeout=PUT_TIMEOUT
            )
        except httpx.HTTPError as exc:
            raise RequestInputFailed(
                key=key, worker_url=self.worker_url, status=None, message=f"{type(exc).__name__}: {exc}"
            ) from None
        if answer.status_code == 507:
            message, setting = _error_fields(answer)
            raise InputStorageFull(message, setting=setting, key=key)
        local_path = _local_path(answer)
        if answer.status_code != 200 or local_path is None:
            raise RequestInputFailed(
                key=key,
                worker_url=self.worker_url,
                status=answer.status_code,
                message=_error_fields(answer)[0],
            )
        log.debug("staged request input %s (%d bytes) on %s", key, len(data), self.worker_http_address)
        return local_path

    async def read(self, key: str, max_bytes: int) -> bytes:
        """The bytes of one of this request's files on the worker (a backend's output written into a staged key);
        raises :class:`RequestInputFailed` when the worker does not answer it whole within ``max_bytes``."""
        answer = await self.http.get(
            f"{self.worker_url}/v1/files/{quote(key)}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=PUT_TIMEOUT,
        )
        if answer.status_code != 200 or len(answer.content) > max_bytes:
            raise RequestInputFailed(
                key=key,
                worker_url=self.worker_url,
                status=answer.status_code,
                message=f"{len(answer.content)} bytes (at most {max_bytes} are read back)",
            )
        return answer.content

    async def release(self) -> None:
        """Delete every input this request staged (or tried to) and drop their reservations; never raises.

        Idempotent on the worker; called by the ``async with`` block's exit."""
        if self.released or not self.keys:
            self.released = True
            return
        self.released = True
        try:
            answer = await asyncio.wait_for(
                self.http.post(
                    f"{self.worker_url}{RELEASE_PATH}",
                    json={"keys": self.keys},
                    headers={"Authorization": f"Bearer {self.token}"},
                ),
                RELEASE_TIMEOUT_S,
            )
        except Exception as exc:  # a cleanup: it must not replace the request's own outcome
            log.warning(
                "could not release request %s's inputs on %s (%s: %s); the worker's recovery sweep "
                "removes them within the hour",
                self.request_id,
                self.worker_http_address,
                type(exc).__name__,
                exc,
            )
            return
        if answer.status_code != 200:
            log.warning(
                "worker %s refused to release request %s's inputs (HTTP %d: %s); its recovery sweep "
                "removes them within the hour",
                self.worker_http_address,
                self.request_id,
                answer.status_code,
                _error_fields(answer)[0],
            )


def request_inputs(
    ctx: StagingContext, target: StagingTarget, request_id: str | None = None
) -> RequestInputs:
    """The inputs of one request bound for ``target`` (the node of the chosen replica), over ``ctx``'s
    HTTP client and token. ``request_id`` defaults to 8 random hex characters."""
    inputs = RequestInputs(ctx.http, target.http_address, ctx.token)
    if request_id is not None:
        inputs.request_id = request_id
    return inputs


def safe_input_name(filename: str) -> str:
    """A client's file name as one safe key segment: its basename, characters outside ``A-Za-z0-9._-`` as
    ``_``, no leading dots, at most :data:`MAX_NAME_CHARS`; ``input`` when nothing is left. A name the worker
    reserves for its own metadata (``*.sha256``) gets ``.bin`` appended."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE_NAME_CHARS.sub("_", base).lstrip(".")
    if len(name) > MAX_NAME_CHARS:
        stem, dot, suffix = name.rpartition(".")
        suffix = suffix[:16] if dot else ""
        name = (
            f"{(stem if dot else name)[: MAX_NAME_CHARS - len(suffix) - 1]}{'.' + suffix if suffix else ''}"
        )
    if not name or name in (".", ".."):
        name = "input"
    if is_reserved_name(name):
        name += ".bin"
    return name


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _local_path(answer: httpx.Response) -> str | None:
    with contextlib.suppress(ValueError):
        payload = answer.json()
        if isinstance(payload, dict) and isinstance(payload.get("local_path"), str):
            return str(payload["local_path"])
    return None


def _error_fields(answer: httpx.Response) -> tuple[str, str]:
    """(the worker's error message, the setting it names) of an error answer."""
    with contextlib.suppress(ValueError):
        payload = answer.json()
        if isinstance(payload, dict):
            return str(payload.get("error") or answer.text), str(payload.get("setting") or "")
    return answer.text[:500], ""
