"""Settings that keep registration and auth from being flooded (issue 21), appended to the frontend's table.

Pending nodes are capped and expire; registrations are rate limited per source address; failed API-key
guesses from one source are delayed, then refused for the rest of a window (frontend/auth_throttle.py).
"""

from __future__ import annotations

from corral.config.parse import parse_positive_duration_s, parse_positive_int
from corral.config.settings import Setting

FRONTEND_ADMISSION_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "max_pending_nodes",
        "--max-pending-nodes",
        ("CORRAL_MAX_PENDING_NODES",),
        100,
        parse_positive_int,
        "nodes waiting for approval at once; a registration of a new name past it gets 429 (approve or delete "
        "pending nodes, or raise this)",
    ),
    Setting(
        "pending_node_expiry_s",
        "--pending-node-expiry",
        ("CORRAL_PENDING_NODE_EXPIRY",),
        3600.0,
        parse_positive_duration_s,
        "a never-approved node that has not registered or beaten for this long is "
        "deleted by the health monitor (a live worker registers again)",
    ),
    Setting(
        "node_register_rate",
        "--node-register-rate",
        ("CORRAL_NODE_REGISTER_RATE",),
        60,
        parse_positive_int,
        "registrations per minute from one source address (bursts of as many); past it: 429 with Retry-After",
    ),
    Setting(
        "auth_failure_limit",
        "--auth-failure-limit",
        ("CORRAL_AUTH_FAILURE_LIMIT",),
        20,
        parse_positive_int,
        "unknown API keys one source address may present per window; the later half of them are answered "
        "after a growing delay, and past it the source gets 429 with Retry-After until the window ends",
    ),
    Setting(
        "auth_failure_window_s",
        "--auth-failure-window",
        ("CORRAL_AUTH_FAILURE_WINDOW",),
        60.0,
        parse_positive_duration_s,
        "the window of --auth-failure-limit, from a source's first unknown key",
    ),
)
