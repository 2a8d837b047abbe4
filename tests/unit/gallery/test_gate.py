"""The per-backend gate: starts share it; an install/upgrade/delete waits for them and blocks new ones."""

from __future__ import annotations

import asyncio

from corral.gallery.gate import BackendGate


async def test_shared_holders_overlap_and_an_exclusive_one_waits_for_them() -> None:
    gate, order = BackendGate(), []
    release = asyncio.Event()

    async def start(name: str) -> None:
        async with gate.shared():
            order.append(f"{name} in")
            await release.wait()
            order.append(f"{name} out")

    async def upgrade() -> None:
        async with gate.exclusive():
            order.append("upgrade")

    a, b = asyncio.create_task(start("a")), asyncio.create_task(start("b"))
    await asyncio.sleep(0.01)
    up = asyncio.create_task(upgrade())
    await asyncio.sleep(0.01)
    late = asyncio.create_task(start("late"))  # arrives while the upgrade waits: goes after it
    await asyncio.sleep(0.01)
    assert order == ["a in", "b in"]
    release.set()
    await asyncio.gather(a, b, up, late)
    assert order.index("upgrade") > order.index("b out") and order.index("late in") > order.index("upgrade")
