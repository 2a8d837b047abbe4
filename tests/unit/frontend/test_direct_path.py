"""Which inference requests skip the limits and access layers (frontend/direct_path.py): only those both layers
would pass straight through, decided from memory; every other one takes the layers and their answers."""

from __future__ import annotations

from typing import Any

from corral.frontend.access import AccessControl, KeyAccess
from corral.frontend.limits import RequestLimits, RequestLimitsMiddleware
from corral.store.api_keys import key_hash
from corral.tenancy.limits import Limits
from corral.tenancy.policy import KeyPolicy

PLAIN = KeyPolicy("k1", "team-a", "tenant-a")
METERED = KeyPolicy("k2", "team-a", "tenant-a", rpm=10)


class _Cache:
    """corral-good: fresh; corral-stale: known but due a lookup; corral-metered: a key with a rate limit."""

    def good(self, hashed: str) -> tuple[KeyAccess, bool] | None:
        for key, policy, fresh in (
            ("corral-good", PLAIN, True),
            ("corral-stale", PLAIN, False),
            ("corral-metered", METERED, True),
        ):
            if hashed == key_hash(key):
                return KeyAccess("user", policy, policy.caller()), fresh
        return None

    def known_wrong(self, hashed: str) -> bool:
        return False


def _scope(path: str = "/v1/chat/completions", **headers: str) -> dict[str, Any]:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "method": "POST", "path": path, "headers": raw}


def _access(user_auth: bool) -> AccessControl:
    return AccessControl(lambda *_: None, _Cache(), user_auth=user_auth, limits=Limits())  # type: ignore[arg-type]


def test_with_auth_off_an_inference_request_goes_direct_as_nobody_in_particular() -> None:
    assert _access(False).direct_access(_scope()) == (None,)


def test_a_fresh_good_key_goes_direct_as_its_caller() -> None:
    decided = _access(True).direct_access(_scope(authorization="Bearer corral-good"))
    assert decided is not None and decided[0] is not None and decided[0].policy == PLAIN


def test_every_request_the_access_layer_must_answer_or_look_up_takes_the_layer() -> None:
    access = _access(True)
    for scope in (
        _scope(),  # no key: its 401
        _scope(authorization="Bearer corral-unknown"),  # a lookup (and the throttle)
        _scope(authorization="Bearer corral-stale"),  # a lookup
        _scope(authorization="Bearer corral-metered"),  # its rate limit and headers
        _scope(authorization="Bearer corral-good", x_corral_priority="low"),  # the header's check
        _scope("/api/nodes", authorization="Bearer corral-good"),  # admin routes never
        _scope("/metrics"),
    ):
        assert access.direct_access(scope) is None, scope
    assert _access(False).direct_access(_scope(x_corral_priority="nonsense")) is None  # its 400


def test_the_limits_layer_passes_only_a_declared_length_within_the_limit_below_the_concurrency_limit() -> (
    None
):
    bounds = RequestLimits(inference_body_bytes=100, max_concurrent_requests=2)
    limits = RequestLimitsMiddleware(lambda *_: None, bounds)  # type: ignore[arg-type]
    assert limits.direct_admit(_scope(content_length="100")) == 100
    assert limits.direct_admit(_scope(content_length="101")) is None  # its 413
    assert limits.direct_admit(_scope(transfer_encoding="chunked")) is None  # metered as it arrives
    assert limits.direct_admit(_scope()) is None  # no length declared
    limits.in_flight = 2
    assert limits.direct_admit(_scope(content_length="10")) is None  # its 429
