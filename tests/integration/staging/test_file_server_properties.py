"""Property: whatever a client sends to the worker file server, the answer is never a 5xx or a traceback.

Requests are written on raw sockets (no client library smoothing them): any method, paths around
every route with hostile segments and percent-escapes, right/wrong/missing tokens, malformed
Content-Range, hash and length headers, chunked framing that may be broken, short bodies.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.staging.file_server import ServerLimits, ThreadedFileServer
from corral.staging.receiver import build_file_server

TOKEN = "s3cret-registration-token"
LIMITS = ServerLimits(max_connections=16, header_timeout_s=2.0, idle_timeout_s=0.3)
READ_GUARD_S = 20.0

ROUTES = [
    "/v1/files/",
    "/v1/files/models/",
    "/v1/files/data/",
    "/v1/files/ephemeral/",
    "/v1/files-list/",
    "/v1/files/temp",
    "/healthz",
    "/readyz",
    "/",
    "/v1",
    "/v2/",
]
SEGMENT_PIECES = [
    "..",
    ".",
    "",
    "m",
    "x.gguf",
    "x.gguf.sha256",
    ".x.upload",
    "%00",
    "%2F",
    "%2e%2e",
    "%0d%0a",
    "%ff",
    "\u00e9",
    "a" * 300,
    "sub",
    "model.bin",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedFileServer]:
    models: Path = tmp_path_factory.mktemp("props") / "models"
    models.mkdir()
    (models / "m").mkdir()
    (models / "m" / "model.bin").write_bytes(b"0123456789")
    (models / "afile").write_bytes(b"x")  # a key below a file must be a 4xx, not an OSError
    file_server = build_file_server(
        models, TOKEN, readiness=lambda: None, limits=LIMITS, max_upload_bytes=1 << 20
    )
    file_server.start_sync("127.0.0.1", 0)
    yield file_server
    file_server.stop_sync()


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS", "BREW"]))
    segments = draw(
        st.lists(
            st.one_of(st.sampled_from(SEGMENT_PIECES), st.text(alphabet="abc./%09AF-_~", max_size=12)),
            max_size=5,
        )
    )
    path = draw(st.sampled_from(ROUTES)) + "/".join(segments)
    if draw(st.booleans()):
        path += "?" + draw(st.text(alphabet="ab=&%", max_size=8))
    headers = {"Host": "w"}
    auth = draw(st.sampled_from(["right", "wrong", "none", "scheme"]))
    if auth != "none":
        headers["Authorization"] = {
            "right": f"Bearer {TOKEN}",
            "wrong": "Bearer nope",
            "scheme": f"Basic {TOKEN}",
        }[auth]
    if draw(st.booleans()):
        headers["Content-Range"] = draw(
            st.one_of(
                st.builds(
                    lambda a, b, t: f"bytes {a}-{b}/{t}",
                    st.integers(-5, 40),
                    st.integers(-5, 40),
                    st.integers(-5, 2**70),
                ),
                st.builds(lambda t: f"bytes */{t}", st.integers(-5, 2**70)),
                st.text(alphabet="bytes */-0123456789x", max_size=20),
            )
        )
    if draw(st.booleans()):
        headers["X-Content-SHA256"] = draw(
            st.one_of(st.just("0" * 64), st.text(alphabet="0123456789abcdefg", max_size=70))
        )
    body = draw(st.binary(max_size=64))
    framing = draw(
        st.sampled_from(["length", "chunked", "broken-chunked", "short", "garbage-length", "none"])
    )
    if framing == "length":
        headers["Content-Length"] = str(len(body))
    elif framing == "short":
        headers["Content-Length"] = str(len(body) + draw(st.integers(1, 100)))
    elif framing == "garbage-length":
        headers["Content-Length"] = draw(
            st.sampled_from(["-1", "abc", "1e3", " ", "99999999999999999999999"])
        )
    elif framing in ("chunked", "broken-chunked"):
        headers["Transfer-Encoding"] = "chunked"
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if framing == "chunked" else b"zz\r\n" + body
    elif framing == "none":
        body = b""
    if draw(st.booleans()):
        headers["Expect"] = "100-continue"
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("utf-8", errors="surrogateescape") + body


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=READ_GUARD_S) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before reading everything: its answer is still read
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests())
def test_no_request_gets_a_5xx_or_a_traceback(server: ThreadedFileServer, request: bytes) -> None:
    answer = _exchange(server.port, request)
    while answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"):  # the interim answer, then the real one
        answer = answer[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
    assert answer.startswith(b"HTTP/1."), (request[:300], answer[:300])
    status = int(answer.split(b" ", 2)[1])
    assert status < 500, (request[:300], answer[:600])
    assert b"Traceback" not in answer
