"""A real frontend sheds slow and hostile clients (issue 21 item 2): raw sockets against `corral run`.

Headers that trickle in and bodies that stop arriving get 408 and a closed connection once their
deadline passes, while normal requests are served; each request of a kept-alive connection has its own
deadline; a stream longer than both deadlines is not cut; past the connection cap a new connection gets
503 at once. Deadlines are short here so the tests run fast; no test asserts a duration.
"""

from __future__ import annotations

import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.cluster import Cluster
from support.prometheus import metric_value
from support.waiting import wait_for

pytestmark = pytest.mark.slow

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.5
GUARD_S = 30.0  # a socket that stays unanswered this long means the frontend never shed it (never asserted as timing)
TRICKLE_S = 0.3  # one header byte this often: always inside any per-read timeout
SLOW_CLIENTS = 40


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(
        root=state_root / f"e2e-slow-{uuid.uuid4().hex[:6]}", database_url=make_database(), nats_url=nats_url
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    try:
        c.start_frontend(
            "--http-header-timeout", f"{HEADER_TIMEOUT_S}s", "--http-body-timeout", f"{BODY_TIMEOUT_S}s"
        )
        yield c
    finally:
        c.stop()


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=GUARD_S)


def _read_to_eof(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass  # a byte we sent crossed the server's close: its answer may be lost to the reset (the client's race)
    return data


def _read_response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length, leaving the connection open."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)\r\ncontent-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _trickle(socks: list[socket.socket]) -> dict[socket.socket, bytes]:
    """Send one header byte per TRICKLE_S on every socket until the frontend answers and closes each one."""
    answers: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + GUARD_S
    while len(answers) < len(socks) and time.monotonic() < deadline:
        open_socks = [s for s in socks if s not in answers]
        readable, _, _ = select.select(open_socks, [], [], TRICKLE_S)
        for sock in readable:
            answers[sock] = _read_to_eof(sock)
        for sock in open_socks:
            if sock not in answers:
                try:
                    sock.sendall(b"a")
                except OSError:
                    answers[sock] = b""
    return answers


def test_slow_header_sockets_get_408_and_are_closed_while_a_normal_request_is_served(
    cluster: Cluster,
) -> None:
    url = cluster.frontend_url
    socks = [_connect(url) for _ in range(SLOW_CLIENTS)]
    try:
        for sock in socks:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: corral\r\nX-Pad: ")
        result: dict[socket.socket, bytes] = {}
        trickler = threading.Thread(target=lambda: result.update(_trickle(socks)))
        trickler.start()
        normal = [httpx.get(f"{url}/v1/models", timeout=10).status_code for _ in range(5)]
        trickler.join(GUARD_S + 5)
    finally:
        for sock in socks:
            sock.close()
    assert normal == [200] * 5
    assert len(result) == SLOW_CLIENTS, f"{SLOW_CLIENTS - len(result)} slow clients were never shed"
    answered = [
        answer for answer in result.values() if answer
    ]  # the others were reset by their own late byte
    assert {answer.split(b"\r\n", 1)[0] for answer in answered} == {b"HTTP/1.1 408 Request Timeout"}
    assert len(answered) >= SLOW_CLIENTS // 2
    body = answered[0].partition(b"\r\n\r\n")[2]
    assert httpx.Response(408, content=body).json()["error"] == {
        "message": f"the request's headers did not arrive within {HEADER_TIMEOUT_S:g}s; send them at once, or raise "
        "CORRAL_HTTP_HEADER_TIMEOUT",
        "type": "invalid_request_error",
        "code": "request_timeout",
    }
    assert metric_value(url, 'corral_http_request_timeouts_total{phase="headers"}') >= SLOW_CLIENTS


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(cluster: Cluster) -> None:
    with _connect(cluster.frontend_url) as sock:
        assert _read_to_eof(sock) == b""


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/settings"])  # the fast path; a FastAPI route
def test_a_body_that_stops_arriving_gets_408_naming_the_knob_and_no_traceback(
    cluster: Cluster, path: str
) -> None:
    with _connect(cluster.frontend_url) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: corral\r\nAuthorization: Bearer {cluster.admin_key}\r\n"
            f'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"model"'.encode()
        )
        answer = _read_to_eof(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert httpx.Response(408, content=body).json()["error"]["message"] == (
        f"the request's body did not arrive within {BODY_TIMEOUT_S:g}s of its headers; raise CORRAL_HTTP_BODY_TIMEOUT "
        "for slow uploads"
    )
    time.sleep(0.5)  # let the app notice the disconnect before reading its log
    assert cluster.frontend is not None
    assert "Traceback" not in cluster.frontend.log()


def test_each_request_on_a_kept_alive_connection_has_its_own_header_deadline(cluster: Cluster) -> None:
    with _connect(cluster.frontend_url) as sock:
        statuses = []
        for _ in range(4):  # together longer than one header deadline: each request restarts it
            time.sleep(HEADER_TIMEOUT_S / 2)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: corral\r\n\r\n")
            statuses.append(_read_response(sock).split(b"\r\n", 1)[0])
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: corral\r\n")  # the fifth never finishes its headers
        fifth = _read_to_eof(sock)
    assert statuses == [b"HTTP/1.1 200 OK"] * 4
    assert fifth.startswith(b"HTTP/1.1 408 ")


def test_a_stream_longer_than_both_deadlines_is_not_cut(cluster: Cluster) -> None:
    url = cluster.frontend_url
    with httpx.stream("GET", f"{url}/api/events", headers=cluster.admin_headers, timeout=GUARD_S) as stream:
        lines = stream.iter_lines()
        assert next(lines) == "event: hello"
        time.sleep(2 * (HEADER_TIMEOUT_S + BODY_TIMEOUT_S))
        name = f"node-{uuid.uuid4().hex[:6]}"
        reply = httpx.post(
            f"{url}/api/node/register",
            json={"name": name, "address": "127.0.0.1:1", "token": cluster.token},
            headers={"Authorization": f"Bearer {cluster.token}"},
            timeout=10,
        )
        assert reply.status_code == 201
        node_id = reply.json()["id"]
        seen = next(line for line in lines if node_id in line)  # the stream still delivers
    assert '"kind": "node"' in seen or '"kind":"node"' in seen


@pytest.fixture(scope="module")
def capped(cluster: Cluster) -> Iterator[str]:
    """A second frontend with a cap of 8 connections and a header deadline long enough to hold them."""
    proc, url = cluster.spawn_frontend(
        "frontend-capped", "--max-connections", "8", "--http-header-timeout", "60s"
    )
    try:
        yield url
    finally:
        proc.stop()


def test_past_the_connection_cap_a_new_connection_gets_503_at_once_and_served_ones_keep_working(
    capped: str,
) -> None:
    holders = [_connect(capped) for _ in range(8)]  # each sends nothing: only the cap can refuse the next
    try:
        with _connect(capped) as extra:
            refused = _read_to_eof(extra)  # answered without sending a byte: at once, not at a deadline
    finally:
        for sock in holders:
            sock.close()
    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert b"\r\nretry-after: 1\r\n" in head
    assert httpx.Response(503, content=body).json()["error"]["message"] == (
        "this frontend process holds its limit of 8 open connections; retry shortly, or raise CORRAL_MAX_CONNECTIONS"
    )
    wait_for(lambda: _status(f"{capped}/healthz") == 200, "the capped frontend serving again", GUARD_S)
    assert metric_value(capped, "corral_http_connections_refused_total") >= 1


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return 0


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",  # one huge header
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-%d: 1\r\n" % i for i in range(20_000))
        + b"\r\n",
        b"GET /v1/models?" + b"q" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a huge request line
    ],
    ids=["one-huge-header", "many-headers", "huge-url"],
)
def test_headers_past_the_size_cap_get_431_naming_the_knob(cluster: Cluster, request_head: bytes) -> None:
    """httptools takes headers of any size and number (uvicorn passed a 1 MiB header and 20,000 headers with a
    200): a client could fill the frontend's memory within the header deadline."""
    before = metric_value(cluster.frontend_url, "corral_http_headers_too_large_total")
    with _connect(cluster.frontend_url) as sock:
        for at in range(0, len(request_head), 16384):  # stop sending once answered: bytes sent to a closed
            if select.select([sock], [], [], 0)[0]:  # socket reset the connection, which can drop the answer
                break
            try:
                sock.sendall(request_head[at : at + 16384])
            except (BrokenPipeError, ConnectionResetError):
                break
        head, _, body = _read_to_eof(sock).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), head[:200]
    assert "CORRAL_HTTP_MAX_HEADER_BYTES" in httpx.Response(431, content=body).json()["error"]["message"]
    assert metric_value(cluster.frontend_url, "corral_http_headers_too_large_total") == before + 1
    assert (
        httpx.get(f"{cluster.frontend_url}/v1/models", headers={"X-Fine": "a" * 8000}, timeout=10).status_code
        == 200
    )
