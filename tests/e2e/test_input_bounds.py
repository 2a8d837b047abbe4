"""Bounded input and bounded resources on a real frontend (`corral run` on real PostgreSQL and NATS):
out-of-range fields are 400s naming the field and the range; text that is not valid Unicode is a 400 naming
its field (and a model config write that fails leaves no temporary file); oversized bodies are 413s before
auth and before they are read; past the concurrency limit a request is answered 429 + Retry-After at once."""

from __future__ import annotations

import json
import select
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from support.cluster import Cluster
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MODEL = "bounds-sim"
NODE_API_LIMIT = 1 << 20  # CORRAL_NODE_API_MAX_BODY's default
TOO_LARGE_NODE_API = (
    "request body too large: worker node API requests (/api/node/*) accept at most 1048576 "
    "bytes; raise CORRAL_NODE_API_MAX_BODY to allow more"
)


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-bounds", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / f"{MODEL}.yaml").write_text(
        f"name: {MODEL}\nbackend: simulator\nparameters:\n  model: {MODEL}\n"
    )
    try:
        c.start_frontend()
        yield c
    finally:
        c.stop()


def _error(response: httpx.Response) -> dict[str, object]:
    assert "Traceback" not in response.text
    return dict(response.json()["error"])


def _chat(cluster: Cluster, **fields: object) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}
    return httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=30)


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"max_tokens": 3_000_000_000},
            "invalid request: field 'max_tokens': must be between 1 and 2147483647",
        ),
        ({"seed": 2**40}, "invalid request: field 'seed': must be between -2147483648 and 2147483647"),
        (
            {"max_completion_tokens": 0},
            "invalid request: field 'max_completion_tokens': must be between 1 and 2147483647",
        ),
        (
            {"temperature": 1e39},
            "invalid request: field 'temperature': must be a finite number between 0 and 2",
        ),
    ],
)
def test_an_out_of_range_number_in_a_chat_request_is_a_400_naming_the_field_and_range(
    cluster: Cluster, fields: dict[str, object], message: str
) -> None:
    response = _chat(
        cluster, **fields
    )  # the model is configured: without bounds protobuf raised ValueError (500)
    assert response.status_code == 400
    error = _error(response)
    assert error["message"] == message and error["param"] == next(iter(fields))


def test_an_out_of_range_seed_on_completions_is_a_400(cluster: Cluster) -> None:
    response = httpx.post(
        f"{cluster.frontend_url}/v1/completions",
        timeout=30,
        json={"model": MODEL, "prompt": "hi", "seed": 2**40},
    )
    assert response.status_code == 400
    assert (
        _error(response)["message"]
        == "invalid request: field 'seed': must be between -2147483648 and 2147483647"
    )


def _register(cluster: Cluster, **fields: object) -> httpx.Response:
    body = {
        "name": f"bounds-{time.monotonic_ns()}",
        "address": "127.0.0.1:50051",
        "token": cluster.token,
        **fields,
    }
    return httpx.post(
        f"{cluster.frontend_url}/api/node/register",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {cluster.token}"},
    )


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"address": "a" * 300},
            "invalid request: field 'address': String should have at most 255 characters",
        ),
        (
            {"labels": {"k" * 200: "v"}},
            "invalid request: field 'labels': key '"
            + "k" * 40
            + "…': String should have at most 128 characters",
        ),
        (
            {"total_vram": 2**70},
            "invalid request: field 'total_vram': must be between 0 and 9223372036854775807",
        ),
        (
            {"labels": {"zone": "v" * 300}},
            "invalid request: field 'labels.zone': String should have at most 255 characters",
        ),
        (
            {"max_replicas_per_model": 2**40},
            "invalid request: field 'max_replicas_per_model': must be between 0 and 1024",
        ),
    ],
)
def test_a_registration_field_past_its_column_is_a_400_naming_the_field(
    cluster: Cluster, fields: dict[str, object], message: str
) -> None:
    response = _register(
        cluster, **fields
    )  # without bounds: StringDataRightTruncationError / DataError (500)
    assert response.status_code == 400
    assert _error(response)["message"] == message


def test_a_heartbeat_past_bigint_is_a_400_naming_the_field(cluster: Cluster) -> None:
    registered = _register(cluster).json()
    response = httpx.post(
        f"{cluster.frontend_url}/api/node/{registered['id']}/heartbeat",
        json={"available_ram": 2**64},
        timeout=30,
        headers={"Authorization": f"Bearer {cluster.token}", "X-Node-Token": registered["node_token"]},
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "invalid heartbeat: field 'available_ram': must be between 0 and 9223372036854775807"
    )


@pytest.mark.parametrize(
    "method, path, body, message",
    [
        (
            "PUT",
            "/api/nodes/{node}/vram-budget",
            {"value": "99999999999TB"},
            "VRAM budget '99999999999TB' is too large; the most is 9223372036854775807 bytes (8 EiB)",
        ),
        (
            "PUT",
            "/api/nodes/{node}/vram-budget",
            {"value": "1" * 40},
            "invalid request: field 'value': must be at most 32 characters; use a percentage (80%), an amount (12GB, "
            "12GiB, 12000MB, raw bytes) or a fraction (0.8)",
        ),
        (
            "PUT",
            "/api/nodes/{node}/max-replicas-per-model",
            {"value": 2**63},
            "invalid request: field 'value': must be between 1 and 1024",
        ),
        (
            "GET",
            "/api/nodes/scheduling/" + "m" * 300,
            None,
            "invalid request: field 'model': String should have at most 255 characters",
        ),
        (
            "PUT",
            "/api/model-configs/" + "m" * 300,
            None,
            "invalid request: field 'name': String should have at most 255 characters",
        ),
        (
            "PUT",
            f"/api/model-configs/{MODEL}",
            "a: &x [1]\nb: *x\n",
            "the body is not valid YAML: YAML aliases (*name) are not accepted in a model config; write the value out\n"
            '  in "<byte string>", line 2, column 4:\n    b: *x\n       ^',
        ),
        (
            "PATCH",
            f"/api/model-configs/{MODEL}",
            {"context_size": 2**40},
            f"{MODEL}.yaml: field 'context_size' must be between -2147483648 and 2147483647, got 1099511627776",
        ),
        (
            "POST",
            "/api/nodes/scheduling",
            "[" * 100_000 + "]" * 100_000,
            'request body is not valid JSON; send {"model_name": "...", ...}',
        ),
    ],
)
def test_admin_fields_past_their_bounds_are_400s(
    cluster: Cluster, method: str, path: str, body: object, message: str
) -> None:
    node = _register(cluster).json()["id"]
    content = body if isinstance(body, str) else json.dumps(body) if body is not None else None
    response = httpx.request(
        method,
        cluster.frontend_url + path.format(node=node),
        content=content,
        timeout=30,
        headers={**cluster.admin_headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert str(_error(response)["message"]).endswith(message)


# --- valid text: a lone surrogate (YAML's or JSON's "\ud800" escape) can be stored neither in a file nor in
# PostgreSQL ------------------------------------------------------------------------------------------------------

LONE = "a\ud800"  # json.dumps writes it as the escape `"a\\ud800"`, which YAML and the standard library decode back


def _temporary_files(cluster: Cluster) -> list[str]:
    return sorted(p.name for p in cluster.models_dir.iterdir() if p.name.endswith(".tmp"))


def _refused_as_invalid_text(response: httpx.Response, field: str) -> None:
    assert response.status_code == 400, response.text
    error = _error(response)
    assert error["param"] == field, error
    assert f"field '{field}' is not valid text" in str(error["message"]), error


@pytest.mark.parametrize(
    "body, content_type",
    [
        (
            f'name: {MODEL}\nbackend: simulator\ndescription: "a\\ud800"\nparameters:\n  model: {MODEL}\n',
            "application/yaml",
        ),
        (
            json.dumps(
                {"name": MODEL, "backend": "simulator", "description": LONE, "parameters": {"model": MODEL}}
            ),
            "application/json",
        ),  # PUT reads YAML, a superset
    ],
)
def test_a_config_upload_with_a_lone_surrogate_is_a_400_naming_the_field_and_leaves_no_file(
    cluster: Cluster, body: str, content_type: str
) -> None:
    response = httpx.put(
        f"{cluster.frontend_url}/api/model-configs/{MODEL}",
        content=body.encode(),
        timeout=30,
        headers={**cluster.admin_headers, "Content-Type": content_type},
    )
    _refused_as_invalid_text(response, "description")  # was a 500 `internal error: UnicodeEncodeError`
    assert _temporary_files(cluster) == []
    assert "description" not in (cluster.models_dir / f"{MODEL}.yaml").read_text()


def test_a_config_patch_with_a_lone_surrogate_is_a_400_naming_the_field(cluster: Cluster) -> None:
    response = httpx.patch(
        f"{cluster.frontend_url}/api/model-configs/{MODEL}",
        timeout=30,
        content=json.dumps({"parameters": {"mmproj": "x\udc00"}}).encode(),
        headers={**cluster.admin_headers, "Content-Type": "application/json"},
    )
    _refused_as_invalid_text(response, "parameters.mmproj")
    assert _temporary_files(cluster) == []


def test_a_config_write_that_fails_leaves_no_temporary_file(cluster: Cluster) -> None:
    blocker = (
        cluster.models_dir / "blocked.yaml"
    )  # a non-empty directory where the file goes: the rename fails
    (blocker / "inside").mkdir(parents=True)
    try:
        response = httpx.put(
            f"{cluster.frontend_url}/api/model-configs/blocked",
            headers=cluster.admin_headers,
            content=b"name: blocked\nbackend: simulator\nparameters:\n  model: blocked\n",
            timeout=30,
        )
        assert _temporary_files(cluster) == []
        assert response.status_code == 200, response.text  # committed: the cluster has it, this file does not
        served = httpx.get(f"{cluster.frontend_url}/api/model-configs/blocked", headers=cluster.admin_headers)
        assert (
            served.json()["config_revision"] == response.json()["config_revision"]
        )  # memory follows the commit
    finally:
        shutil.rmtree(blocker)


@pytest.mark.parametrize(
    "method, path, body, field",
    [
        ("POST", "/api/keys", {"name": LONE}, "name"),  # FastAPI body models: pydantic names the field
        ("POST", "/api/agent-jobs", {"model": MODEL, "prompt": LONE}, "prompt"),
        # routes that read their body with json_body: orjson refuses the document (a 400 naming the body)
        ("POST", "/api/nodes/scheduling", {"model_name": MODEL, "node_selector": {"zone": LONE}}, None),
        ("POST", "/api/settings", {LONE: True}, None),
        ("PUT", "/api/nodes/{node}/labels", {"zone": LONE}, None),
        ("PUT", "/api/nodes/{node}/vram-budget", {"value": LONE}, None),
        # NUL: valid JSON and Unicode, but no PostgreSQL text column holds it
        ("POST", "/api/keys", {"name": "a\x00b"}, "name"),
        ("PUT", "/api/nodes/{node}/labels", {"zone": "a\x00b"}, None),
        ("PUT", "/api/nodes/{node}/labels", {"z\x00": "a"}, None),
    ],
)
def test_admin_text_postgresql_cannot_store_is_a_400_never_a_500(
    cluster: Cluster, method: str, path: str, body: dict[str, object], field: str | None
) -> None:
    node = _register(cluster).json()["id"]
    response = httpx.request(
        method,
        cluster.frontend_url + path.format(node=node),
        content=json.dumps(body).encode(),
        headers={**cluster.admin_headers, "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 400, response.text  # PostgreSQL cannot store the text: it never reaches it
    if field is not None:
        assert _error(response)["param"] == field, response.text


# --- body size: refused before auth, before parsing, without reading ------------------------------------------


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=15)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_reply(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one response; reads until the body is complete or the peer closes."""
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 1 << 62


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_declared_300mb_body_without_credentials_is_a_413_before_auth_and_unread(cluster: Cluster) -> None:
    assert cluster.frontend is not None
    with _connect(cluster.frontend_url) as sock:
        sock.sendall(
            b"POST /api/node/register HTTP/1.1\r\nHost: f\r\nContent-Type: application/json\r\n"
            b'Content-Length: 300000000\r\n\r\n{"name": "x"'
        )  # 13 of the 300 MB declared
        status, headers, body = _read_reply(sock)  # answered now: the server waits for none of the rest
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body)["error"]["message"] == TOO_LARGE_NODE_API  # not the 401 the missing token earns


def test_sending_the_300mb_anyway_does_not_grow_the_frontend(cluster: Cluster) -> None:
    assert cluster.frontend is not None
    before = _rss_kib(cluster.frontend.popen.pid)
    sent = 0
    with _connect(cluster.frontend_url) as sock:
        sock.sendall(b"POST /api/node/register HTTP/1.1\r\nHost: f\r\nContent-Length: 300000000\r\n\r\n")
        chunk = b"x" * (1 << 16)
        try:
            while sent < 300_000_000:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the frontend answered 413 and closed the connection
    grown_mib = (_rss_kib(cluster.frontend.popen.pid) - before) / 1024
    print(
        f"sent {sent >> 10} KiB of a declared 300 MB; frontend RSS {before // 1024} MiB, grew {grown_mib:.1f} MiB"
    )
    assert sent < 300_000_000 and grown_mib < 32  # before the limit: 81 MB -> 647 MB (issue 10)


def test_a_chunked_body_is_cut_off_with_413_when_it_passes_the_limit(cluster: Cluster) -> None:
    sent = 0
    with _connect(cluster.frontend_url) as sock:
        sock.sendall(
            b"POST /api/node/register HTTP/1.1\r\nHost: f\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))
        try:
            while sent < 300_000_000 and not select.select([sock], [], [], 0)[0]:
                sock.sendall(chunk)
                sent += 1 << 16
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, headers, body = _read_reply(sock)
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body)["error"]["message"] == TOO_LARGE_NODE_API
    print(f"chunked body cut off after {sent >> 10} KiB sent (limit {NODE_API_LIMIT >> 10} KiB)")
    assert NODE_API_LIMIT < sent < NODE_API_LIMIT + (16 << 20)  # the rest of 300 MB was never sent


def test_a_body_within_the_limit_without_a_length_is_served(cluster: Cluster) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "' + MODEL.encode()
        yield b'", "messages": [{"role": "user", "content": "hi"}], "seed": 1099511627776}'

    response = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", content=chunks(), timeout=30)
    assert response.status_code == 400  # read whole, then parsed and validated like any other body
    assert _error(response)["param"] == "seed"


# --- backpressure ---------------------------------------------------------------------------------------------


@pytest.fixture
def busy_frontend(cluster: Cluster) -> Iterator[str]:
    """A second frontend on the same cluster that serves at most 2 requests at once."""
    small = Cluster(
        root=cluster.root / "busy",
        database_url=cluster.database_url,
        nats_url=cluster.nats_url,
        frontend_env={"CORRAL_MAX_CONCURRENT_REQUESTS": "2"},
    )
    small.models_dir.mkdir(parents=True, exist_ok=True)
    try:
        small.start_frontend()
        yield small.frontend_url
    finally:
        small.stop()


def _held_request(url: str) -> socket.socket:
    """A request in progress for as long as the socket stays open: its chunked body never ends."""
    sock = _connect(url)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: f\r\nContent-Type: application/json\r\n"
        b'Transfer-Encoding: chunked\r\n\r\n2\r\n{"\r\n'
    )
    return sock


def test_past_the_concurrency_limit_a_request_gets_429_with_retry_after(busy_frontend: str) -> None:
    held = [_held_request(busy_frontend), _held_request(busy_frontend)]
    try:
        wait_for(
            lambda: httpx.get(f"{busy_frontend}/v1/models", timeout=10).status_code == 429,
            "the frontend to be at its limit of 2 requests",
            15,
        )
        refused = httpx.post(f"{busy_frontend}/v1/chat/completions", json={"model": MODEL}, timeout=10)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert _error(refused)["message"] == (
            "this frontend is serving its limit of 2 concurrent requests; "
            "retry after 1 s, or raise CORRAL_MAX_CONCURRENT_REQUESTS"
        )
        assert (
            httpx.get(f"{busy_frontend}/healthz", timeout=10).status_code == 200
        )  # probes are never refused
        assert httpx.get(f"{busy_frontend}/readyz", timeout=10).status_code == 200
    finally:
        for sock in held:
            sock.close()
    wait_for(
        lambda: httpx.get(f"{busy_frontend}/v1/models", timeout=10).status_code == 200,
        "the frontend to serve again once the held requests ended",
        15,
    )
