"""The one heartbeat loop (node/heartbeat.py): what a beat sends, skips and does with a refusal."""

from __future__ import annotations

import asyncio
from typing import Any

from corral.node.heartbeat import DEFAULT_INTERVAL_S, Heartbeat


class Frontend:
    def __init__(self, *answers: tuple[int, str]) -> None:
        self.answers = list(answers)
        self.beats: list[tuple[str, dict[str, Any]]] = []

    async def heartbeat(self, node_id: str, body: dict[str, Any]) -> tuple[int, str]:
        self.beats.append((node_id, body))
        return self.answers.pop(0) if self.answers else (200, "")


async def _body() -> dict[str, Any]:
    return {"available_ram": 1}


def test_an_unset_interval_is_ten_seconds() -> None:
    assert Heartbeat(Frontend(), lambda: "n", _body, 0).interval_s == DEFAULT_INTERVAL_S == 10.0
    assert Heartbeat(Frontend(), lambda: "n", _body, 2.5).interval_s == 2.5


async def test_a_node_that_cannot_receive_work_does_not_beat() -> None:
    frontend, up = Frontend(), [False]
    beat = Heartbeat(frontend, lambda: "n1", _body, 1.0, ready=lambda: up[0])
    await beat.beat()
    assert frontend.beats == []
    up[0] = True
    await beat.beat()
    assert frontend.beats == [("n1", {"available_ram": 1})]


async def test_a_deleted_or_rekeyed_node_registers_again_and_beats_as_its_new_id() -> None:
    node_id, frontend = ["old"], Frontend((404, "node not found"), (409, "re-keyed"))

    async def reregister() -> None:
        node_id[0] = f"new{len(frontend.beats)}"

    beat = Heartbeat(frontend, lambda: node_id[0], _body, 1.0, reregister=reregister)
    await beat.beat()
    await beat.beat()
    await beat.beat()
    assert [n for n, _ in frontend.beats] == ["old", "new1", "new2"]


async def test_without_reregister_a_refusal_is_only_logged() -> None:
    frontend = Frontend((404, "node not found"), (500, "boom"))
    beat = Heartbeat(frontend, lambda: "n1", _body, 1.0)
    await beat.beat()
    await beat.beat()
    assert len(frontend.beats) == 2


async def test_the_loop_beats_after_an_interval_until_stopped() -> None:
    frontend, stop = Frontend(), asyncio.Event()
    beat = Heartbeat(frontend, lambda: "n1", _body, 0.01)
    task = asyncio.create_task(beat.run(stop))
    while len(frontend.beats) < 2:
        await asyncio.sleep(0.005)
    stop.set()
    await asyncio.wait_for(task, 5)
