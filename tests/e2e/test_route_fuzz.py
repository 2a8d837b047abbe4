"""Property-based: every HTTP route of a real frontend (`corral run`, real PostgreSQL and NATS), driven
from its own OpenAPI schema (schemathesis: valid and schema-violating parameters and bodies — out-of-range
numbers, long strings, wrong types) and with arbitrary JSON bodies (hypothesis), never answers a 5xx and
never shows a traceback. The /v1 fast path is in the schema too: its routes are declared on the FastAPI
router with the same pydantic models. Worker routes run with the registration token and without; admin
routes with an admin key."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from corral.frontend.node_api.routes import HeartbeatUpdate
from support.cluster import Cluster

pytestmark = pytest.mark.slow

MODEL = "fuzz-target-simulator"  # long, so generated model names do not start loads that need a worker
EXAMPLES_PER_OPERATION = 8  # per generation mode and credential; ~50 operations
JSON_EXAMPLES_PER_ROUTE = 8
FUZZ = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    derandomize=False,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    # Not auto-approving: a fuzzed registration stays pending and is never sent work.
    c = Cluster(
        root=state_root / "e2e-fuzz", database_url=make_database(), nats_url=nats_url, auto_approve=False
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / f"{MODEL}.yaml").write_text(
        f"name: {MODEL}\nbackend: simulator\nparameters:\n  model: {MODEL}\n"
    )
    try:
        c.start_frontend()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def schema(cluster: Cluster) -> Any:
    document = httpx.get(
        f"{cluster.frontend_url}/openapi.json", headers=cluster.admin_headers, timeout=30
    ).json()
    return schemathesis.openapi.from_dict(document)


def credentials(cluster: Cluster, path: str) -> list[dict[str, str]]:
    if path.startswith("/api/node/"):
        return [{"Authorization": f"Bearer {cluster.token}"}, {}]
    return [cluster.admin_headers]


def check(status: int, text: str, what: str) -> None:
    if status == 503 and '"code":"no_nodes_available"' in text:
        return  # a valid request for the configured model: no worker in this cluster, said so (not a fault)
    assert status < 500, f"{what} -> {status}: {text[:2000]}"
    assert "Traceback" not in text and 'File "' not in text, f"{what} -> a traceback: {text[:2000]}"


def operations(schema: Any) -> list[Any]:
    found = [result.ok() for result in schema.get_all_operations()]
    assert len(found) > 40, [op.label for op in found]  # every router is in the schema
    return found


def drive_schema(
    url: str, operation: Any, mode: GenerationMode, headers: dict[str, str], session: requests.Session
) -> None:
    @FUZZ
    @given(case=operation.as_strategy(generation_mode=mode))
    def call(case: Any) -> None:
        response = case.call(base_url=url, session=session, headers=headers, timeout=60)
        check(
            response.status_code,
            response.text,
            f"{case.method} {case.formatted_path} query={case.query} body={str(case.body)[:300]}",
        )

    call()


CONSTRAINTS = {"maxLength", "minLength", "maximum", "minimum", "enum", "format", "pattern", "maxProperties"}


def violable(operation: Any) -> bool:
    """Whether the schema constrains anything (a body, or a bounded or typed parameter) a request can violate;
    otherwise negative generation has nothing to produce and only spends time failing to."""
    raw = operation.definition.raw
    return "requestBody" in raw or any(
        CONSTRAINTS & set(p.get("schema", {})) or p.get("schema", {}).get("type", "string") != "string"
        for p in raw.get("parameters", [])
    )


def test_no_route_answers_5xx_or_a_traceback_to_schema_generated_requests(
    cluster: Cluster, schema: Any
) -> None:
    session = requests.Session()
    for operation in operations(schema):
        started = time.monotonic()
        modes = [GenerationMode.POSITIVE, *([GenerationMode.NEGATIVE] if violable(operation) else [])]
        for mode in modes:
            for headers in credentials(cluster, operation.path):
                try:
                    drive_schema(cluster.frontend_url, operation, mode, headers, session)
                except Unsatisfiable:  # e.g. a body schema of {"type": "object"}: any object is valid
                    assert mode is GenerationMode.NEGATIVE, operation.label
        print(f"{operation.label}: {time.monotonic() - started:.1f}s")


def _json_values() -> st.SearchStrategy[Any]:
    """Any JSON document, leaning towards the edges: ints past int64, huge floats, long strings, deep nesting."""
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**80), max_value=2**80)
        | st.sampled_from([2**31, 2**40, 2**63, 2**64, -(2**63) - 1, 1e39, -1e308])
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=40)
        | st.sampled_from(["x" * 300, "k" * 70_000])
    )
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=300), inner, max_size=6),
        max_leaves=20,
    )


FIELD_NAMES = [
    "model",
    "messages",
    "prompt",
    "input",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "temperature",
    "top_p",
    "stop",
    "n",
    "dimensions",
    "name",
    "address",
    "labels",
    "total_vram",
    "available_ram",
    "max_replicas_per_model",
    "vram_budget",
    "value",
    "model_name",
    "min_replicas",
    "node_selector",
    "context_size",
    "distributed_disk_headroom_check",
    "query",
    "documents",
    "top_n",
    "instructions",
    "previous_response_id",
    "tools",
]


def valid_bodies(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """A valid body per route: the fuzzer changes one or two of its fields, as a careless client would."""
    return {
        "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/completions": {"model": MODEL, "prompt": "hi"},
        "/v1/embeddings": {"model": MODEL, "input": "hi"},
        "/v1/rerank": {"model": MODEL, "query": "q", "documents": ["a", "b"], "top_n": 1},
        "/v1/responses": {"model": MODEL, "input": "hi"},
        "/api/node/register": {"name": "fuzzed-node", "address": "127.0.0.1:1", "token": cluster.token},
        "/api/nodes/scheduling": {"model_name": MODEL},
        "/api/nodes/{node_id}/max-replicas-per-model": {"value": 2},
    }


def _documents(valid: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A valid body with one or two fields set to edge values, an object of likely field names, or any JSON."""
    edits = st.dictionaries(st.sampled_from(FIELD_NAMES), _json_values(), min_size=1, max_size=2)
    return (
        edits.map(lambda changed: {**valid, **changed})
        | st.dictionaries(st.sampled_from(FIELD_NAMES), _json_values(), max_size=6)
        | _json_values()
    )


def drive_json(client: httpx.Client, operation: Any, headers: dict[str, str], valid: dict[str, Any]) -> None:
    @settings(
        max_examples=JSON_EXAMPLES_PER_ROUTE,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(), document=_documents(valid))
    def post(case: Any, document: Any) -> None:
        content = json.dumps(document).encode()
        response = client.request(
            case.method,
            case.formatted_path,
            content=content,
            headers={**headers, "Content-Type": "application/json"},
        )
        check(response.status_code, response.text, f"{case.method} {case.formatted_path} {content[:300]!r}")

    post()


def test_no_body_route_answers_5xx_or_a_traceback_to_arbitrary_json(cluster: Cluster, schema: Any) -> None:
    with_body = [op for op in operations(schema) if op.method.upper() in ("POST", "PUT", "PATCH")]
    with httpx.Client(base_url=cluster.frontend_url, timeout=60) as client:
        for operation in with_body:
            for headers in credentials(cluster, operation.path):
                drive_json(client, operation, headers, valid_bodies(cluster).get(operation.path, {}))


# --- the grid: every field of every body at every edge value ---------------------------------------------------

EDGES: list[Any] = [
    None,
    True,
    -1,
    0,
    0.5,
    2**31,
    -(2**31) - 1,
    2**40,
    2**63,
    2**64,
    2**70,
    1e39,
    -1e308,
    "",
    "x" * 300,
    "k" * 70_000,
    [],
    ["x" * 300],
    {},
    {"k" * 200: "v"},
    {"k": "v" * 300},
    [[[[{}]]]],
]


def _properties(document: dict[str, Any], operation: Any) -> list[str]:
    """The top-level fields of an operation's JSON body, resolved through `$ref`."""
    body = operation.definition.raw.get("requestBody", {}).get("content", {})
    media = next(iter(body.values()), None)
    schema: dict[str, Any] = media.get("schema", {}) if media else {}
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return sorted(schema.get("properties", {}))


def _fill(path: str, node_id: str) -> str:
    return (
        path.replace("{node_id}", node_id)
        .replace("{name}", MODEL)
        .replace("{model}", MODEL)
        .replace("{model_id}", MODEL)
        .replace("{key}", "zone")
        .replace("{key_id}", node_id)
    )


def test_every_field_of_every_body_at_every_edge_value_is_never_a_5xx(cluster: Cluster, schema: Any) -> None:
    """Exhaustive where the random tests sample: a valid request with one field replaced by an edge value
    (out-of-range ints, huge floats, long strings, wrong types), against real rows (a registered node, the
    configured model), so a value that passes validation reaches protobuf and PostgreSQL."""
    document = httpx.get(f"{cluster.frontend_url}/openapi.json", timeout=30).json()
    headers = {"Authorization": f"Bearer {cluster.token}"}
    registered = httpx.post(
        f"{cluster.frontend_url}/api/node/register",
        headers=headers,
        timeout=30,
        json={"name": "grid-node", "address": "127.0.0.1:1", "token": cluster.token},
    ).json()
    node = registered["id"]
    node_auth = {**headers, "X-Node-Token": registered["node_token"]}  # the node's own routes: as itself
    extra_fields = {
        "/api/node/{node_id}/heartbeat": sorted(HeartbeatUpdate.model_fields),
        "/api/nodes/{node_id}/labels": ["zone", "k" * 200],
        "/api/model-configs/{name}": ["context_size", "name", "backend", "parameters", "threads"],
    }
    sent, failures = 0, []
    with httpx.Client(base_url=cluster.frontend_url, timeout=60) as client:
        for operation in operations(schema):
            if operation.method.upper() not in ("POST", "PUT", "PATCH"):
                continue
            auth = (
                node_auth
                if operation.path.startswith("/api/node/{")
                else credentials(cluster, operation.path)[0]
            )
            valid = valid_bodies(cluster).get(operation.path, {})
            for field in _properties(document, operation) + extra_fields.get(operation.path, []):
                for edge in EDGES:
                    content = json.dumps({**valid, field: edge}).encode()
                    sent += 1
                    try:
                        response = client.request(
                            operation.method.upper(),
                            _fill(operation.path, node),
                            content=content,
                            headers={**auth, "Content-Type": "application/json"},
                        )
                    except httpx.HTTPError as exc:  # the connection dropped: no answer at all
                        failures.append(f"{operation.label} {field}={str(edge)[:40]} -> {exc!r}")
                        continue
                    try:
                        check(
                            response.status_code, response.text, f"{operation.label} {field}={str(edge)[:40]}"
                        )
                    except AssertionError as exc:
                        failures.append(str(exc).splitlines()[0][:300])
    print(f"{sent} requests, {len(failures)} answered 5xx or with a traceback")
    assert not failures, "\n".join(failures)
