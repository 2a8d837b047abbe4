"""A local stand-in for the Hugging Face hub's file API (selected with HF_ENDPOINT), recording every request.

Implements what the frontend's downloader uses: ``GET /api/models/<repo>/revision/<rev>`` and
``GET /<repo>/resolve/<commit>/<path>``. With ``token`` set, both need ``Authorization: Bearer <token>``
(a gated repo).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass
class HubRequest:
    path: str
    authorization: str
    client_port: int


@dataclass
class FakeHub:
    repo: str
    files: dict[str, bytes]
    token: str = ""
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    lfs_suffixes: tuple[str, ...] = (".gguf", ".bin")
    requests: list[HubRequest] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = unquote(urlsplit(self.path).path)
                auth = self.headers.get("Authorization") or ""
                hub.requests.append(HubRequest(path, auth, self.client_address[1]))
                if hub.token and auth != f"Bearer {hub.token}":
                    self._send(401, b'{"error":"Access to this repo is restricted"}')
                    return
                api_prefix = f"/api/models/{hub.repo}/revision/"
                resolve_prefix = f"/{hub.repo}/resolve/{hub.commit}/"
                if path.startswith(api_prefix) and path[len(api_prefix) :] in hub.revisions:
                    self._send(200, json.dumps(hub.listing()).encode())
                elif path.startswith(resolve_prefix) and path[len(resolve_prefix) :] in hub.files:
                    self._send(200, hub.files[path[len(resolve_prefix) :]], "application/octet-stream")
                else:
                    self._send(404, b'{"error":"Repository not found"}')

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def listing(self) -> dict[str, object]:
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

    def file_requests(self) -> list[HubRequest]:
        return [r for r in self.requests if "/resolve/" in r.path]
