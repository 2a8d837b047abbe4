"""A small synchronous client of a frontend's admin API, with one-line errors that name the fix.

The API key is sent as `Authorization: Bearer` and never appears in a message.
"""

from __future__ import annotations

from typing import Any

import httpx

from corral.config.parse import format_duration_s


class ClientError(Exception):
    """The frontend could not be asked or refused: the message says what to change."""


class FrontendClient:
    def __init__(self, url: str, api_key: str, timeout_s: float) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> FrontendClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._http.close()

    def get(self, path: str, *, missing_ok: bool = False) -> Any:
        """The JSON body of GET `path`; None for a 404 when `missing_ok`."""
        response = self._send("GET", path)
        if response.status_code == 404 and missing_ok:
            return None
        return self._body(response, path)

    def post(self, path: str) -> tuple[int, Any]:
        response = self._send("POST", path)
        return response.status_code, self._body(response, path)

    def _send(self, method: str, path: str) -> httpx.Response:
        try:
            return self._http.request(method, path)
        except httpx.TimeoutException:
            raise ClientError(
                f"{method} {self.url}{path}: no answer within {format_duration_s(self.timeout_s)} "
                "(raise --timeout / $CORRAL_CLI_TIMEOUT)"
            ) from None
        except httpx.HTTPError as exc:
            raise ClientError(
                f"cannot reach the frontend at {self.url} ({type(exc).__name__}: {exc}); "
                "point --url / $CORRAL_URL at a running `corral run`"
            ) from None

    def _body(self, response: httpx.Response, path: str) -> Any:
        if response.status_code in (401, 403):
            raise ClientError(
                f"the frontend refused the API key on {path} (HTTP {response.status_code}: "
                f"{_message(response)}); pass an admin key with --api-key / $CORRAL_API_KEY"
            )
        if response.status_code >= 400:
            raise ClientError(
                f"{response.request.method} {path}: HTTP {response.status_code}: {_message(response)}"
            )
        try:
            return response.json()
        except ValueError:
            raise ClientError(f"{path}: the frontend answered something that is not JSON") from None


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))[:300]
    return str(error or body)[:300]
