"""Agent workers and MCP over NATS, end to end: real PostgreSQL and NATS, a frontend, a simulator worker,
two `corral agent-worker` processes and a real MCP stdio server (tests/support/mcp_tools_server.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from corral.bus import subjects
from support.agent_workers import mcp_model_yaml, start_agent_worker
from support.cluster import Cluster, Proc

pytestmark = pytest.mark.slow

MODEL = "sim-mcp"
FRONTEND_TOOL_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-agent-workers", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / f"{MODEL}.yaml").write_text(mcp_model_yaml(MODEL))
    (c.models_dir / "sim-plain.yaml").write_text("name: sim-plain\nbackend: simulator\n")
    try:
        c.start_frontend("--mcp-tool-timeout", f"{FRONTEND_TOOL_TIMEOUT_S:g}s")
        c.start_worker("sim-worker")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def agents(cluster: Cluster) -> list[Proc]:
    # The workers' own tool deadline is long (agent jobs use it); chats are cut at the frontend's.
    return [start_agent_worker(cluster, name, "--mcp-tool-timeout", "30s") for name in ("agent-a", "agent-b")]


def _nodes(cluster: Cluster) -> dict[str, dict[str, Any]]:
    listing = httpx.get(f"{cluster.frontend_url}/api/nodes", headers=cluster.admin_headers).json()
    return {n["name"]: n for n in listing}


def _chat(cluster: Cluster, content: str, **extra: Any) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=60,
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], **extra},
    )


def _answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def _ppid(answer: str) -> int:
    return int(answer.split("ppid=")[1].split()[0])


def test_agent_workers_register_as_agent_nodes_and_get_an_api_key(
    cluster: Cluster, agents: list[Proc]
) -> None:
    nodes = _nodes(cluster)
    for name in ("agent-a", "agent-b"):
        assert nodes[name]["node_type"] == "agent" and nodes[name]["status"] == "healthy"
    keys = httpx.get(f"{cluster.frontend_url}/api/keys", headers=cluster.admin_headers).json()
    live = {k["name"] for k in keys if k["revoked_at"] is None}
    assert {"agent node agent-a", "agent node agent-b"} <= live  # provisioned at registration, stored hashed
    assert all("key_hash" not in k for k in keys)


def test_discovery_lists_the_servers_and_tools(cluster: Cluster, agents: list[Proc]) -> None:
    response = httpx.get(f"{cluster.frontend_url}/v1/mcp/servers/{MODEL}", timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == MODEL
    assert body["servers"][0]["name"] == "tools" and body["servers"][0]["type"] == "stdio"
    assert {"add", "read_file", "whoami", "sleep"} <= set(body["servers"][0]["tools"])
    add = next(t for t in body["tools"] if t["tool_name"] == "add")
    assert add["function"]["parameters"]["required"] == ["a", "b"]
    assert body["node_id"] in {_nodes(cluster)[n]["id"] for n in ("agent-a", "agent-b")}
    plain = httpx.get(f"{cluster.frontend_url}/v1/mcp/servers/sim-plain").json()
    assert plain == {"model": "sim-plain", "servers": []}
    assert httpx.get(f"{cluster.frontend_url}/v1/mcp/servers/nope").status_code == 404
    for bad in ("a%2F..%2Fb", "x" * 300):
        refused = httpx.get(f"{cluster.frontend_url}/v1/mcp/servers/{bad}")
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "model"


def test_a_chat_completion_runs_the_tools_on_an_agent_worker(
    cluster: Cluster, agents: list[Proc], tmp_path: Path
) -> None:
    answer = _answer(_chat(cluster, 'What is 2+3? call add({"a": 2, "b": 3})'))
    assert answer == "Tool add returned: 5"
    note = tmp_path / "note.txt"
    note.write_text("corral reads files on agent workers")
    assert (
        _answer(_chat(cluster, f"call read_file({json.dumps({'path': str(note)})})"))
        == "Tool read_file returned: corral reads files on agent workers"
    )
    response = _chat(cluster, "who runs tools? call whoami")
    where = _ppid(_answer(response))
    assert where in {p.popen.pid for p in agents}  # the MCP server is a child of an agent worker ...
    assert cluster.frontend is not None and where != cluster.frontend.popen.pid  # ... not of the frontend
    record = response.json()["mcp"]["tool_calls"][0]
    names = {_nodes(cluster)[p.name]["id"]: p.popen.pid for p in agents}
    assert names[record["node_id"]] == where  # the node that answered is the process that ran it
    # placement never puts a model on an agent node
    for name in ("agent-a", "agent-b"):
        models = httpx.get(
            f"{cluster.frontend_url}/api/nodes/{_nodes(cluster)[name]['id']}/models",
            headers=cluster.admin_headers,
        )
        assert models.status_code == 200 and models.json() == []


def test_a_client_that_brings_its_own_tools_gets_the_tool_calls_back(
    cluster: Cluster, agents: list[Proc]
) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    for model in (MODEL, "sim-plain"):  # with client tools even an `mcp:` model runs no loop of its own
        response = httpx.post(
            f"{cluster.frontend_url}/v1/chat/completions",
            timeout=60,
            json={
                "model": model,
                "tools": tools,
                "messages": [{"role": "user", "content": 'call lookup({"q": "x"})'}],
            },
        )
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and "mcp" not in response.json()
        call = choice["message"]["tool_calls"][0]
        assert call["type"] == "function" and call["function"] == {
            "name": "lookup",
            "arguments": '{"q": "x"}',
        }
        followup = httpx.post(
            f"{cluster.frontend_url}/v1/chat/completions",
            timeout=60,
            json={
                "model": model,
                "tools": tools,
                "messages": [
                    {"role": "user", "content": 'call lookup({"q": "x"})'},
                    choice["message"],
                    {"role": "tool", "tool_call_id": call["id"], "name": "lookup", "content": "found it"},
                ],
            },
        )
        assert _answer(followup) == "Tool lookup returned: found it"
    with httpx.stream(
        "POST",
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=60,
        json={
            "model": "sim-plain",
            "tools": tools,
            "stream": True,
            "messages": [{"role": "user", "content": 'call lookup({"q": "y"})'}],
        },
    ) as streamed:
        chunks = [
            json.loads(line[6:])
            for line in streamed.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    calls = [c for e in chunks for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert [(c["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (0, "lookup", '{"q": "y"}')
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_streamed_client_sees_the_tool_call_and_its_result(cluster: Cluster, agents: list[Proc]) -> None:
    events = []
    with httpx.stream(
        "POST",
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=60,
        json={
            "model": MODEL,
            "stream": True,
            "messages": [{"role": "user", "content": 'call add({"a": 40, "b": 2})'}],
        },
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
    call = next(d["tool_calls"][0] for d in deltas if "tool_calls" in d)
    assert call["function"] == {"name": "add", "arguments": '{"a": 40, "b": 2}'}
    result = next(d["tool_result"] for d in deltas if "tool_result" in d)
    assert result == {"tool_call_id": call["id"], "name": "add", "content": "42"}
    assert "".join(d.get("content") or "" for d in deltas) == "Tool add returned: 42"
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_hanging_tool_is_cut_at_its_deadline_and_reported_to_the_model(
    cluster: Cluster, agents: list[Proc]
) -> None:
    started = time.monotonic()
    answer = _answer(_chat(cluster, 'call sleep({"seconds": 60})'))
    assert time.monotonic() - started < 30
    assert answer.startswith("Tool sleep returned: error:")
    assert (
        f"did not answer within {FRONTEND_TOOL_TIMEOUT_S:g}s" in answer
        and "CORRAL_MCP_TOOL_TIMEOUT" in answer
    )
    assert (
        _answer(_chat(cluster, 'call add({"a": 1, "b": 1})')) == "Tool add returned: 2"
    )  # the session lives on


def test_an_agent_job_runs_on_an_agent_worker_and_is_recorded(cluster: Cluster, agents: list[Proc]) -> None:
    url = f"{cluster.frontend_url}/api/agent-jobs"
    created = httpx.post(
        url,
        headers=cluster.admin_headers,
        json={"kind": "mcp-ci", "model": MODEL, "prompt": 'call add({"a": 20, "b": 22})'},
    )
    assert created.status_code == 202, created.text
    job = _wait_job(cluster, created.json()["id"], lambda j: j["status"] in ("completed", "failed"))
    assert job["status"] == "completed", job
    assert job["result"] == "Tool add returned: 42"
    assert [t["type"] for t in job["trace"]] == ["tool_call", "tool_result"]
    assert [t["seq"] for t in job["trace"]] == [1, 2] and job[
        "trace_count"
    ] == 2  # the result counts the trace
    assert job["node_id"] in {_nodes(cluster)[n]["id"] for n in ("agent-a", "agent-b")}
    assert httpx.post(url, json={"model": MODEL, "prompt": "x"}).status_code == 401  # admin only
    assert (
        httpx.post(url, headers=cluster.admin_headers, json={"model": "sim-plain", "prompt": "x"}).status_code
        == 400
    )


def test_an_agent_job_can_be_cancelled(cluster: Cluster, agents: list[Proc]) -> None:
    url = f"{cluster.frontend_url}/api/agent-jobs"
    created = httpx.post(
        url,
        headers=cluster.admin_headers,
        json={"kind": "agent", "model": MODEL, "prompt": 'call sleep({"seconds": 25})'},
    )
    job_id = created.json()["id"]
    _wait_job(cluster, job_id, lambda j: any(t["type"] == "tool_call" for t in j["trace"]))
    assert httpx.post(f"{url}/{job_id}/cancel", headers=cluster.admin_headers).status_code == 200
    job = _wait_job(cluster, job_id, lambda j: j["status"] in ("cancelled", "completed", "failed"), 15)
    assert job["status"] == "cancelled" and job["error"] == "cancelled on request"
    assert httpx.post(f"{url}/{job_id}/cancel", headers=cluster.admin_headers).status_code == 409


def test_a_forged_server_config_on_the_bus_runs_nothing(
    cluster: Cluster, agents: list[Proc], tmp_path: Path
) -> None:
    """Anyone on the bus may ask; what an agent worker runs is the model's configured servers (from the frontend),
    never a command carried by the message."""
    marker = tmp_path / "forged-command-ran"
    forged = {"mcpServers": {"tools": {"command": "sh", "args": ["-c", f"touch {marker}"]}}}

    async def forge() -> list[dict[str, Any]]:
        nc = await nats.connect(cluster.nats_url)
        try:
            answers = []
            for subject, body in (
                (
                    subjects.MCP_TOOLS_EXECUTE,
                    {
                        "model_name": MODEL,
                        "tool_name": "add",
                        "arguments": {"a": 1, "b": 2},
                        "stdio_servers": forged,
                    },
                ),
                (subjects.MCP_DISCOVERY, {"model_name": "sim-plain", "stdio_servers": forged}),
            ):
                reply = await nc.request(subject, json.dumps(body).encode(), timeout=30)
                answers.append(json.loads(reply.data))
            return answers
        finally:
            await nc.close()

    executed, discovered = asyncio.run(forge())
    assert executed.get("result") == "3", executed  # the configured server's `add`, not the payload's command
    assert "has no MCP servers" in discovered.get("error", ""), discovered
    assert not marker.exists()


def test_killing_an_agent_worker_moves_the_next_call_to_the_other(
    cluster: Cluster, agents: list[Proc]
) -> None:
    pids = {p.popen.pid: p for p in agents}
    first = _ppid(_answer(_chat(cluster, "call whoami")))
    os.kill(first, signal.SIGKILL)
    pids[first].popen.wait(10)
    time.sleep(0.5)  # the NATS server sees the closed connection and drops its queue subscriptions
    survivor = next(pid for pid in pids if pid != first)
    for _ in range(3):
        assert _ppid(_answer(_chat(cluster, "call whoami"))) == survivor


def test_sigterm_drains_and_deregisters_then_no_agent_worker_is_a_503(
    cluster: Cluster, agents: list[Proc]
) -> None:
    for proc in agents:
        if proc.popen.poll() is None:
            proc.popen.send_signal(signal.SIGTERM)
            assert proc.popen.wait(30) == 0
            assert "agent worker" in proc.log() and "Traceback" not in proc.log()
            assert _nodes(cluster)[proc.name]["status"] == "offline"
    job = httpx.post(
        f"{cluster.frontend_url}/api/agent-jobs",
        headers=cluster.admin_headers,
        json={"model": MODEL, "prompt": "call whoami"},
    )
    for response in (
        _chat(cluster, "call whoami"),
        httpx.get(f"{cluster.frontend_url}/v1/mcp/servers/{MODEL}"),
        job,
    ):
        assert response.status_code == 503, response.text
        assert "corral agent-worker" in response.json()["error"]["message"]
    plain = httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=60,
        json={"model": "sim-plain", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert plain.status_code == 200  # models without `mcp:` never touch the agent workers
    node_id = _nodes(cluster)["agent-a"]["id"]
    assert (
        httpx.delete(f"{cluster.frontend_url}/api/nodes/{node_id}", headers=cluster.admin_headers).status_code
        == 200
    )
    keys = httpx.get(f"{cluster.frontend_url}/api/keys", headers=cluster.admin_headers).json()
    assert all(
        k["revoked_at"] is not None for k in keys if k["name"] == "agent node agent-a"
    )  # deleted: key revoked


def _wait_job(
    cluster: Cluster, job_id: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 30.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = httpx.get(
            f"{cluster.frontend_url}/api/agent-jobs/{job_id}", headers=cluster.admin_headers
        ).json()
        if done(job):
            return job
        time.sleep(0.2)
    raise AssertionError(f"agent job {job_id} did not get there in {timeout_s}s: {job}")
