"""frontend/node_api/admission: the registration rate per source and the pending-node cap's refusal."""

from __future__ import annotations

from corral.frontend.node_api.admission import RegisterRate, pending_cap_message


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_a_burst_of_the_rate_passes_and_the_next_waits_for_one_refill() -> None:
    clock = Clock()
    rate = RegisterRate(per_minute=6, clock=clock)  # one registration every 10 s, bursts of 6
    assert [rate.take("10.0.0.1") for _ in range(6)] == [0.0] * 6
    assert rate.take("10.0.0.1") == 10.0
    assert rate.take("10.0.0.2") == 0.0  # its own bucket
    clock.now_s += 10
    assert rate.take("10.0.0.1") == 0.0
    assert rate.take("10.0.0.1") == 10.0


def test_the_refusals_name_their_setting() -> None:
    assert RegisterRate(per_minute=6).refusal(9.2) == (
        "too many registrations from this address: at most 6 a minute (CORRAL_NODE_REGISTER_RATE); retry after 10s",
        10,
    )
    assert "(CORRAL_MAX_PENDING_NODES)" in pending_cap_message(
        5
    ) and "raise CORRAL_MAX_PENDING_NODES" in pending_cap_message(5)
