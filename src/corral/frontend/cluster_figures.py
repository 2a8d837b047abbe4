"""Figures read at scrape time, not per request: nodes by status, load jobs by state (PostgreSQL),
the connection pool's use and each replica's in-flight count (this frontend's memory).

`refresh()` runs on the event loop before a scrape (and before each OTLP export); it builds the
metric families once and swaps them in, so the collector (which the Prometheus registry may call
from another thread) only hands out a finished list. A database that does not answer within
READ_TIMEOUT_S leaves those two families out (`corral_cluster_figures_ok` 0) and the scrape goes on;
figures under MIN_REFRESH_S old are served again without a query.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

import asyncpg
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.routing.replica import Replica
from corral.store import cluster as cluster_store
from corral.store.node_resources import NodeResources, node_resources
from corral.store.nodes import DRAINING, HEALTHY, OFFLINE, PENDING, UNHEALTHY

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 3.0
MIN_REFRESH_S = 1.0
NODE_STATUSES = (HEALTHY, PENDING, DRAINING, UNHEALTHY, OFFLINE)  # reported at 0 too, so a line drops to 0
JOB_STATES = ("pending", "installing", "staging", "loading", "failed")


class ClusterFigures:
    def __init__(self, pool: asyncpg.Pool, replicas: Callable[[], Iterable[Replica]]) -> None:
        self.pool, self.replicas = pool, replicas
        self.families: list[Metric] = []
        self._refreshed_s = -MIN_REFRESH_S

    async def refresh(self) -> None:
        """Read the figures again, unless they are under MIN_REFRESH_S old (a scrape flood costs no queries)."""
        now_s = time.monotonic()
        if now_s - self._refreshed_s < MIN_REFRESH_S:
            return
        self._refreshed_s = now_s
        families: list[Metric] = [self._pool_family(), self._in_flight_family()]
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                nodes = await cluster_store.nodes_by_status(self.pool)
                jobs = await cluster_store.load_jobs_by_state(self.pool)
                resources = await node_resources(self.pool)
        except Exception as exc:
            log.warning(
                "metrics: node and load-job counts not read (PostgreSQL: %s)", exc or type(exc).__name__
            )
            families.append(_single("corral_cluster_figures_ok", "1 when the last scrape read PostgreSQL", 0))
        else:
            families += [
                _counts("corral_nodes", "Registered nodes by status", "status", NODE_STATUSES, nodes),
                _counts("corral_load_jobs", "Load jobs in the cluster by state", "state", JOB_STATES, jobs),
                _single("corral_cluster_figures_ok", "1 when the last scrape read PostgreSQL", 1),
                *node_families(resources),
            ]
        self.families = families

    def _pool_family(self) -> GaugeMetricFamily:
        size, idle = self.pool.get_size(), self.pool.get_idle_size()
        family = GaugeMetricFamily(
            "corral_db_pool_connections", "PostgreSQL pool connections of this frontend", labels=["state"]
        )
        for state, value in (("in_use", size - idle), ("idle", idle), ("max", self.pool.get_max_size())):
            family.add_metric([state], value)
        return family

    def _in_flight_family(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "corral_replica_in_flight",
            "Requests in flight on each replica from this frontend",
            labels=["model", "node", "replica"],
        )
        for replica in self.replicas():
            family.add_metric(
                [replica.model, replica.node_name, str(replica.replica_index)], replica.in_flight
            )
        return family


NODE_GAUGES = (  # per node, as its heartbeats last stored them (issue 26: the alert rules' disk headroom)
    ("corral_node_vram_total_bytes", "VRAM of each node", "total_vram"),
    ("corral_node_vram_available_bytes", "VRAM free on each node", "available_vram"),
    ("corral_node_ram_total_bytes", "RAM of each node", "total_ram"),
    ("corral_node_ram_available_bytes", "RAM free on each node", "available_ram"),
    ("corral_node_disk_total_bytes", "Disk of each node's models directory", "total_disk"),
    ("corral_node_disk_available_bytes", "Disk free under each node's models directory", "available_disk"),
)


def node_families(rows: list[NodeResources]) -> list[GaugeMetricFamily]:
    """Each registered node's status (1 on its current status: alert on `offline`) and memory and disk."""
    status = GaugeMetricFamily(
        "corral_node_status", "1 for each registered node's current status", labels=["node", "status"]
    )
    gauges = [(GaugeMetricFamily(name, text, labels=["node"]), attr) for name, text, attr in NODE_GAUGES]
    for row in rows:
        status.add_metric([row.name, row.status], 1)
        for family, attr in gauges:
            family.add_metric([row.name], getattr(row, attr))
    return [status, *(family for family, _ in gauges)]


def _counts(
    name: str, help_text: str, label: str, known: tuple[str, ...], found: dict[str, int]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=[label])
    for key in sorted({*known, *found}):
        family.add_metric([key], found.get(key, 0))
    return family


def _single(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


class _Current(Collector):
    """The registry's one entry for these figures: those of the frontend that started last in the process."""

    active: ClusterFigures | None = None

    def collect(self) -> Iterable[Metric]:
        return list(self.active.families) if self.active is not None else []


_current = _Current()
REGISTRY.register(_current)


def activate(figures: ClusterFigures) -> None:
    _current.active = figures
