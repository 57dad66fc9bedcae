"""Gossipsub settings that only show after a while: real py-libp2p hosts on loopback.

py-libp2p's adaptive gossip (on by default) re-scores the mesh about 30 s after start and, with
few mesh peers, stretches the heartbeat to 30-60 s; the message cache (3 heartbeats) then hands
minutes-old messages to every peer that subscribes. The node turns it off
(``docs/libp2p.md``, "Gossipsub settings"): a peer that subscribes later gets new messages only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from netns import require_loopback_only

from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
from p2p.transport import GossipMessage

pytestmark = pytest.mark.integration

TOPIC = "/odf/test/settings"
ADAPT_AFTER_S = 33.0
"""py-libp2p recomputes mesh health (and adapts) at most every 30 s, on a heartbeat."""


async def _collect(messages: AsyncIterator[GossipMessage], into: list[bytes]) -> None:
    async for m in messages:
        into.append(m.data)


async def _wait(cond: Callable[[], Awaitable[bool]], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await cond():
        if loop.time() > deadline:
            raise TimeoutError
        await asyncio.sleep(0.05)


async def _now(value: bool) -> bool:
    return value


async def _joined(a: Libp2pTransport, peer: str) -> bool:
    return peer in (await a.topic_peers()).get(TOPIC, set())


def test_a_late_subscriber_is_not_handed_old_messages() -> None:
    require_loopback_only()

    async def scenario() -> None:
        a = Libp2pTransport(Libp2pConfig(node_seed=b"\x41" * 32))
        b = Libp2pTransport(Libp2pConfig(node_seed=b"\x42" * 32))
        c = Libp2pTransport(Libp2pConfig(node_seed=b"\x43" * 32))
        got_b: list[bytes] = []
        got_c: list[bytes] = []
        tasks: list[asyncio.Task[None]] = []
        try:
            await a.start()
            await b.start()
            await b.connect(a.listen_addrs()[0])
            tasks.append(asyncio.ensure_future(_collect(a.subscribe(TOPIC), [])))
            tasks.append(asyncio.ensure_future(_collect(b.subscribe(TOPIC), got_b)))
            await a.wait_joined(TOPIC)
            await b.wait_joined(TOPIC)
            # Past the point where adaptive gossip would have stretched the heartbeat.
            await asyncio.sleep(ADAPT_AFTER_S)
            await a.publish(TOPIC, b"old")
            await _wait(lambda: _now(b"old" in got_b), 30)
            # Well beyond 3 heartbeats of 1 s: "old" has left the message cache's window.
            await asyncio.sleep(6)
            await c.start()
            await c.connect(a.listen_addrs()[0])
            tasks.append(asyncio.ensure_future(_collect(c.subscribe(TOPIC), got_c)))
            await c.wait_joined(TOPIC)
            await _wait(lambda: _joined(a, c.peer_id), 30)
            await a.publish(TOPIC, b"new")
            await _wait(lambda: _now(b"new" in got_c), 30)
            await asyncio.sleep(2)  # a replay would have come at the subscription, before "new"
            assert got_c == [b"new"], got_c
        finally:
            for t in tasks:
                t.cancel()
            for t in (c, b, a):
                await t.stop()

    asyncio.run(scenario())
