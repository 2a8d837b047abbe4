"""The worker's backend operations over real NATS: install (with progress), list, upgrade, delete."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.bus import subjects
from corral.gallery.index import GalleryRef
from corral.worker.backend_ops import external_entry
from corral.worker.handlers import NodeHandlers
from corral.worker.ports import PortAllocator
from corral.worker.supervisor import Supervisor
from support.cluster import free_port
from support.galleries import make_manager

NODE = "node-ops"


class Worker:
    def __init__(self, nc: Client, handlers: NodeHandlers, supervisor: Supervisor, backends: Path) -> None:
        self.nc, self.handlers, self.supervisor, self.backends = nc, handlers, supervisor, backends

    async def ask(self, subject: str, body: dict[str, object], timeout_s: float = 120.0) -> dict[str, Any]:
        reply = await self.nc.request(subject, json.dumps(body).encode(), timeout=timeout_s)
        return dict(json.loads(reply.data))


@pytest.fixture
async def worker(nats_url: str, tmp_path: Path, gallery_index: Path) -> AsyncIterator[Worker]:
    backends = tmp_path / "backends"
    manager = make_manager(backends, [GalleryRef("test", str(gallery_index))], builtins=True)
    base = free_port()
    supervisor = Supervisor(
        PortAllocator(base, base + 20),
        bind_host="127.0.0.1",
        token="tok",
        start_timeout_s=30,
        registry=manager.registry,
    )
    nc = await nats.connect(nats_url)

    async def stop_node() -> None:
        return None

    handlers = NodeHandlers(nc, NODE, supervisor, "127.0.0.1", stop_node, manager)
    await handlers.subscribe()
    yield Worker(nc, handlers, supervisor, backends)
    await supervisor.stop_all(force=True)
    await nc.close()


@pytest.mark.slow
async def test_install_streams_progress_then_serves_and_upgrade_and_delete_report_stopped_keys(
    worker: Worker,
) -> None:
    events: list[dict[str, object]] = []

    async def on_progress(msg: Msg) -> None:
        events.append(json.loads(msg.data))

    sub = await worker.nc.subscribe(subjects.backend_install_progress(NODE, "op1"), cb=on_progress)
    reply = await worker.ask(
        subjects.backend_install(NODE), {"backend": "refbackend", "model_id": "m1", "op_id": "op1"}
    )
    assert reply["success"] is True and str(reply["address"]).startswith("127.0.0.1:")
    await worker.nc.flush()
    await sub.unsubscribe()
    phases = [e["phase"] for e in events]
    assert phases[0] == "resolving" and phases[-1] == "starting"
    assert all(e["op_id"] == "op1" and e["node_id"] == NODE and e["backend"] == "refbackend" for e in events)

    listed = await worker.ask(subjects.backend_list(NODE), {})
    by_name = {b["name"]: b for b in listed["backends"]}
    assert by_name["refbackend"]["is_system"] is False and by_name["refbackend"]["version"] == "1.0.0"
    assert by_name["simulator"]["is_system"] is True  # the built-in engines are backends of the same registry

    sim = await worker.ask(subjects.backend_install(NODE), {"backend": "simulator", "model_id": "s1"})
    assert sim["success"] is True
    await worker.ask(subjects.backend_install(NODE), {"backend": "ref", "model_id": "m2"})  # by alias
    upgraded = await worker.ask(subjects.backend_upgrade(NODE), {"backend": "refbackend"})
    assert upgraded["success"] is True and upgraded["reports_stopped_processes"] is True
    assert sorted(upgraded["stopped_process_keys"]) == ["m1#0", "m2#0"]
    assert list(worker.supervisor.processes) == ["s1#0"]  # the other backend's process kept running

    again = await worker.ask(subjects.backend_install(NODE), {"backend": "refbackend", "model_id": "m1"})
    assert again["success"] is True
    deleted = await worker.ask(subjects.backend_delete(NODE), {"backend": "refbackend"})
    assert deleted == {"success": True, "stopped_process_keys": ["m1#0"], "reports_stopped_processes": True}
    assert not (worker.backends / "refbackend").exists() and list(worker.supervisor.processes) == ["s1#0"]


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"backend": "../etc"}, "field 'backend'"),
        ({"backend": "a/b"}, "field 'backend'"),
        ({"backend": "a\u0000b"}, "field 'backend'"),
        ({"backend": ""}, "field 'backend' is required"),
        ({"backend": "x" * 5000}, "field 'backend' must be at most"),
        ({"backend": "nope"}, "galleries searched: test"),
        ({"backend": "simulator", "model_id": "../m"}, "field 'model_id'"),
        ({"backend": "simulator", "replica_index": -1}, "field 'replica_index'"),
        ({"backend": "simulator", "replica_index": 1 << 40}, "field 'replica_index'"),
        ({"backend": "simulator", "op_id": "x" * 10_000}, "field 'op_id'"),
        ({"backend": "x", "backend_galleries": "[not json"}, "backend_galleries"),
    ],
)
async def test_bad_install_requests_get_an_error_naming_the_field(
    worker: Worker, body: dict[str, object], needle: str
) -> None:
    reply = await worker.ask(subjects.backend_install(NODE), body, timeout_s=30)
    assert reply["success"] is False and needle in str(reply["error"])
    assert not worker.backends.exists() or [p.name for p in worker.backends.iterdir()] == []


async def test_system_backends_cannot_be_deleted(worker: Worker) -> None:
    reply = await worker.ask(subjects.backend_delete(NODE), {"backend": "simulator"})
    assert reply["success"] is False and "system backend" in str(reply["error"])


async def test_an_install_by_uri_installs_that_directory_under_the_given_name(
    worker: Worker, gallery_index: Path
) -> None:
    """The reference's external install: `uri` (+ `name`/`alias`) instead of a gallery entry."""
    tiny = gallery_index.parent / "tiny-external"
    tiny.mkdir(exist_ok=True)
    (tiny / "run.sh").write_text("#!/bin/sh\nexec sleep 60\n")
    reply = await worker.ask(
        subjects.backend_upgrade(NODE), {"backend": "x"}
    )  # nothing installed: clear error
    assert reply["success"] is False and "galleries searched" in str(reply["error"])
    bad = await worker.ask(subjects.backend_install(NODE), {"backend": "ext", "uri": "relative/dir"})
    assert bad["success"] is False and "field 'uri'" in str(bad["error"])
    listed_before = await worker.ask(subjects.backend_list(NODE), {})
    assert "ext" not in {b["name"] for b in listed_before["backends"]}
    await worker.handlers.backend_ops.manager.ensure(
        "ext", direct=external_entry("ext", str(tiny), None, None)
    )
    listed = await worker.ask(subjects.backend_list(NODE), {})
    ext = {b["name"]: b for b in listed["backends"]}["ext"]
    assert ext["uri"] == str(tiny) and ext["gallery_url"] == str(tiny)
