"""Settings of the router queue (routing/queue.py), mixed into the frontend's settings (issue 25).

A model's replicas take `--replica-slots` requests each at once; a request that finds them all taken waits in the
model's queue (bounded, with a wait budget), served by priority class, then by fair share of tokens between
tenants (Virtual Token Counter), so a tenant flooding a model cannot starve a light one.
"""

from __future__ import annotations

from corral.config.parse import parse_non_negative_int, parse_positive_duration_s, parse_positive_int
from corral.config.settings import setting, settings_class


@settings_class
class FrontendQueueSettings:
    """The per-model router queue."""

    replica_slots: int = setting(
        "--replica-slots",
        "CORRAL_REPLICA_SLOTS",
        default=0,
        parse=parse_non_negative_int,
        help="requests one replica is sent at once (from all frontends); 0: each model's `parallel` (its option "
        "parallel:N or n_parallel:N, else 1) plus one, so the backend has the next request ready and every other "
        "waits in the router queue, served by priority, then fairly between tenants. Set it when a backend's "
        "concurrency is not in its model's options (e.g. LLAMACPP_PARALLEL on the workers)",
    )
    queue_timeout_s: float = setting(
        "--queue-timeout",
        "CORRAL_QUEUE_TIMEOUT",
        default=60.0,
        parse=parse_positive_duration_s,
        help="longest a request waits in a model's queue for a free replica slot; past it: 429 with Retry-After",
    )
    queue_max_depth: int = setting(
        "--queue-max-depth",
        "CORRAL_QUEUE_MAX_DEPTH",
        default=256,
        parse=parse_positive_int,
        help="requests waiting for one model on this frontend; one more is answered 429 with Retry-After at once",
    )
