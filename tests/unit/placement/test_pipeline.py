from __future__ import annotations

import pytest

from corral.config.sizes import GIB, format_size
from corral.placement.errors import NoNodeAvailable
from corral.placement.filters.disk_headroom import DiskHeadroomFilter, required_disk_bytes
from corral.placement.filters.selector import SelectorFilter, selector_matches
from corral.placement.pipeline import decide
from corral.placement.rejection import NoNodeFits
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

GB = 1000**3


def node(
    name: str,
    *,
    vram: int = 0,
    free_vram: int | None = None,
    budget: int = 0,
    reserved: int = 0,
    disk_total: int = 0,
    disk_free: int = 0,
    labels: dict[str, str] | None = None,
    replicas: tuple[ReplicaSnapshot, ...] = (),
    slots: int = 1,
) -> NodeSnapshot:
    return NodeSnapshot(
        id=name,
        name=name,
        address=f"{name}:50051",
        http_address=f"{name}:50050",
        total_vram=vram,
        available_vram=vram if free_vram is None else free_vram,
        vram_budget_bytes=budget,
        reserved_vram=reserved,
        total_disk=disk_total,
        available_disk=disk_free,
        labels=labels or {},
        replicas=replicas,
        max_replicas_per_model=slots,
    )


def loaded(model: str, in_flight: int = 0, index: int = 0) -> ReplicaSnapshot:
    return ReplicaSnapshot(model=model, replica_index=index, state="loaded", in_flight=in_flight)


@pytest.mark.parametrize(
    "model_bytes, need",
    [
        (0, 2 * GIB),  # unknown size ⇒ 2 GiB floor
        (4 * GIB, 5 * GIB),  # small model: the 1 GiB minimum margin
        (100 * GIB, 105 * GIB),  # large model: 5 %
    ],
)
def test_required_disk_is_model_size_plus_margin(model_bytes: int, need: int) -> None:
    assert required_disk_bytes(model_bytes) == need


@pytest.mark.parametrize("free, fits", [(10 * GIB, True), (GIB, False)])  # model is 4 GiB (+1 GiB margin)
def test_disk_headroom_filter_rejects_node_below_model_size_plus_margin(free: int, fits: bool) -> None:
    verdict = DiskHeadroomFilter().check(
        PlacementRequest("m", disk_bytes=4 * GIB), node("a", disk_total=100 * GIB, disk_free=free)
    )
    assert (verdict is None) is fits


def test_unknown_disk_stays_in_rotation_and_shared_models_skip_the_check() -> None:
    assert DiskHeadroomFilter().check(PlacementRequest("m", disk_bytes=99 * GIB), node("a")) is None
    full = node("a", disk_total=100 * GIB, disk_free=0)
    assert DiskHeadroomFilter().check(PlacementRequest("m", disk_bytes=GIB, shared_models=True), full) is None


def test_no_room_anywhere_is_the_specified_message_listing_every_node() -> None:
    nodes = [
        node("nvidia-thor", disk_total=937 * GB, disk_free=0),
        node("b", disk_total=100 * GB, disk_free=2 * GB),
    ]
    with pytest.raises(NoNodeFits) as info:
        decide(PlacementRequest("longcat", disk_bytes=70 * GIB), nodes)
    assert str(info.value) == (
        "scheduling longcat: no node has enough free disk for the model: need 78.9 GB free on the models "
        "filesystem, but nvidia-thor has 0 B free of 937.0 GB, b has 2.0 GB free of 100.0 GB"
    )


def test_with_the_check_off_it_warns_and_schedules_anyway() -> None:
    nodes = [node("a", disk_total=10 * GB, disk_free=0)]
    decision = decide(PlacementRequest("m", disk_bytes=GIB, disk_check=False), nodes)
    assert decision.node.name == "a"
    assert "disk-headroom check is DISABLED" in decision.warnings[0]
    assert "knob=distributed-disk-headroom-check" in decision.warnings[0]


@pytest.mark.parametrize(
    "selector, labels, ok",
    [
        ({"gpu.vendor": "nvidia"}, {"gpu.vendor": "nvidia"}, True),
        ({"gpu.vendor": "nvidia"}, {"gpu.vendor": "amd"}, False),
        ({"!node.role": "vllm-follower"}, {"node.role": "vllm-follower"}, False),  # negation
        ({"!node.role": "vllm-follower"}, {"node.role": "leader"}, True),
        ({"!node.role": "vllm-follower"}, {}, True),
        ({"!spot": ""}, {"spot": "true"}, False),  # bare !key: the label must be absent
        ({"!spot": ""}, {}, True),
        ({"a": "1", "b": "2"}, {"a": "1"}, False),  # every term must match
    ],
)
def test_selectors_match_equality_negation_and_absence(
    selector: dict[str, str], labels: dict[str, str], ok: bool
) -> None:
    assert (selector_matches(selector, labels) is None) is ok
    assert (
        SelectorFilter().check(PlacementRequest("m", selector=selector), node("n", labels=labels)) is None
    ) is ok


def test_nothing_fits_is_one_sentence_with_counts() -> None:
    nodes = [
        node("a", labels={"zone": "x"}),
        node("b", labels={"zone": "x"}),
        node("c", labels={"zone": "y"}, disk_total=10 * GB, disk_free=0),
    ]
    with pytest.raises(NoNodeFits) as info:
        decide(PlacementRequest("llama3", disk_bytes=GIB, selector={"zone": "z"}), nodes)
    assert str(info.value) == "scheduling llama3: 0/3 nodes fit: 3 selector mismatch"
    assert set(info.value.rejections) == {"a", "b", "c"}


def test_enough_free_vram_wins_over_idle() -> None:
    small_idle = node("small", vram=8 * GIB)
    big_busy = node("big", vram=80 * GIB, free_vram=60 * GIB, replicas=(loaded("x"),))
    assert decide(PlacementRequest("m", vram_bytes=20 * GIB), [small_idle, big_busy]).node.name == "big"


def test_free_vram_is_capped_by_the_budget_and_reservations() -> None:
    budgeted = node("budgeted", vram=80 * GIB, budget=10 * GIB)
    reserved = node("reserved", vram=24 * GIB, reserved=20 * GIB)
    plain = node("plain", vram=24 * GIB, replicas=(loaded("x"),))
    assert (
        decide(PlacementRequest("m", vram_bytes=16 * GIB), [budgeted, reserved, plain]).node.name == "plain"
    )


def test_idle_nodes_come_before_least_loaded_and_then_fewest_in_flight() -> None:
    busy = node("busy", replicas=(loaded("x", in_flight=3),))
    calm = node("calm", replicas=(loaded("y", in_flight=1),))
    idle = node("idle")
    assert decide(PlacementRequest("m"), [busy, calm, idle]).node.name == "idle"
    assert decide(PlacementRequest("m"), [busy, calm]).node.name == "calm"


def test_nothing_with_room_asks_for_an_eviction() -> None:
    full = node("full", vram=8 * GIB, free_vram=GIB, replicas=(loaded("x"),))
    decision = decide(PlacementRequest("m", vram_bytes=4 * GIB), [full])
    assert decision.needs_eviction


def test_replica_slots_use_the_lowest_free_index() -> None:
    n = node("a", slots=3, replicas=(loaded("m", index=0), loaded("m", index=2)))
    assert n.free_replica_index("m") == 1
    with pytest.raises(NoNodeFits, match="1 no free replica slot"):
        decide(PlacementRequest("m"), [node("b", replicas=(loaded("m"),))])


def test_no_nodes_says_to_start_a_worker() -> None:
    with pytest.raises(NoNodeAvailable, match="start `corral worker"):
        decide(PlacementRequest("m"), [])


def test_explain_lists_every_node_with_its_verdict() -> None:
    decision = decide(
        PlacementRequest("m", selector={"zone": "a"}),
        [node("a1", labels={"zone": "a"}), node("b1", labels={"zone": "b"})],
    )
    explained = decision.explain()
    assert explained["chosen"] == "a1"
    verdicts = {n["node"]: n for n in explained["nodes"]}
    assert verdicts["b1"]["fits"] is False and verdicts["b1"]["reason"] == "selector mismatch"
    assert set(verdicts["a1"]["scores"]) == {"vram_fit", "idle", "least_loaded"}


@pytest.mark.parametrize(
    "num_bytes, text", [(0, "0 B"), (999, "999 B"), (73_500_000_000, "73.5 GB"), (937 * GB, "937.0 GB")]
)
def test_sizes_print_like_the_specification(num_bytes: int, text: str) -> None:
    assert format_size(num_bytes) == text


def test_a_new_replica_never_takes_the_index_of_one_being_stopped() -> None:
    stopping = ReplicaSnapshot(model="m", replica_index=0, state="unloading")
    assert node("a", replicas=(stopping,)).free_replica_index("m") == 1  # the slot is free, index 0 is not
