"""Backend channels: one channel and one stub per address, both dropped together."""

from __future__ import annotations

from corral.routing.backend_client import BackendChannels


async def test_a_stub_is_made_once_per_address_and_remade_after_discard() -> None:
    channels = BackendChannels("token")
    first = channels.stub("127.0.0.1:1")

    assert channels.stub("127.0.0.1:1") is first
    assert channels.stub("127.0.0.1:2") is not first
    await channels.discard("127.0.0.1:1")
    assert channels.stub("127.0.0.1:1") is not first
    await channels.close()
