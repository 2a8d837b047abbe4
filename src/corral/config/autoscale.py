"""Settings of autoscaling on load (replicas/autoscale.py), mixed into the frontend's settings (issue 25).

A scheduling rule's `target_queue_wait_s` / `target_ttft_s` are held against the cluster's load on the model:
each frontend reports its queue's figures on NATS every `--load-report-interval`; the frontend running the
replica reconciler (CORRAL_RECONCILER_INTERVAL) aggregates the live reports and decides.
"""

from __future__ import annotations

from corral.config.parse import parse_duration_s, parse_positive_duration_s
from corral.config.settings import setting, settings_class


@settings_class
class FrontendAutoscaleSettings:
    """autoscaling on load (replicas/autoscale.py)."""

    autoscale_cooldown_s: float = setting(
        "--autoscale-cooldown",
        "CORRAL_AUTOSCALE_COOLDOWN",
        default=60.0,
        parse=parse_duration_s,
        help="least time between two scaling actions on load for a rule that sets no cooldown_s",
    )
    load_report_interval_s: float = setting(
        "--load-report-interval",
        "CORRAL_LOAD_REPORT_INTERVAL",
        default=2.0,
        parse=parse_positive_duration_s,
        help="how often each frontend publishes its per-model queue figures (wait, TTFT, depth) for the "
        "autoscaler; a frontend silent for 3 intervals is left out",
    )
