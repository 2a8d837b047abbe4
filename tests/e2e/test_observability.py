"""The operator's view of a real cluster (PostgreSQL, NATS, a frontend, a worker, simulator backends):
`/metrics` figures move as the traffic did, one trace follows a request from the frontend to the
backend over OTLP (a collector stand-in receives it), and `corral nodes / models / activity /
models load --follow` answer from the frontend."""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.cli import commands
from corral.cli import main as cli
from corral.config.client import ModelLoadSettings
from corral.config.settings import load
from support.cluster import Cluster
from support.otlp_collector import Collector

pytestmark = pytest.mark.slow

SCRAPE_TOKEN = "scrape-secret"
STAGED_BYTES = 3 * 1024 * 1024 + 17  # the file of model `staged`
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _sim(name: str, options: str = "", model: str | None = None) -> str:
    opts = f"options: [{options}]\n" if options else ""
    return f"name: {name}\nbackend: simulator\n{opts}parameters:\n  model: {model or name}\n"


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    with Collector() as running:
        yield running


@pytest.fixture(scope="module")
def cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str, collector: Collector
) -> Iterator[Cluster]:
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    c = Cluster(
        root=state_root / "e2e-observability",
        database_url=make_database(),
        nats_url=nats_url,
        frontend_env=otel,
        worker_env=otel,
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "sim.yaml").write_text(_sim("sim"))
    (c.models_dir / "staged.bin").write_bytes(b"\x01" * STAGED_BYTES)
    (c.models_dir / "staged.yaml").write_text(_sim("staged", model="staged.bin"))
    (c.models_dir / "broken.yaml").write_text(_sim("broken", '"load_fail:weights are corrupt"'))
    (c.models_dir / "slow.bin").write_bytes(b"\x02" * (1024 * 1024))
    (c.models_dir / "slow.yaml").write_text(_sim("slow", '"load_time_s:1.5"', model="slow.bin"))
    (c.models_dir / "slower.yaml").write_text(_sim("slower", '"load_time_s:1.5"'))
    (c.models_dir / "paced.yaml").write_text(_sim("paced", '"output_token_time_s:0.2"'))
    try:
        c.start_frontend("--metrics-token", SCRAPE_TOKEN, "--node-heartbeat-checkpoint", "1s")
        c.start_worker("w1")
        yield c
    finally:
        c.stop()


def scrape(cluster: Cluster) -> Samples:
    response = httpx.get(
        f"{cluster.frontend_url}/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"}
    )
    assert response.status_code == 200, response.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def chat(cluster: Cluster, model: str, *, stream: bool = False, max_tokens: int = 4) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    return httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=60)


@pytest.fixture(scope="module")
def traffic(cluster: Cluster) -> tuple[Samples, Samples]:
    """Scrape, send cold, warm, streamed and failing requests, scrape again."""
    before = scrape(cluster)
    assert chat(cluster, "sim").status_code == 200  # cold: a load job
    for _ in range(3):
        assert chat(cluster, "sim").status_code == 200  # warm
    streamed = chat(cluster, "sim", stream=True, max_tokens=5)
    assert streamed.status_code == 200 and "[DONE]" in streamed.text
    assert chat(cluster, "staged").status_code == 200  # cold, with a file staged to the worker
    assert chat(cluster, "no-such-model").status_code == 404
    failed = chat(cluster, "broken")
    assert failed.status_code >= 500 and "weights are corrupt" in failed.text
    time.sleep(2.5)  # at least one heartbeat (every 2 s) written at the 1 s checkpoint
    return before, scrape(cluster)


def test_metrics_need_the_scrape_token_or_an_api_key(cluster: Cluster) -> None:
    assert httpx.get(f"{cluster.frontend_url}/metrics").status_code == 401
    admin = httpx.get(f"{cluster.frontend_url}/metrics", headers=cluster.admin_headers)
    assert admin.status_code == 200 and "corral_requests_total" in admin.text


def test_request_figures_move_by_model_and_status(traffic: tuple[Samples, Samples]) -> None:
    before, after = traffic
    assert moved(before, after, "corral_requests_total", model="sim", status="200") == 5
    assert moved(before, after, "corral_request_duration_seconds_count", model="sim", status="200") == 5
    assert moved(before, after, "corral_request_duration_seconds_sum", model="sim", status="200") > 0
    assert moved(before, after, "corral_requests_total", model="staged", status="200") == 1
    assert moved(before, after, "corral_requests_total", model="other", status="404") == 1  # bounded label
    failed = {
        k: v for k, v in after.items() if k[0] == "corral_requests_total" and ("model", "broken") in k[1]
    }
    assert sum(failed.values()) == 1 and all(dict(k[1])["status"].startswith("5") for k in failed)
    assert not any(("model", "no-such-model") in labels for _, labels in after)


def test_streaming_figures_move(traffic: tuple[Samples, Samples]) -> None:
    before, after = traffic
    assert moved(before, after, "corral_time_to_first_token_seconds_count", model="sim") == 1
    assert moved(before, after, "corral_streamed_tokens_total", model="sim") == 5


def test_routing_decisions_count_warm_and_cold(traffic: tuple[Samples, Samples]) -> None:
    before, after = traffic
    assert moved(before, after, "corral_routing_decisions_total", model="sim", decision="warm") == 4
    assert moved(before, after, "corral_routing_decisions_total", model="sim", decision="cold") == 1
    assert moved(before, after, "corral_routing_decisions_total", model="staged", decision="cold") == 1
    assert moved(before, after, "corral_routing_decisions_total", model="broken", decision="cold") >= 1


def test_load_jobs_staging_and_cluster_figures(traffic: tuple[Samples, Samples]) -> None:
    before, after = traffic
    for model in ("sim", "staged"):
        assert moved(before, after, "corral_load_duration_seconds_count", model=model, outcome="loaded") == 1
    assert moved(before, after, "corral_load_duration_seconds_count", model="broken", outcome="failed") == 1
    assert value(after, "corral_load_jobs", state="failed") == 1  # visible for the failure grace (15 s)
    for phase in ("pending", "installing", "loading"):
        assert moved(before, after, "corral_load_phase_duration_seconds_count", phase=phase) >= 2
    assert moved(before, after, "corral_staging_bytes_total") == STAGED_BYTES
    assert moved(before, after, "corral_staging_throughput_bytes_per_second_count") == 1
    assert (
        value(after, "corral_nodes", status="healthy") == 1
        and value(after, "corral_nodes", status="pending") == 0
    )
    assert moved(before, after, "corral_heartbeat_writes_total") >= 1
    assert value(after, "corral_replica_in_flight", model="sim", node="w1", replica="0") == 0  # idle again
    assert value(after, "corral_db_pool_connections", state="max") > 0
    assert ("corral_nats_reconnects_total", frozenset({("client", "corral-frontend")})) in after  # 0: no loss
    assert any(name == "localai_control_plane_oldest_xmin_age" for name, _ in after)


def _wait_for(condition, timeout_s: float = 15.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("not seen in time")


def test_in_flight_per_replica_counts_a_running_stream(
    traffic: tuple[Samples, Samples], cluster: Cluster
) -> None:
    assert chat(cluster, "paced", max_tokens=1).status_code == 200  # loaded
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        streaming = pool.submit(chat, cluster, "paced", stream=True, max_tokens=15)  # ~3 s of tokens
        time.sleep(1.2)
        during = scrape(cluster)
        assert streaming.result().status_code == 200
    assert value(during, "corral_replica_in_flight", model="paced", node="w1", replica="0") == 1
    _wait_for(
        lambda: (
            value(scrape(cluster), "corral_replica_in_flight", model="paced", node="w1", replica="0") == 0
        ),
        timeout_s=5,
    )  # the figures are at most a second old (MIN_REFRESH_S)


def test_one_trace_follows_a_request_from_frontend_to_backend(
    traffic: tuple[Samples, Samples], collector: Collector
) -> None:
    calls = _wait_for(
        lambda: [
            s for s in collector.spans_named("backend.Predict") if s.service == "corral-backend-simulator"
        ]
    )
    trace = collector.trace(calls[0].trace_id)
    by_id = {s.span_id: s for s in trace}
    server = by_id[calls[0].parent_span_id]  # the frontend's client span is the backend span's parent
    assert (server.service, server.name) == ("corral-frontend", "backend Predict")
    root = by_id[server.parent_span_id]
    assert (root.service, root.name) == ("corral-frontend", "POST /v1/chat/completions")


def test_a_cold_load_is_traced_through_placement_install_staging_and_load(
    traffic: tuple[Samples, Samples], collector: Collector
) -> None:
    def staged_trace() -> list | None:  # type: ignore[type-arg]
        for load_span in collector.spans_named("corral.load"):
            names = {(s.service, s.name) for s in collector.trace(load_span.trace_id)}
            if (
                ("corral-backend-simulator", "backend.LoadModel") in names
                and ("corral-worker", "worker.receive_file") in names
                and ("corral-worker", "worker.backend_install") in names
            ):
                return collector.trace(load_span.trace_id)
        return None

    names = {s.name for s in _wait_for(staged_trace)}
    assert {
        "POST /v1/chat/completions",
        "corral.cold_path",
        "corral.load",
        "corral.placement",
        "corral.install",
        "corral.staging",
        "backend LoadModel",
    } <= names


def test_metrics_are_exported_over_otlp(traffic: tuple[Samples, Samples], collector: Collector) -> None:
    names = _wait_for(
        lambda: (
            collector.metric_names.get("corral-frontend", set())
            >= {"corral_requests", "corral_request_duration_seconds", "corral_nodes", "corral_staging_bytes"}
            and collector.metric_names["corral-frontend"]
        )
    )
    assert "localai_control_plane_oldest_xmin_age" in names
    histogram = collector.metric_points["corral_request_duration_seconds"].histogram  # type: ignore[attr-defined]
    assert any(p.count > 0 and sum(p.bucket_counts) == p.count for p in histogram.data_points)


def _cli(capsys: pytest.CaptureFixture[str], cluster: Cluster, *argv: str) -> str:
    assert cli.main([*argv, "--url", cluster.frontend_url, "--api-key", cluster.admin_key]) == 0
    return capsys.readouterr().out


def test_corral_nodes_lists_the_worker(
    traffic: tuple[Samples, Samples], cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _cli(capsys, cluster, "nodes")
    header, row = text.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "STATUS", "TYPE"] and row.split()[:3] == [
        "w1",
        "healthy",
        "backend",
    ]
    nodes = json.loads(_cli(capsys, cluster, "nodes", "--json"))
    assert [n["name"] for n in nodes] == ["w1"]
    assert cluster.admin_key not in text


def test_corral_models_shows_where_each_model_is_loaded(
    traffic: tuple[Samples, Samples], cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = {
        line.split()[0]: line for line in _cli(capsys, cluster, "models").splitlines()[1:] if line.strip()
    }
    assert rows["sim"].endswith("w1#0") and rows["staged"].endswith("w1#0") and rows["slow"].endswith("-")
    body = json.loads(_cli(capsys, cluster, "models", "list", "--json"))
    assert {m["name"]: m["loaded_on"] for m in body["models"]}["sim"] == ["w1#0"]


def test_corral_activity_reads_the_operations_api(
    traffic: tuple[Samples, Samples], cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["activity", "--url", cluster.frontend_url, "--api-key", cluster.admin_key, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err  # the operations API is there: no "has no GET /api/operations" fallback
    assert isinstance(json.loads(captured.out)["operations"], list)
    table = _cli(capsys, cluster, "activity", "--history")  # the loads of the traffic are in the record
    rows = table.split("history:\n", 1)[1].splitlines()
    assert rows[0].split()[:3] == ["OPERATION", "TYPE", "STATUS"]
    assert any(row.split()[0] == "staged" for row in rows[1:]), table
    assert any(row.split()[0] == "broken" and "weights are corrupt" in row for row in rows[1:]), table


def test_corral_refuses_a_wrong_key_in_one_line(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nodes", "--url", cluster.frontend_url, "--api-key", "wrong-key-123"]) == 1
    err = capsys.readouterr().err
    assert "refused the API key" in err and "--api-key" in err and "wrong-key-123" not in err
    assert len(err.strip().splitlines()) == 1


def test_models_load_follow_prints_progress_lines_until_ready(cluster: Cluster) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "corral", "models", "load", "slow", "--follow", "--url", cluster.frontend_url],
        env={**os.environ, "CORRAL_API_KEY": cluster.admin_key},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "slow ready on w1#0"
    assert any(line.startswith("slow [") and "loading" in line for line in lines[:-1])  # a bar per step
    assert cluster.admin_key not in result.stdout + result.stderr


def test_models_load_follow_draws_a_bar_on_a_terminal(cluster: Cluster) -> None:
    settings = load(
        ModelLoadSettings,
        "corral models load",
        "",
        ["slower", "--url", cluster.frontend_url, "--api-key", cluster.admin_key, "--follow"],
    )
    out = io.StringIO()
    assert commands.load(settings, out, tty=True) == 0
    text = out.getvalue()
    assert "\r" in text and "%" in text and text.rstrip().endswith("slower ready on w1#0")
    again = io.StringIO()
    assert commands.load(settings, again, tty=True) == 0  # loaded already: said at once
    assert again.getvalue() == "slower: loaded\n"


def test_models_load_follow_reports_a_failed_load_with_its_cause(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "models",
        "load",
        "broken",
        "--follow",
        "--url",
        cluster.frontend_url,
        "--api-key",
        cluster.admin_key,
    ]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("corral models: loading broken failed: ") and "weights are corrupt" in err
    assert len(err.splitlines()) == 1
