"""Install progress events: field formats, and the debounce (leading edge, latest wins, final flush)."""

from __future__ import annotations

import asyncio

from corral.bus.messages import BackendInstallProgressEvent
from corral.gallery.progress import ProgressDebouncer, progress_event


def test_events_carry_human_sizes_and_a_percentage() -> None:
    event = progress_event("op", "n1", "st", "downloading", "st.tar.gz", 412_000_000, 824_000_000, True)
    assert (event.current, event.total, event.percentage) == ("412.0 MB", "824.0 MB", 50.0)
    assert event.to_json().startswith(b'{"op_id":"op","node_id":"n1","backend":"st"')
    unknown = progress_event("op", "n1", "st", "resolving", "", 0, 0, False)
    assert unknown.percentage == 0.0 and unknown.total is None and unknown.file_name is None


async def test_reports_are_debounced_leading_edge_with_a_final_flush() -> None:
    sent: list[BackendInstallProgressEvent] = []

    async def publish(event: BackendInstallProgressEvent) -> None:
        sent.append(event)

    def make(
        phase: str, file_name: str, current: int, total: int, is_bytes: bool
    ) -> BackendInstallProgressEvent:
        return progress_event("op", "n", "b", phase, file_name, current, total, is_bytes)

    debouncer = ProgressDebouncer(asyncio.get_running_loop(), publish, make, interval_s=0.2)
    for i in range(1, 51):
        await asyncio.to_thread(debouncer.report, "downloading", "f", i, 50, True)
    await debouncer.flush()
    assert sent[0].current == "1 B"  # the leading edge goes out at once
    assert sent[-1].percentage == 100.0  # the final state is flushed
    assert len(sent) < 10  # 50 reports in well under a second: a handful of events
