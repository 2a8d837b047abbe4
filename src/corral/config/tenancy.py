"""Settings of API keys' policy: rate limits, quotas, priorities (tenancy/), mixed into the frontend's settings (issue 25).

A key's limits themselves are in its row (`/api/keys`); these settings say how the frontends share their counts.
"""

from __future__ import annotations

from corral.config.parse import parse_positive_duration_s
from corral.config.settings import setting, settings_class


@settings_class
class FrontendTenancySettings:
    """API keys' policy: rate limits, quotas, priorities (tenancy/)."""

    key_limits_sync_interval_s: float = setting(
        "--key-limits-sync-interval",
        "CORRAL_KEY_LIMITS_SYNC_INTERVAL",
        default=0.5,
        parse=parse_positive_duration_s,
        help="how often this frontend publishes the requests and tokens it counted per rate-limited API key on "
        "NATS, and so how late the other frontends see them: a key's rpm/tpm can be overrun by what the other "
        "frontends admit for it in about this long",
    )
