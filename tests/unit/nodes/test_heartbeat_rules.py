"""The heartbeat checkpoint rules, one case per rule, plus the slow-drift case."""

from __future__ import annotations

import pytest

from corral.nodes.heartbeat_rules import Beat, Written, merge, write_reason

MIB = 1 << 20
GIB = 1 << 30
CHECKPOINT_S = 60.0
BASE = Beat(
    available_vram=8 * GIB,
    available_ram=16 * GIB,
    available_disk=100 * GIB,
    total_vram=24 * GIB,
    total_disk=500 * GIB,
    gpu_vendor="nvidia",
)


def written(status: str = "healthy", at_s: float = 0.0, figures: Beat = BASE) -> Written:
    return Written(at_s=at_s, status=status, figures=figures)


def test_the_first_beat_seen_by_a_frontend_is_written() -> None:
    assert write_reason(None, BASE, 1.0, CHECKPOINT_S) == "first beat seen by this frontend"


@pytest.mark.parametrize("status", ["pending", "offline", "unhealthy"])
def test_any_beat_from_a_node_that_is_not_active_is_written(status: str) -> None:
    assert write_reason(written(status), BASE, 1.0, CHECKPOINT_S) == f"node is {status}"


@pytest.mark.parametrize("status", ["healthy", "draining"])
def test_a_timestamp_only_beat_from_an_active_node_is_held(status: str) -> None:
    assert write_reason(written(status), BASE, 59.0, CHECKPOINT_S) is None


def test_a_held_beat_is_written_once_the_checkpoint_has_passed_since_the_last_write() -> None:
    assert write_reason(written(at_s=0.0), BASE, 60.0, CHECKPOINT_S) == "checkpoint interval elapsed"


@pytest.mark.parametrize("change", [{"gpu_vendor": "amd"}, {"total_vram": 48 * GIB}, {"total_disk": 1}])
def test_a_changed_hardware_fact_is_written_at_once(change: dict[str, object]) -> None:
    beat = Beat(**{**BASE.__dict__, **change})
    assert write_reason(written(), beat, 1.0, CHECKPOINT_S) == f"{next(iter(change))} changed"


@pytest.mark.parametrize("field", ["available_vram", "available_ram", "available_disk"])
@pytest.mark.parametrize("delta, writes", [(256 * MIB, False), (256 * MIB + 1, True), (-(300 * MIB), True)])
def test_a_free_figure_writes_when_it_moved_more_than_256_mib(field: str, delta: int, writes: bool) -> None:
    beat = Beat(**{**BASE.__dict__, field: getattr(BASE, field) + delta})
    reason = write_reason(written(), beat, 1.0, CHECKPOINT_S)
    assert (reason == f"{field} moved more than 256 MiB") is writes


def test_a_reading_that_drifts_in_small_steps_writes_once_the_total_distance_crosses_the_threshold() -> None:
    last = written()
    outcomes = []
    for step in range(1, 5):  # 100 MiB per beat: beats 1 and 2 stay within 256 MiB of the written value
        assert BASE.available_ram is not None
        beat = Beat(available_ram=BASE.available_ram - step * 100 * MIB)
        outcomes.append(write_reason(last, beat, float(step), CHECKPOINT_S))
    assert outcomes[:2] == [None, None]
    assert outcomes[2] == "available_ram moved more than 256 MiB"


def test_fields_a_beat_does_not_carry_are_not_compared() -> None:
    assert write_reason(written(), Beat(), 1.0, CHECKPOINT_S) is None


def test_a_checkpoint_below_the_beat_interval_writes_every_beat() -> None:
    assert write_reason(written(at_s=0.0), BASE, 10.0, 1.0) == "checkpoint interval elapsed"


def test_merge_keeps_the_last_written_value_of_fields_a_beat_omits() -> None:
    merged = merge(BASE, Beat(available_ram=1))
    assert merged.available_ram == 1 and merged.available_vram == BASE.available_vram
