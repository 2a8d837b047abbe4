"""Settings of the Responses API on the frontend (issue 22)."""

from __future__ import annotations

from corral.config.parse import parse_positive_duration_s
from corral.config.settings import Setting

FRONTEND_RESPONSES_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "responses_ttl_s",
        "--responses-ttl",
        ("CORRAL_RESPONSES_TTL",),
        30 * 86400.0,
        parse_positive_duration_s,
        "how long a stored response (/v1/responses, store: true) is kept for GET and previous_response_id; "
        "older ones are deleted by every frontend's sweep (720h: 30 days, as OpenAI)",
    ),
)
