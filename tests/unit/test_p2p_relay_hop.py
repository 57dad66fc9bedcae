"""The relay service's circuits end by their own streams (p2p/relay_hop.py): py-libp2p 0.8.1's
HOP side closes the streams stored under a peer id, which belong to that peer's newest circuit;
here two circuits to one destination are relayed, the older one ends, the newer one keeps
carrying data. Fake streams, trio's virtual clock."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol

from p2p.relay_hop import OwnCircuitsProtocol


def _pid(n: int) -> ID:
    return ID.from_pubkey(create_new_key_pair(bytes([n]) * 32).public_key)


class _Stream:
    """One side of a relayed circuit as the relay sees it: what the peer sends arrives through
    ``send``; what the relay writes is kept."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tx, self._rx = trio.open_memory_channel[bytes](16)
        self.written: list[bytes] = []
        self.closed = False

    async def send(self, data: bytes) -> None:
        await self._tx.send(data)

    async def read(self, n: int = -1) -> bytes:
        if self.closed:
            return b""
        try:
            return await self._rx.receive()
        except trio.EndOfChannel:
            return b""

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise RuntimeError(f"{self.name}: Cannot write to stream; closed for writing")
        self.written.append(data)

    def peer_left(self) -> None:
        self._tx.close()

    async def close(self) -> None:
        self.closed = True
        self._tx.close()

    async def reset(self) -> None:
        await self.close()


class _Host:
    def get_id(self) -> ID:
        return _pid(1)

    def get_peerstore(self) -> None:
        return None


async def _two_circuits_to_one_owner(proto: Any) -> dict[str, _Stream]:
    """The old subscriber's circuit to the owner, then the new subscriber's; the old subscriber
    leaves. The streams, once every pump that is going to end has ended."""
    owner, old_sub, new_sub = _pid(2), _pid(3), _pid(4)
    s = {n: _Stream(n) for n in ("old_src", "old_dst", "new_src", "new_dst")}
    async with trio.open_nursery() as nursery:
        for src, dst, source in (("old_src", "old_dst", old_sub), ("new_src", "new_dst", new_sub)):
            # What the library's CONNECT handler records for a circuit, in its order.
            proto._active_relays[source] = (s[src], None)
            proto._active_relays[owner] = (s[src], s[dst])
            nursery.start_soon(proto._relay_data, s[src], s[dst], source)
            nursery.start_soon(proto._relay_data, s[dst], s[src], owner)
            await trio.sleep(1)
        s["old_src"].peer_left()
        await trio.sleep(5)
        # Whatever is still open carries data both ways.
        if not s["new_src"].closed:
            await s["new_src"].send(b"pull request")
            await s["new_dst"].send(b"pull answer")
            await trio.sleep(1)
        nursery.cancel_scope.cancel()
    return s


def test_an_ended_circuit_closes_its_own_streams_and_no_other() -> None:
    proto = OwnCircuitsProtocol(_Host(), allow_hop=True)
    s = trio.run(
        _two_circuits_to_one_owner, proto, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    # The old circuit is gone on both sides: the owner's relayed connection to the departed
    # subscriber closes now, not when the owner next writes into it.
    assert s["old_src"].closed and s["old_dst"].closed
    assert s["new_dst"].written == [b"pull request"]
    assert s["new_src"].written == [b"pull answer"]
    assert not proto._active_relays


def test_the_library_alone_closes_the_newer_circuit() -> None:
    # Why OwnCircuitsProtocol exists; if this fails, py-libp2p changed and p2p/relay_hop.py
    # can be reconsidered.
    proto = CircuitV2Protocol(_Host(), allow_hop=True)  # type: ignore[arg-type]
    s = trio.run(
        _two_circuits_to_one_owner, proto, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert s["new_src"].closed and s["new_dst"].closed
    assert not s["old_dst"].closed
