"""Node status transitions decided by the health monitor (pure).

A node that was never approved is never made healthy here, whatever its heartbeats do: a
stale pending node shows as offline, and when it beats again it goes back to pending.
"""

from __future__ import annotations

from corral.store.nodes import DRAINING, HEALTHY, OFFLINE, PENDING, UNHEALTHY

GOES_OFFLINE_WHEN_STALE = frozenset({HEALTHY, UNHEALTHY, DRAINING, PENDING})


def next_status(
    status: str,
    *,
    approved: bool,
    last_beat_s: float,
    status_changed_s: float,
    now_s: float,
    stale_threshold_s: float,
    watching_since_s: float = 0.0,
    admin_drained: bool = False,
) -> str | None:
    """The status a node should move to, or None to leave it.

    `last_beat_s` is the freshest heartbeat known anywhere (durable or held by any frontend).
    A node recovers from offline/unhealthy only on a beat newer than the moment it left
    service, so a worker that deregistered moments after its last beat stays offline.
    `watching_since_s` is when the monitor started: nobody could see beats before it, so no
    node is judged stale until one threshold after it (it never counts as a beat for recovery).
    A node an admin drained comes back draining: only an admin resumes it.
    """
    stale = now_s - max(last_beat_s, watching_since_s) > stale_threshold_s
    if stale:
        return OFFLINE if status in GOES_OFFLINE_WHEN_STALE else None
    if status in (OFFLINE, UNHEALTHY) and last_beat_s > status_changed_s:
        if not approved:
            return PENDING
        return DRAINING if admin_drained else HEALTHY
    return None
