"""Registration-token check for the worker-facing `/api/node/*` routes."""

from __future__ import annotations

import hmac

from fastapi import Request
from fastapi.responses import JSONResponse


def check_registration_token(request: Request, token: str) -> JSONResponse | None:
    """None when allowed; otherwise the 401 answer (reference §4.1 messages)."""
    if not token:
        return None
    header = request.headers.get("authorization", "")
    if not header.startswith("Bearer "):
        return JSONResponse({"error": "missing or invalid Authorization header"}, status_code=401)
    if not hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode()):
        return JSONResponse({"error": "invalid registration token"}, status_code=401)
    return None
