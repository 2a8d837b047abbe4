"""The parent-watch settings from the environment: Go durations or plain seconds, on by default."""

from __future__ import annotations

import pytest

from corral.backends.parent_watch import ParentWatchConfig, parse_duration_s


@pytest.mark.parametrize(
    ("text", "seconds"), [("2s", 2.0), ("500ms", 0.5), ("1m30s", 90.0), ("0.25", 0.25), ("1h", 3600.0)]
)
def test_watch_intervals_accept_go_durations_and_plain_seconds(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "fast", "2 s", "5x"])
def test_malformed_watch_intervals_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_s(text)


def test_parent_watch_is_on_every_two_seconds_by_default() -> None:
    assert ParentWatchConfig.from_env({}) == ParentWatchConfig(enabled=True, interval_s=2.0)


@pytest.mark.parametrize("value", ["false", "0", "no", "OFF"])
def test_parent_watch_can_be_disabled(value: str) -> None:
    assert ParentWatchConfig.from_env({"LOCALAI_BACKEND_PARENT_WATCH": value}).enabled is False


def test_a_bad_parent_watch_interval_falls_back_to_the_default() -> None:
    config = ParentWatchConfig.from_env({"LOCALAI_BACKEND_PARENT_WATCH_INTERVAL": "soon"})
    assert config.interval_s == 2.0
    config = ParentWatchConfig.from_env({"LOCALAI_BACKEND_PARENT_WATCH_INTERVAL": "0s"})
    assert config.interval_s == 2.0
