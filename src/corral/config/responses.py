"""Settings of the Responses API on the frontend (issue 22)."""

from __future__ import annotations

from corral.config.parse import parse_positive_duration_s
from corral.config.settings import setting, settings_class


@settings_class
class FrontendResponsesSettings:
    """Stored responses of the Responses API."""

    responses_ttl_s: float = setting(
        "--responses-ttl",
        "CORRAL_RESPONSES_TTL",
        default=30 * 86400.0,
        parse=parse_positive_duration_s,
        help="how long a stored response (/v1/responses, store: true) is kept for GET and previous_response_id; "
        "older ones are deleted by every frontend's sweep (720h: 30 days, as OpenAI)",
    )
