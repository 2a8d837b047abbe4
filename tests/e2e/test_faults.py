"""Fault injection on real processes: kill -9 workers and frontends, restart NATS and PostgreSQL under traffic.

Every scenario runs on its own PostgreSQL and NATS (started here with the embedded launcher, so a test
can stop them), its own database, a frontend and simulator workers. Each asserts what the client saw
(never a hang: every client call is bounded), that the cluster serves again, how many requests were
lost and that no model was loaded twice. The same drivers print figures in benchmarks/faults.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.embedded import EmbeddedNats, EmbeddedPostgres, embedded_nats, embedded_postgres
from support.faults import (
    FaultBed,
    dependency_restarted,
    frontend_killed_owning_load,
    loaded_on,
    worker_killed_idle,
    worker_killed_mid_staging,
    worker_killed_mid_stream,
    write_sim_model,
)

pytestmark = pytest.mark.slow

MIB = 1 << 20


@pytest.fixture(scope="module")
def services(state_root: Path) -> Iterator[tuple[EmbeddedPostgres, EmbeddedNats]]:
    pg = embedded_postgres(state_root / "faults-pg")
    nats = embedded_nats(state_root / "faults-nats")
    pg.start()
    try:
        nats.start()
        yield pg, nats
    finally:
        nats.stop()
        pg.stop(quiet=True)


@pytest.fixture
def make_bed(state_root: Path, services: tuple[EmbeddedPostgres, EmbeddedNats],
             request: pytest.FixtureRequest) -> Iterator[Callable[[], FaultBed]]:
    """Factory: a bed named after the test; stopped (workers, frontends, proxies) at teardown."""
    beds: list[FaultBed] = []

    def factory() -> FaultBed:
        bed = FaultBed.start(state_root / "faults", *services, request.node.name.removeprefix("test_")[:40])
        beds.append(bed)
        return bed

    yield factory
    for bed in beds:
        bed.stop()


def test_a_worker_killed_mid_stream_ends_the_stream_with_an_error_and_the_model_reloads_elsewhere(
        make_bed: Callable[[], FaultBed]) -> None:
    bed = make_bed()
    write_sim_model(bed.cluster.models_dir, "streamer", "output_token_time_s:0.1", file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    bed.start_worker("w2")
    outcome = worker_killed_mid_stream(bed, "streamer")
    stream = outcome.details["stream"]
    assert stream.status == 200 and stream.pieces >= 3 and stream.finish_reason is None, stream.seen()
    assert stream.error.startswith("model streamer: backend error UNAVAILABLE"), stream.seen()
    assert stream.done, stream.seen()  # the client is told the stream is over, not left waiting
    assert outcome.recover_s is not None, outcome.client_saw
    assert outcome.lost == 1, outcome.client_saw  # only the cut stream: the next request is served
    survivor = ({"w1", "w2"} - {outcome.details["host"]}).pop()
    assert loaded_on(bed.cluster.database_url, "streamer") == [survivor]
    assert outcome.duplicate_loads == 0


def test_a_worker_killed_mid_staging_moves_the_load_to_the_other_worker_before_the_waiter_sees_a_failure(
        make_bed: Callable[[], FaultBed]) -> None:
    bed = make_bed()
    write_sim_model(bed.cluster.models_dir, "bulky", file_bytes=48 * MIB)
    bed.start_frontend()
    bed.start_worker("w1", upload_bytes_per_s=4 * MIB)  # ~12 s of staging: time to kill mid-transfer
    bed.start_worker("w2", upload_bytes_per_s=4 * MIB)
    outcome = worker_killed_mid_staging(bed, "bulky")
    assert outcome.details["reply"].ok, outcome.client_saw  # issue 10 item 7
    assert outcome.lost == 0
    survivor = ({"w1", "w2"} - {outcome.details["host"]}).pop()
    assert loaded_on(bed.cluster.database_url, "bulky") == [survivor]
    assert outcome.duplicate_loads == 0


def test_a_worker_killed_while_idle_costs_no_request(make_bed: Callable[[], FaultBed]) -> None:
    bed = make_bed()
    write_sim_model(bed.cluster.models_dir, "idler", file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    bed.start_worker("w2")
    outcome = worker_killed_idle(bed, "idler")
    assert [r.status for r in outcome.details["after"]] == [200], outcome.client_saw
    assert outcome.lost == 0
    survivor = ({"w1", "w2"} - {outcome.details["host"]}).pop()
    assert loaded_on(bed.cluster.database_url, "idler") == [survivor]
    assert outcome.duplicate_loads == 0


def test_a_killed_frontends_load_is_taken_over_after_the_orphan_window_and_loaded_once(
        make_bed: Callable[[], FaultBed]) -> None:
    bed = make_bed()
    write_sim_model(bed.cluster.models_dir, "orphaned", "load_time_s:4", file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    outcome = frontend_killed_owning_load(bed, "orphaned")
    assert outcome.details["first"].status == 0  # that client gave up after 1 s: its load went on
    assert outcome.details["reply"].ok, outcome.client_saw
    assert outcome.lost == 0
    assert loaded_on(bed.cluster.database_url, "orphaned") == ["w1"]
    assert outcome.duplicate_loads == 0, f"LoadModel ran {outcome.duplicate_loads + 1} times"


def _assert_dependency_outcome(bed: FaultBed, outcome, names: tuple[str, ...]) -> None:  # noqa: ANN001
    during = outcome.details["during"]
    assert during and all(r.ok for r in during), outcome.client_saw  # warm requests keep being served
    assert all(r.ok for r in outcome.details["outside"]), outcome.client_saw
    cold = outcome.details["cold"]
    if not cold.ok:  # served after the dependency returned, or refused naming it and its setting
        message = cold.message.replace("-", "_").lower()
        assert cold.status == 503 and all(n in message for n in names), cold.seen()
    assert outcome.recover_s is not None, f"no cold load served after the restart: {outcome.details['after']}"
    assert outcome.details["served_after"], "warm traffic not served after the restart"
    assert outcome.details["heartbeats"], "workers' heartbeats did not resume"
    assert outcome.details["exited"] == []  # every process recovered in place, none exited
    assert outcome.duplicate_loads == 0


def test_nats_restarted_under_traffic_keeps_warm_requests_served_and_everyone_reconnects(
        make_bed: Callable[[], FaultBed]) -> None:
    bed = make_bed()
    for name in ("warm", "cold", "later"):
        write_sim_model(bed.cluster.models_dir, name, file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    outcome = dependency_restarted(bed, "nats", "warm", "cold", "later")
    _assert_dependency_outcome(bed, outcome, ("nats", "nats_url"))


def test_postgresql_restarted_under_traffic_keeps_warm_requests_served_and_all_processes_recover(
        make_bed: Callable[[], FaultBed]) -> None:
    bed = make_bed()
    for name in ("warm", "cold", "later"):
        write_sim_model(bed.cluster.models_dir, name, file_bytes=MIB)
    bed.start_frontend()
    bed.start_worker("w1")
    outcome = dependency_restarted(bed, "postgresql", "warm", "cold", "later")
    cold = outcome.details["cold"]
    assert not cold.ok  # nothing can load without the database
    assert cold.status == 503 and "postgresql" in cold.message.lower(), cold.seen()
    assert "database_url" in cold.message.replace("-", "_").lower(), cold.seen()  # the setting that points at it
    _assert_dependency_outcome(bed, outcome, ("postgresql", "database_url"))
