"""`GET /api/traffic`'s query: a window of 1 to 3600 seconds (default 3600), an optional model and node; anything
else is refused naming the parameter."""

from __future__ import annotations

import pytest

from corral.frontend.admin.traffic import BadParameter, TrafficQuery, parse_query


def _parse(**params: str) -> TrafficQuery:
    return parse_query(params, dict.fromkeys(params, 1))


def test_no_parameter_asks_for_the_last_hour_of_everything() -> None:
    assert _parse() == TrafficQuery(3600.0, None, None)


def test_window_model_and_node_are_taken_as_given() -> None:
    assert _parse(window="300", model="gemma", node="dgx-01") == TrafficQuery(300.0, "gemma", "dgx-01")


@pytest.mark.parametrize(
    "params, param, message",
    [
        ({"window": "0"}, "window", "window '0' must be seconds from 1 to 3600"),
        ({"window": "3601"}, "window", "window '3601' must be seconds from 1 to 3600"),
        ({"window": "an hour"}, "window", "window 'an hour' must be seconds from 1 to 3600"),
        ({"window": "nan"}, "window", "window 'nan' must be seconds from 1 to 3600"),
        ({"model": ""}, "model", "model must be 1 to 255 characters"),
        ({"node": "n" * 256}, "node", "node must be 1 to 255 characters"),
        ({"since": "1h"}, "since", "unknown parameter 'since'; known: window, model, node"),
    ],
)
def test_a_bad_parameter_is_refused_naming_it(params: dict[str, str], param: str, message: str) -> None:
    with pytest.raises(BadParameter) as caught:
        _parse(**params)
    assert (caught.value.param, str(caught.value)) == (param, message)


def test_a_parameter_given_twice_is_refused() -> None:
    with pytest.raises(BadParameter, match="window is given 2 times; give it once"):
        parse_query({"window": "60"}, {"window": 2})
