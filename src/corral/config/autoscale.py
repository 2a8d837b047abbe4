"""Settings of autoscaling on load (replicas/autoscale.py), mixed into the frontend's settings (issue 25)."""

from __future__ import annotations

from corral.config.settings import settings_class


@settings_class
class FrontendAutoscaleSettings:
    """autoscaling on load (replicas/autoscale.py)."""
