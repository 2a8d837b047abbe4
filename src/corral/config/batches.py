"""Settings of the Files and Batch APIs (/v1/files, /v1/batches), mixed into the frontend's settings (issue 25)."""

from __future__ import annotations

from corral.config.settings import settings_class


@settings_class
class FrontendBatchSettings:
    """the Files and Batch APIs (/v1/files, /v1/batches)."""
