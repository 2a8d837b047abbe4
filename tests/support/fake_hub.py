"""A local stand-in for the Hugging Face hub's file API (selected with HF_ENDPOINT), recording every request.

Implements what ``huggingface_hub`` (the frontend's downloader) uses: ``GET /api/models/<repo>/revision/<rev>``
(``?blobs=true``: sha and siblings with size and LFS sha256) and ``HEAD``/``GET /<repo>/resolve/<commit>/<path>``
with the headers the library reads: ``X-Repo-Commit``, ``ETag`` (the git blob id, or the sha256 for an LFS
file, which also gets ``X-Linked-Etag`` and ``X-Linked-Size`` as on the real hub) and ``Content-Length``.
With ``token`` set, every request needs ``Authorization: Bearer <token>`` (a gated repo).

``cdn`` set: an LFS file's resolve answers ``302`` to ``<cdn>/<repo>/resolve/<commit>/<path>`` (another origin,
as the real hub's CDN is). ``hold_after`` set: a file body longer than it stops after that many bytes until
``release`` is set (a download in flight, for cancellation).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class HubRequest:
    path: str
    authorization: str
    client_port: int
    method: str = "GET"


@dataclass
class FakeHub:
    repo: str
    files: dict[str, bytes]
    token: str = ""
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    lfs_suffixes: tuple[str, ...] = (".gguf", ".bin")
    host: str = "127.0.0.1"
    cdn: str = ""
    hold_after: int | None = None
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[HubRequest] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._answer("GET")

            def do_HEAD(self) -> None:
                self._answer("HEAD")

            def _answer(self, method: str) -> None:
                path = unquote(urlsplit(self.path).path)
                auth = self.headers.get("Authorization") or ""
                hub.requests.append(HubRequest(path, auth, self.client_address[1], method))
                self._send(method, *hub.answer(path, auth))

            def _send(self, method: str, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if method == "HEAD":
                    return
                if hub.hold_after is not None and len(body) > hub.hold_after:
                    self.wfile.write(body[: hub.hold_after])
                    self.wfile.flush()
                    hub.release.wait()
                    body = body[hub.hold_after :]
                self.wfile.write(body)

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def answer(self, path: str, auth: str) -> tuple[int, bytes, dict[str, str]]:
        """Status, body and headers for a GET of ``path`` (a HEAD gets the same without the body)."""
        json_type = {"Content-Type": "application/json"}
        if self.token and auth != f"Bearer {self.token}":
            return 401, b'{"error":"Access to this repo is restricted"}', json_type
        api_prefix = f"/api/models/{self.repo}/revision/"
        resolve_prefix = f"/{self.repo}/resolve/{self.commit}/"
        if path.startswith(api_prefix) and path[len(api_prefix) :] in self.revisions:
            return 200, json.dumps(self.listing()).encode(), json_type
        name = path[len(resolve_prefix) :] if path.startswith(resolve_prefix) else ""
        if name not in self.files:
            return 404, b'{"error":"Repository not found"}', json_type
        if self.cdn and name.endswith(self.lfs_suffixes):
            return 302, b"", {**self.file_headers(name), "Location": f"{self.cdn}{resolve_prefix}{name}"}
        return 200, self.files[name], {"Content-Type": "application/octet-stream", **self.file_headers(name)}

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def listing(self) -> dict[str, Any]:  # the JSON document the hub answers
        siblings = []
        for name, data in sorted(self.files.items()):
            entry: dict[str, object] = {"rfilename": name, "size": len(data)}
            if name.endswith(self.lfs_suffixes):
                entry["lfs"] = {
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "pointerSize": 130,
                }
            siblings.append(entry)
        return {"id": self.repo, "modelId": self.repo, "sha": self.commit, "siblings": siblings}

    def file_headers(self, name: str) -> dict[str, str]:
        """The hub's headers for one file of the commit (what ``hf_hub_download`` reads from its HEAD)."""
        data = self.files[name]
        headers = {"X-Repo-Commit": self.commit}
        if name.endswith(self.lfs_suffixes):
            sha256 = hashlib.sha256(data).hexdigest()
            headers.update(
                {"ETag": f'"{sha256}"', "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data))}
            )
        else:
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            headers["ETag"] = f'"{blob}"'
        return headers

    def file_requests(self) -> list[HubRequest]:
        """The downloads (GETs of a file; the library's metadata HEADs are left out)."""
        return [r for r in self.requests if "/resolve/" in r.path and r.method == "GET"]
