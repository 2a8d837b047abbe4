"""Settings of circuit breakers and retries of backend calls (routing/breaker.py), mixed into the frontend's settings (issue 25)."""

from __future__ import annotations

from corral.config.settings import settings_class


@settings_class
class FrontendBreakerSettings:
    """circuit breakers and retries of backend calls (routing/breaker.py)."""
