"""Settings of API keys' policy: rate limits, quotas, priorities (tenancy/), mixed into the frontend's settings (issue 25)."""

from __future__ import annotations

from corral.config.settings import settings_class


@settings_class
class FrontendTenancySettings:
    """API keys' policy: rate limits, quotas, priorities (tenancy/)."""
