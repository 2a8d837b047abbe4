"""Settings of usage accounting: batched writes of per key x model x hour counts, mixed into the frontend's settings (issue 25)."""

from __future__ import annotations

from corral.config.settings import settings_class


@settings_class
class FrontendUsageSettings:
    """usage accounting: batched writes of per key x model x hour counts."""
