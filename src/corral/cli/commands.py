"""`corral nodes`, `corral models [list]`, `corral models load NAME [--follow]`, `corral activity`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import quote

from corral.cli.client import ClientError, FrontendClient
from corral.cli.progress import LoadView
from corral.cli.tables import labels, size, table
from corral.config.client import ActivitySettings, ClientSettings, ModelLoadSettings
from corral.config.parse import format_duration_s

POLL_S = 0.5
NO_JOB_GRACE_S = 10.0  # a load just requested may not have claimed its job yet


def client_of(settings: ClientSettings) -> FrontendClient:
    return FrontendClient(settings.url, settings.api_key, settings.timeout_s)


def _print_json(body: Any, out: TextIO) -> None:
    print(json.dumps(body, indent=2, sort_keys=True, default=str), file=out)


def nodes(settings: ClientSettings, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with client_of(settings) as client:
        rows = client.get("/api/nodes")
    if settings.json:
        _print_json(rows, out)
        return 0
    print(
        table(
            [
                "NAME",
                "STATUS",
                "TYPE",
                "ADDRESS",
                "MODELS",
                "IN-FLIGHT",
                "VRAM FREE/TOTAL",
                "RAM FREE/TOTAL",
                "LABELS",
            ],
            [
                [
                    n.get("name"),
                    n.get("status"),
                    n.get("node_type"),
                    n.get("address"),
                    n.get("model_count", 0),
                    n.get("in_flight_count", 0),
                    f"{size(n.get('available_vram'))}/{size(n.get('total_vram'))}",
                    f"{size(n.get('available_ram'))}/{size(n.get('total_ram'))}",
                    labels(n.get("labels")),
                ]
                for n in rows
            ],
        ),
        file=out,
    )
    return 0


def _placements(client: FrontendClient) -> dict[str, list[str]]:
    """model → `node#replica` of each loaded replica on a healthy node."""
    names = {n["id"]: n["name"] for n in client.get("/api/nodes")}
    found: dict[str, list[str]] = {}
    for row in client.get("/api/nodes/models"):
        node = names.get(row["node_id"], row["node_id"])
        found.setdefault(row["model_name"], []).append(f"{node}#{row['replica_index']}")
    return found


def models(settings: ClientSettings, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with client_of(settings) as client:
        sizing = client.get("/api/models")
        where = _placements(client)
    entries = [{**m, "loaded_on": where.get(m["name"], [])} for m in sizing.get("models", [])]
    if settings.json:
        _print_json({**sizing, "models": entries}, out)
        return 0
    fits = {True: "yes", False: "no", None: "?"}
    print(
        table(
            ["NAME", "BACKEND", "MEMORY", "FITS", "FITS ON", "LOADED ON"],
            [
                [
                    m["name"],
                    m.get("backend"),
                    size(m.get("memory_bytes")),
                    fits.get(m.get("fits"), "?"),
                    m.get("fits_on") or "-",
                    ", ".join(m["loaded_on"]) or "-",
                ]
                for m in entries
            ],
        ),
        file=out,
    )
    aliases = sizing.get("aliases") or {}
    if aliases:
        print("\naliases: " + ", ".join(f"{a} -> {m}" for a, m in sorted(aliases.items())), file=out)
    return 0


def _status(op: dict[str, Any]) -> str:
    if op.get("error"):
        return "error"
    if op.get("isQueued"):
        return "queued"
    return str(op.get("state") or op.get("outcome") or op.get("status") or op.get("phase") or "running")


def _percent(value: object) -> str:
    return "-" if value is None else f"{value}%"


def _operation_rows(operations: list[dict[str, Any]]) -> list[list[object]]:
    """Rows of `/api/operations` entries (live: progress; history: outcome), each followed by its nodes."""
    rows: list[list[object]] = []
    for op in operations:
        rows.append(
            [
                op.get("name") or op.get("id"),
                op.get("taskType"),
                _status(op),
                _percent(op.get("progress")),
                op.get("nodeName") or op.get("nodeID") or "-",
                op.get("error") or op.get("message") or "",
            ]
        )
        for node in op.get("nodes") or []:  # per-node rows of a fan-out install
            rows.append(
                [
                    f"  - {node.get('node_name') or node.get('node_id')}",
                    "",
                    _status(node),
                    _percent(node.get("percentage", node.get("progress"))),
                    node.get("phase") or "",
                    node.get("error") or node.get("message") or "",
                ]
            )
    return rows


def activity(settings: ActivitySettings, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with client_of(settings) as client:
        live = client.get("/api/operations", missing_ok=True)
        if live is None:
            raise ClientError(
                f"the frontend at {client.url} has no GET /api/operations (an older corral); "
                "`corral models` shows the loads it knows of"
            )
        history = client.get("/api/operations/history", missing_ok=True) if settings.history else None
    if settings.json:
        _print_json(
            {
                "operations": live.get("operations", []),
                **({"history": history.get("operations", [])} if history else {}),
            },
            out,
        )
        return 0
    headers = ["OPERATION", "TYPE", "STATUS", "PROGRESS", "NODE", "MESSAGE"]
    operations = live.get("operations", [])
    print(table(headers, _operation_rows(operations)) if operations else "no operation is running", file=out)
    if history:
        print("\nhistory:\n" + table(headers, _operation_rows(history.get("operations", []))), file=out)
    return 0


def load(
    settings: ModelLoadSettings,
    out: TextIO | None = None,
    *,
    tty: bool | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    out = out or sys.stdout
    with client_of(settings) as client:
        status, body = client.post(f"/api/model-configs/{quote(settings.model, safe='')}/load")
        name = body.get("model", settings.model)
        if not settings.follow or status == 200:
            if settings.json:
                _print_json(body, out)
            else:
                print(f"{name}: {body.get('state')}", file=out)
            return 0
        view = LoadView(name, out, out.isatty() if tty is None else tty)
        started_s = clock()
        while clock() - started_s < settings.follow_timeout_s:
            current = client.get(f"/api/models/{quote(name, safe='')}/load-status", missing_ok=True)
            if current is None:
                where = _placements(client).get(name)
                if where:
                    view.finish(f"{name} ready on {', '.join(where)}")
                    return 0
                if clock() - started_s > NO_JOB_GRACE_S:
                    raise ClientError(
                        f"no load of {name} is running and no replica is loaded: it ended without "
                        "loading (the frontend's log has the cause)"
                    )
            elif current.get("state") == "failed":
                view.finish(f"{name} failed")
                raise ClientError(f"loading {name} failed: {current.get('error') or 'see the frontend log'}")
            else:
                view.update(current)
            sleep(POLL_S)
    raise ClientError(
        f"{name} is not ready after {format_duration_s(settings.follow_timeout_s)} (raise "
        "--follow-timeout / $CORRAL_FOLLOW_TIMEOUT); the load goes on in the cluster"
    )
