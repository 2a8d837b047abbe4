"""A rule's autoscaling fields: all optional, validated, every mistake naming its field (schedules by index)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.placement.rules import RuleInvalid, parse_rule
from corral.placement.schedules import ScheduleWindow


def test_every_autoscaling_field_is_read() -> None:
    spec = parse_rule(
        {
            "model_name": "m",
            "min_replicas": 0,
            "max_replicas": 4,
            "target_queue_wait_s": 2,
            "target_ttft_s": 1.5,
            "scale_down_idle_s": 600,
            "cooldown_s": 0,
            "schedules": [
                {
                    "days": ["Mon", "fri"],
                    "from": "08:00",
                    "to": "18:30",
                    "tz": "Europe/Paris",
                    "min_replicas": 2,
                }
            ],
        }
    )
    scaling = spec.autoscale
    assert (
        scaling.target_queue_wait_s,
        scaling.target_ttft_s,
        scaling.scale_down_idle_s,
        scaling.cooldown_s,
    ) == (
        2.0,
        1.5,
        600.0,
        0.0,
    )
    assert scaling.schedules == (ScheduleWindow(("mon", "fri"), "08:00", "18:30", "Europe/Paris", 2),)
    assert scaling.to_json()["schedules"][0]["from"] == "08:00"


def test_a_rule_without_them_does_not_autoscale_on_load() -> None:
    scaling = parse_rule({"model_name": "m", "min_replicas": 1}).autoscale
    assert not scaling.configured and not scaling.on_load and scaling.to_json() == {}


def test_a_schedule_window_defaults_to_every_day_in_utc() -> None:
    window = parse_rule(
        {"model_name": "m", "schedules": [{"from": "22:00", "to": "06:00", "min_replicas": 1}]}
    ).autoscale.schedules[0]
    assert window.days == ("mon", "tue", "wed", "thu", "fri", "sat", "sun") and window.tz == "UTC"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"target_queue_wait_s": 0, "max_replicas": 2}, "target_queue_wait_s", "more than 0"),
        ({"target_ttft_s": "fast", "max_replicas": 2}, "target_ttft_s", "must be a number"),
        ({"target_ttft_s": 7200, "max_replicas": 2}, "target_ttft_s", "at most 3600"),
        ({"target_queue_wait_s": 2}, "target_queue_wait_s", "set max_replicas >= 1"),  # no ceiling
        ({"scale_down_idle_s": -1}, "scale_down_idle_s", "more than 0"),
        ({"cooldown_s": -5}, "cooldown_s", "at least 0"),
        ({"schedules": {"from": "09:00"}}, "schedules", "must be a list"),
        ({"schedules": [{"from": "9am", "to": "17:00", "min_replicas": 1}]}, "schedules[0].from", "HH:MM"),
        ({"schedules": [{"from": "09:00", "to": "24:00", "min_replicas": 1}]}, "schedules[0].to", "HH:MM"),
        ({"schedules": [{"from": "09:00", "to": "17:00"}]}, "schedules[0].min_replicas", "is required"),
        (
            {"schedules": [{"from": "09:00", "to": "17:00", "min_replicas": 1, "days": ["someday"]}]},
            "schedules[0].days",
            "unknown day",
        ),
        (
            {"schedules": [{"from": "09:00", "to": "17:00", "min_replicas": 1, "tz": "Mars/Olympus"}]},
            "schedules[0].tz",
            "unknown time zone",
        ),
        (
            {"schedules": [{"from": "09:00", "to": "17:00", "min_replicas": 1, "tz": "../../etc/passwd"}]},
            "schedules[0].tz",
            "unknown time zone",
        ),
        (
            {"schedules": [{"from": "09:00", "to": "17:00", "min_replicas": 1, "when": "now"}]},
            "schedules[0].when",
            "unknown field",
        ),
        (
            {"max_replicas": 2, "schedules": [{"from": "09:00", "to": "17:00", "min_replicas": 5}]},
            "schedules[0].min_replicas",
            "must not exceed max_replicas",
        ),
        ({"replicas": "all", "scale_down_idle_s": 60}, "scale_down_idle_s", "does not autoscale"),
    ],
)
def test_a_wrong_autoscaling_field_is_refused_by_name(fields: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(RuleInvalid) as caught:
        parse_rule({"model_name": "m", **fields})
    assert caught.value.field == field and words in str(caught.value)
