"""Settings that keep registration and auth from being flooded (issue 21), mixed into the frontend's settings.

Pending nodes are capped and expire; registrations are rate limited per source address; failed API-key
guesses from one source are delayed, then refused for the rest of a window (frontend/auth_throttle.py).
"""

from __future__ import annotations

from corral.config.parse import parse_positive_duration_s, parse_positive_int
from corral.config.settings import setting, settings_class


@settings_class
class FrontendAdmissionSettings:
    """Pending-node cap and expiry, registration rate, API-key failure limits."""

    max_pending_nodes: int = setting(
        "--max-pending-nodes",
        "CORRAL_MAX_PENDING_NODES",
        default=100,
        parse=parse_positive_int,
        help="nodes waiting for approval at once; a registration of a new name past it gets 429 (approve or delete "
        "pending nodes, or raise this)",
    )
    pending_node_expiry_s: float = setting(
        "--pending-node-expiry",
        "CORRAL_PENDING_NODE_EXPIRY",
        default=3600.0,
        parse=parse_positive_duration_s,
        help="a never-approved node that has not registered or beaten for this long is "
        "deleted by the health monitor (a live worker registers again)",
    )
    node_register_rate: int = setting(
        "--node-register-rate",
        "CORRAL_NODE_REGISTER_RATE",
        default=60,
        parse=parse_positive_int,
        help="registrations per minute from one source address (bursts of as many); past it: 429 with Retry-After",
    )
    auth_failure_limit: int = setting(
        "--auth-failure-limit",
        "CORRAL_AUTH_FAILURE_LIMIT",
        default=20,
        parse=parse_positive_int,
        help="unknown API keys one source address may present per window; the later half of them are answered "
        "after a growing delay, and past it the source gets 429 with Retry-After until the window ends",
    )
    auth_failure_window_s: float = setting(
        "--auth-failure-window",
        "CORRAL_AUTH_FAILURE_WINDOW",
        default=60.0,
        parse=parse_positive_duration_s,
        help="the window of --auth-failure-limit, from a source's first unknown key",
    )
