from __future__ import annotations

import pytest

from corral.worker.addresses import resolve_addresses, resolve_max_port
from corral.worker.ports import PORT_QUARANTINE_S, PortAllocator, PortRangeExhausted


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_ports_are_allocated_upward_from_the_base() -> None:
    ports = PortAllocator(50051, 50060, Clock())
    assert [ports.allocate(f"m{i}#0") for i in range(3)] == [50051, 50052, 50053]


def test_a_released_port_is_quarantined_before_reuse() -> None:
    clock = Clock()
    ports = PortAllocator(50051, 50052, clock)
    a = ports.allocate("a#0")
    ports.allocate("b#0")
    ports.release("a#0", a)
    with pytest.raises(PortRangeExhausted):
        ports.allocate("c#0")
    clock.now_s += PORT_QUARANTINE_S + 0.1
    assert ports.allocate("c#0") == a


def test_a_key_gets_its_previous_port_back_after_quarantine() -> None:
    clock = Clock()
    ports = PortAllocator(50051, 50060, clock)
    a, b = ports.allocate("a#0"), ports.allocate("b#0")
    ports.release("a#0", a)
    ports.release("b#0", b)
    clock.now_s += PORT_QUARANTINE_S + 0.1
    assert ports.allocate("a#0") == a


def test_full_range_error_is_the_specified_text() -> None:
    clock = Clock()
    ports = PortAllocator(50051, 50053, clock)
    for key in ("a#0", "b#0", "c#0"):
        ports.allocate(key)
    ports.release("c#0", 50053)
    with pytest.raises(PortRangeExhausted) as info:
        ports.allocate("d#0")
    assert str(info.value) == (
        "no free gRPC port in range: 50051-50053 is fully consumed by 2 running backend(s) and 1 port(s) "
        "still in quarantine; raise LOCALAI_GRPC_MAX_PORT to widen the range"
    )


@pytest.mark.parametrize(
    "configured, expected",
    [
        (0, 65535),  # unset ⇒ full range
        (50000, 65535),  # below the base port ⇒ ignored in favour of the full range
        (70000, 65535),  # above 65535 ⇒ clamped
        (50150, 50150),
    ],
)
def test_max_port_is_clamped_and_a_typo_degrades_to_the_full_range(configured: int, expected: int) -> None:
    assert resolve_max_port(50051, configured) == expected


def test_addresses_follow_the_reference_precedence() -> None:
    a = resolve_addresses(
        addr="",
        serve_addr="0.0.0.0:50051",
        grpc_max_port=0,
        http_addr="",
        advertise_addr="",
        advertise_http_addr="",
        hostname="box",
    )
    assert (a.base_port, a.advertise_grpc, a.http_bind, a.advertise_http) == (
        50051,
        "box:50051",
        ("0.0.0.0", 50050),
        "box:50050",
    )
    b = resolve_addresses(
        addr="10.0.0.5:6000",
        serve_addr="0.0.0.0:50051",
        grpc_max_port=6100,
        http_addr="",
        advertise_addr="",
        advertise_http_addr="",
        hostname="box",
    )
    assert (b.base_port, b.max_port, b.advertise_grpc, b.advertise_http) == (
        6000,
        6100,
        "10.0.0.5:6000",
        "10.0.0.5:5999",
    )


def test_a_handed_over_spare_keeps_its_port_under_its_new_key() -> None:
    clock = Clock()
    ports = PortAllocator(50051, 50060, clock)
    port = ports.allocate("spare:llama-cpp")
    ports.rekey(port, "spare:llama-cpp", "m#0")
    assert ports.in_use == {port: "m#0"}
    ports.release("spare:llama-cpp", port)  # the old key no longer holds it
    assert ports.in_use == {port: "m#0"}
    ports.release("m#0", port)
    clock.now_s += PORT_QUARANTINE_S + 1
    assert ports.allocate("m#0") == port  # affinity follows the new key
    with pytest.raises(ValueError, match="not held by"):
        ports.rekey(port, "spare:llama-cpp", "x#0")
