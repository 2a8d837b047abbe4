"""Fault drivers shared by tests/e2e/test_faults.py and benchmarks/faults.py.

Each driver injects one fault into a running cluster of real processes while clients talk to it,
and returns an `Outcome`: what the clients saw, how long until the cluster served again, how many
requests were lost and how many LoadModel calls happened beyond the loads the scenario needs.
Every client call is bounded (no driver can hang a test); every wait names what it waits for.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from corral.up.embedded import EmbeddedNats, EmbeddedPostgres
from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.fault_clients import (
    CLIENT_TIMEOUT_S,
    Reply,
    StreamResult,
    Traffic,
    chat,
    load_status,
    stream_chat,
    summarize,
    until_served,
)
from support.processes import backend_pid
from support.proxy import ThrottlingProxy
from support.waiting import wait_for

LOADED = re.compile(r"loaded model '|LoadModel '.*' failed")


def load_model_calls(procs: Iterable[Proc], model: str) -> int:
    """LoadModel calls for `model` answered by backends of these workers (from the backends' stderr,
    which a worker relays into its log at debug level as `[model#i] …`)."""
    tag = re.compile(rf"\[{re.escape(model)}#\d+\] ")
    return sum(
        1 for proc in procs for line in proc.log().splitlines() if tag.search(line) and LOADED.search(line)
    )


@dataclass
class Outcome:
    """One fault, as `benchmarks/faults.py` prints it."""

    fault: str
    client_saw: str
    recover_s: float | None  # fault injected -> the cluster serves the affected model again
    lost: int  # requests that did not get their answer
    duplicate_loads: int  # LoadModel calls beyond the loads the scenario needs
    details: dict[str, object] = field(default_factory=dict)

    def stream(self, key: str) -> StreamResult:
        """details[key], a streamed chat's result."""
        value = self.details[key]
        assert isinstance(value, StreamResult), (key, value)
        return value

    def reply(self, key: str) -> Reply:
        """details[key], one chat's reply."""
        value = self.details[key]
        assert isinstance(value, Reply), (key, value)
        return value

    def replies(self, key: str) -> list[Reply]:
        """details[key], the replies of several chats."""
        value = self.details[key]
        assert isinstance(value, list) and all(isinstance(r, Reply) for r in value), (key, value)
        return value

    def row(self) -> str:
        recover = "never" if self.recover_s is None else f"{self.recover_s:.1f}"
        return f"{self.fault:<34} {recover:>9} {self.lost:>5} {self.duplicate_loads:>10}  {self.client_saw}"


HEADER = f"{'fault':<34} {'recover_s':>9} {'lost':>5} {'dup_loads':>10}  client saw"


def kill9(proc: Proc) -> float:
    """SIGKILL a process the test started and reap it; returns the moment of the kill."""
    t = time.monotonic()
    os.kill(proc.popen.pid, signal.SIGKILL)
    proc.popen.wait(30)
    return t


def write_sim_model(models_dir: Path, name: str, *options: str, file_bytes: int = 0) -> None:
    """A simulator model config; with `file_bytes`, backed by a random file so loading stages it."""
    models_dir.mkdir(parents=True, exist_ok=True)
    model = name
    if file_bytes:
        model = f"{name}.bin"
        with open(models_dir / model, "wb") as handle:
            for _ in range(0, file_bytes, 1 << 20):
                handle.write(os.urandom(min(1 << 20, file_bytes)))
            handle.truncate(file_bytes)
    opts = "".join(f'\n  - "{o}"' for o in options) or " []"
    (models_dir / f"{name}.yaml").write_text(
        f"name: {name}\nbackend: simulator\nparameters:\n  model: {model}\noptions:{opts}\n"
    )


# --- the fault bed: its own PostgreSQL and NATS, a cluster on them --------------------------------

FRONTEND_WINDOWS = {  # short windows (env, as an operator would set them) so faults resolve in seconds
    "CORRAL_LOAD_ORPHAN_WINDOW": "3s",
    "CORRAL_LOAD_STALL_WINDOW": "5s",
    "LOCALAI_STALE_NODE_THRESHOLD": "4s",
    "LOCALAI_NODE_HEARTBEAT_CHECKPOINT": "1s",
    "CORRAL_HEALTH_CHECK_INTERVAL": "0.5s",
    "LOCALAI_MODEL_LOAD_WAIT": "30s",
    # issue 10 item 6 (no hang); ignored by a frontend without these knobs
    "CORRAL_STREAM_IDLE_TIMEOUT": "5s",
    "CORRAL_BACKEND_KEEPALIVE": "5s",
}
WORKER_BEAT = ("--heartbeat-interval", "0.5s")


def query(database_url: str, sql: str, *args: object) -> list[dict[str, object]]:
    """One SQL statement from sync code (a fresh connection; fine for a test's reads)."""
    import asyncio

    import asyncpg

    async def run() -> list[dict[str, object]]:
        conn = await asyncpg.connect(database_url, timeout=10)
        try:
            return [dict(r) for r in await conn.fetch(sql, *args, timeout=10)]
        finally:
            await conn.close()

    return asyncio.run(run())


def replicas(database_url: str, model: str) -> list[dict[str, object]]:
    return query(
        database_url,
        "SELECT n.name AS node, m.state, m.address, m.replica_index FROM node_models m "
        "JOIN backend_nodes n ON n.id = m.node_id WHERE m.model_name = $1 ORDER BY n.name",
        model,
    )


def loaded_on(database_url: str, model: str) -> list[str]:
    return [str(r["node"]) for r in replicas(database_url, model) if r["state"] == "loaded"]


@dataclass
class FaultBed:
    """PostgreSQL and NATS owned by the bed (so faults can stop them), one frontend, workers on demand."""

    root: Path
    cluster: Cluster
    pg: EmbeddedPostgres
    nats: EmbeddedNats
    frontends: list[Proc] = field(default_factory=list)  # besides cluster.frontend
    proxies: list[ThrottlingProxy] = field(default_factory=list)

    @classmethod
    def start(
        cls, root: Path, pg: EmbeddedPostgres, nats: EmbeddedNats, name: str, **frontend_env: str
    ) -> FaultBed:
        database = pg.create_database(f"faults_{name.replace('-', '_')}")
        cluster = Cluster(
            root=root / name,
            database_url=database,
            nats_url=nats.url,
            frontend_env={**FRONTEND_WINDOWS, **frontend_env},
        )
        cluster.models_dir.mkdir(parents=True, exist_ok=True)
        return cls(root / name, cluster, pg, nats)

    @property
    def url(self) -> str:
        return self.cluster.frontend_url

    def start_frontend(self) -> None:
        self.cluster.start_frontend("--expose-node-header")

    def spawn_frontend(self, name: str) -> tuple[Proc, str]:
        proc, url = self.cluster.spawn_frontend(name, "--expose-node-header")
        self.frontends.append(proc)
        return proc, url

    def start_worker(self, name: str, upload_bytes_per_s: float | None = None) -> Proc:
        """A worker; with `upload_bytes_per_s`, frontends reach its file server through a throttling proxy."""
        c = self.cluster
        base = free_port_pair()
        extra: list[str] = []
        if upload_bytes_per_s:
            proxy = ThrottlingProxy(base - 1, upload_bytes_per_s=upload_bytes_per_s).__enter__()
            self.proxies.append(proxy)
            extra = ["--advertise-http-addr", f"127.0.0.1:{proxy.port}"]
        proc = spawn(name, [*c.worker_argv(name, base), *WORKER_BEAT, *extra], c.root / "logs")
        wait_http(f"http://127.0.0.1:{base - 1}/readyz", proc)
        c.workers.append(proc)
        c.worker_ports.append(base)
        return proc

    def worker(self, name: str) -> Proc:
        return next(p for p in self.cluster.workers if p.name == name)

    def load_calls(self, model: str) -> int:
        return load_model_calls(self.cluster.workers, model)

    def stop(self) -> None:
        for proc in self.cluster.workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.popen.pid, signal.SIGCONT)
        self.cluster.stop()
        for proc in self.frontends:
            proc.stop()
        for proxy in self.proxies:
            proxy.__exit__()


# --- the faults ------------------------------------------------------------------------------------


def worker_killed_mid_stream(bed: FaultBed, model: str) -> Outcome:
    """A replica's worker is SIGKILLed while a client reads a stream from it (its backends die with it)."""
    warm = chat(bed.url, model)
    assert warm.ok, warm.seen()
    host = loaded_on(bed.cluster.database_url, model)[0]
    stream = StreamResult()
    reader = threading.Thread(target=stream_chat, args=(bed.url, model, 400, stream), daemon=True)
    reader.start()
    wait_for(lambda: stream.pieces >= 3 or not reader.is_alive(), f"three streamed chunks of {model}", 60)
    assert stream.pieces >= 3, stream.seen()
    t0 = kill9(bed.worker(host))
    reader.join(CLIENT_TIMEOUT_S + 10)
    assert not reader.is_alive(), f"the stream from the killed worker {host} still open"
    recover_s, after = until_served(bed.url, model, t0)
    lost = 1 + sum(not r.ok for r in after)
    return Outcome(
        "worker kill -9 mid-stream",
        f"stream: {stream.seen()}; next: {summarize(after)}",
        recover_s,
        lost,
        bed.load_calls(model) - 2,
        {"stream": stream, "after": after, "host": host},
    )


def backend_stopped_mid_stream(bed: FaultBed, model: str) -> Outcome:
    """A replica's backend process is SIGSTOPped while a client reads a stream from it: alive, silent."""
    warm = chat(bed.url, model)
    assert warm.ok, warm.seen()
    row = replicas(bed.cluster.database_url, model)[0]
    pid = backend_pid(str(row["address"]).rpartition(":")[2], bed.cluster.workers)
    assert pid is not None, f"no backend process for {row}"
    stream = StreamResult()
    reader = threading.Thread(target=stream_chat, args=(bed.url, model, 400, stream), daemon=True)
    reader.start()
    wait_for(lambda: stream.pieces >= 3 or not reader.is_alive(), f"three streamed chunks of {model}", 60)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        reader.join(CLIENT_TIMEOUT_S + 10)
        recover_s, after = until_served(bed.url, model, t0)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the cluster may have stopped it meanwhile
            os.kill(pid, signal.SIGCONT)
    return Outcome(
        "backend SIGSTOP mid-stream",
        f"stream: {stream.seen()}; next: {summarize(after)}",
        recover_s,
        1 + sum(not r.ok for r in after),
        bed.load_calls(model) - 2,
        {"stream": stream, "after": after, "host": row["node"]},
    )


def worker_killed_mid_staging(bed: FaultBed, model: str) -> Outcome:
    """The worker receiving a model's files is SIGKILLed halfway through the upload."""
    result: list[Reply] = []
    request = threading.Thread(target=lambda: result.append(chat(bed.url, model)), daemon=True)
    request.start()
    status: dict[str, object] = {}

    def staging() -> bool:
        status.update(load_status(bed.url, model) or {})
        return (
            status.get("state") == "staging" and int(str(status.get("bytes_sent") or 0)) > 0
        ) or not request.is_alive()

    wait_for(staging, f"{model} staging its first bytes", 60)
    assert request.is_alive(), f"the request ended before staging: {result[0].seen() if result else '?'}"
    host = str(status["node"])
    t0 = kill9(bed.worker(host))
    request.join(CLIENT_TIMEOUT_S + 10)
    assert not request.is_alive(), f"the request for {model} still open after its worker {host} died"
    reply = result[0]
    recover_s: float | None = reply.ended - t0 if reply.ok else None
    after: list[Reply] = []
    if not reply.ok:
        recover_s, after = until_served(bed.url, model, t0)
    lost = (not reply.ok) + sum(not r.ok for r in after)
    return Outcome(
        "worker kill -9 mid-staging",
        f"waiter: {reply.seen()}" + (f"; retries: {summarize(after)}" if after else ""),
        recover_s,
        lost,
        bed.load_calls(model) - 1,
        {"reply": reply, "after": after, "host": host},
    )


def worker_killed_idle(bed: FaultBed, model: str) -> Outcome:
    """A worker holding a warm replica is SIGKILLed between requests."""
    warm = chat(bed.url, model)
    assert warm.ok, warm.seen()
    host = loaded_on(bed.cluster.database_url, model)[0]
    t0 = kill9(bed.worker(host))
    recover_s, after = until_served(bed.url, model, t0)
    return Outcome(
        "worker kill -9 idle",
        f"next requests: {summarize(after)}",
        recover_s,
        sum(not r.ok for r in after),
        bed.load_calls(model) - 2,
        {"after": after, "host": host},
    )


def frontend_killed_owning_load(bed: FaultBed, model: str) -> Outcome:
    """The frontend running a model's load job is SIGKILLed mid-load; another frontend must take it over."""
    doomed, doomed_url = bed.spawn_frontend("frontend-doomed")
    gave_up = chat(doomed_url, model, timeout_s=1.0)  # the client leaves; the load goes on
    wait_for(
        lambda: (load_status(bed.url, model) or {}).get("state") == "loading",
        f"{model} loading under frontend-doomed",
        60,
    )
    t0 = kill9(doomed)
    reply = chat(bed.url, model)
    recover_s: float | None = reply.ended - t0 if reply.ok else None
    after: list[Reply] = []
    if not reply.ok:
        recover_s, after = until_served(bed.url, model, t0)
    return Outcome(
        "frontend kill -9 owning a load",
        f"other frontend: {reply.seen()}",
        recover_s,
        (not reply.ok) + sum(not r.ok for r in after),
        bed.load_calls(model) - 1,
        {"reply": reply, "after": after, "first": gave_up},
    )


def _heartbeats_resumed(bed: FaultBed, timeout_s: float = 30.0) -> bool:
    names = [p.name for p in bed.cluster.workers if p.popen.poll() is None]

    def fresh() -> bool:
        try:
            rows = query(
                bed.cluster.database_url,
                "SELECT name FROM backend_nodes WHERE "
                "last_heartbeat > now() - interval '5 seconds' AND name = ANY($1::text[])",
                names,
            )
        except Exception:
            return False
        return len(rows) == len(names)

    try:
        wait_for(fresh, "fresh heartbeats from every worker", timeout_s)
    except AssertionError:
        return False
    return True


def dependency_restarted(
    bed: FaultBed, dependency: str, warm: str, cold: str, later: str, down_s: float = 10.0
) -> Outcome:
    """Stop PostgreSQL or NATS under warm traffic for `down_s`, ask for a cold model meanwhile, start it again.

    recover_s counts from the restart to the first answer for a model never loaded before (`later`):
    that needs the whole control path (PostgreSQL job row, NATS install, staging, LoadModel)."""
    service: EmbeddedPostgres | EmbeddedNats = bed.pg if dependency == "postgresql" else bed.nats
    first = chat(bed.url, warm)
    assert first.ok, first.seen()
    procs = [p for p in [bed.cluster.frontend, *bed.frontends, *bed.cluster.workers] if p is not None]
    with Traffic(bed.url, warm, concurrency=2) as traffic:
        traffic.wait_served(3, "before the fault")
        t0 = time.monotonic()
        service.stop()
        time.sleep(1.0)
        cold_reply = chat(bed.url, cold, timeout_s=45.0)  # a cold request while the dependency is down
        time.sleep(max(0.0, t0 + down_s - time.monotonic()))
        t1 = time.monotonic()
        service.start()
        recover_s, after = until_served(bed.url, later, t1)
        served_after = True
        try:
            traffic.wait_served(3, "after the restart", 60)
        except AssertionError:
            served_after = False
    during = [r for r in traffic.replies if t0 <= r.started < t1]
    outside = [r for r in traffic.replies if not t0 <= r.started < t1]
    heartbeats = _heartbeats_resumed(bed)
    lost = sum(not r.ok for r in traffic.replies) + (not cold_reply.ok) + sum(not r.ok for r in after)
    duplicates = (
        (bed.load_calls(warm) - 1) + (bed.load_calls(later) - 1) + (bed.load_calls(cold) - cold_reply.ok)
    )
    return Outcome(
        f"{'PostgreSQL' if dependency == 'postgresql' else 'NATS'} down {down_s:g}s under traffic",
        f"warm: {summarize(during)}; cold: {cold_reply.seen()}; after the restart: {summarize(after)}",
        recover_s,
        lost,
        duplicates,
        {
            "during": during,
            "outside": outside,
            "cold": cold_reply,
            "after": after,
            "served_after": served_after,
            "heartbeats": heartbeats,
            "exited": [p.name for p in procs if p.popen.poll() is not None],
        },
    )
