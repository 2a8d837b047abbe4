"""Errors of a backend call: which blame the request, which the context window, what a timeout names."""

from __future__ import annotations

import pytest

from corral.routing.errors import CLIENT_CODES, BackendCallError, BackendRefused, BackendTimeout


def refused(code: str) -> BackendRefused:
    return BackendRefused("backend said no", model="m", node_name="gpu-1", code=code, details="d")


@pytest.mark.parametrize(
    ("code", "invalid", "too_long"),
    [
        ("INVALID_ARGUMENT", True, False),
        ("OUT_OF_RANGE", True, True),
        ("INTERNAL", False, False),
        ("UNAVAILABLE", False, False),
        ("", False, False),
        ("invalid_argument", False, False),  # gRPC status names are upper case
    ],
)
def test_only_invalid_argument_and_out_of_range_blame_the_request(
    code: str, invalid: bool, too_long: bool
) -> None:
    error = refused(code)
    assert error.invalid_request is invalid
    assert error.context_length_exceeded is too_long


def test_client_codes_are_exactly_the_two() -> None:
    assert CLIENT_CODES == {"INVALID_ARGUMENT", "OUT_OF_RANGE"}


def test_every_error_names_its_model_and_node() -> None:
    timeout = BackendTimeout(
        "no token in 30s; raise LOCALAI_X",
        model="m",
        node_name="gpu-1",
        budget_s=30.0,
        knob="LOCALAI_X",
        dropped=True,
    )
    for error in (refused("INTERNAL"), timeout, BackendCallError("lost", model="m", node_name="gpu-1")):
        assert isinstance(error, BackendCallError)
        assert (error.model, error.node_name) == ("m", "gpu-1")
    assert (timeout.budget_s, timeout.knob, timeout.dropped) == (30.0, "LOCALAI_X", True)
    assert str(timeout) == "no token in 30s; raise LOCALAI_X"
    assert (refused("X").code, refused("X").details, str(refused("X"))) == ("X", "d", "backend said no")
