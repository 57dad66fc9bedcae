"""Hole punching under abuse (p2p/holepunch.py): a relayed peer's CONNECT names the addresses
this node dials, so the answer is bounded -- at most MAX_PUNCH_ADDRS distinct addresses per
attempt, one answer per peer at a time, MAX_HOLE_PUNCH_ATTEMPTS answers per relayed connection.
Fake host, trio's virtual clock; docs/nat.md "Hole punching under abuse"."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from libp2p.connection_types import ConnectionType
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import MAX_HOLE_PUNCH_ATTEMPTS
from multiaddr import Multiaddr

from p2p.holepunch import (
    MAX_PUNCH_ADDRS,
    HolePuncher,
    own_network,
    peer_private,
    punch_addr_refusal,
)


def _pid(n: int) -> ID:
    return ID.from_pubkey(create_new_key_pair(bytes([n]) * 32).public_key)


class _Conn:
    direction = 0  # inbound

    def get_connection_type(self) -> ConnectionType:
        return ConnectionType.RELAYED

    def get_transport_addresses(self) -> list[Multiaddr]:
        return []


class _Network:
    def __init__(self, conns: dict[ID, list[_Conn]]) -> None:
        self.connections = conns
        self.dials: list[str] = []

    def get_connections_map(self) -> dict[ID, list[_Conn]]:
        return self.connections

    async def _dial(self, addr: Multiaddr, peer: ID, source: Any) -> None:
        self.dials.append(str(addr))
        await trio.sleep(1)
        raise RuntimeError("Connection refused")

    dial_addr = _dial
    dial_addr_as_responder = _dial


class _Store:
    def addrs(self, peer: ID) -> list[Multiaddr]:
        return []

    def add_addrs(self, peer: ID, addrs: list[Multiaddr], ttl: int) -> None:
        pass

    def peer_info(self, peer: ID) -> Any:
        raise KeyError(peer)


class _Host:
    def __init__(self, network: _Network) -> None:
        self.network = network

    def get_network(self) -> _Network:
        return self.network

    def get_peerstore(self) -> _Store:
        return _Store()

    def get_id(self) -> ID:
        return _pid(99)

    def get_addrs(self) -> list[Multiaddr]:
        return [Multiaddr("/ip4/10.77.1.11/tcp/4001")]


def _punch() -> tuple[HolePuncher, _Network, ID]:
    peer = _pid(7)
    net = _Network({peer: [_Conn()]})
    punch = HolePuncher(_Host(net), lambda _: None)
    punch._relayed_since[peer] = 0.0
    return punch, net, peer


def _run(fn: Any) -> Any:
    return trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def test_an_answer_dials_at_most_max_punch_addrs() -> None:
    punch, net, peer = _punch()
    # What fits in a 4 KiB CONNECT: about 400 addresses, here of a private network.
    addrs = [Multiaddr(f"/ip4/10.0.{i // 250}.{i % 250 + 1}/tcp/22") for i in range(400)]

    async def main() -> bool:
        return await punch._perform_hole_punch(peer, addrs)  # answering the peer's CONNECT

    assert _run(main) is False
    # Three rounds over the same few addresses (before: 400 addresses, 1,200 dials).
    assert len(set(net.dials)) == MAX_PUNCH_ADDRS
    assert len(net.dials) == 3 * MAX_PUNCH_ADDRS


def test_one_answer_per_peer_at_a_time_and_a_few_per_relayed_connection() -> None:
    punch, net, peer = _punch()
    addrs = [Multiaddr("/ip4/10.77.0.242/tcp/4002")]
    results: list[bool] = []

    async def answer() -> None:
        results.append(await punch._perform_hole_punch(peer, addrs))

    async def main() -> None:
        async with trio.open_nursery() as n:
            for _ in range(5):  # five CONNECTs at once
                n.start_soon(answer)
        for _ in range(5):  # then five more, one after the other
            await answer()

    _run(main)
    assert results == [False] * 10
    # One of the concurrent five was answered, then two more (before: all ten, 30 dials).
    assert len(net.dials) == 3 * MAX_HOLE_PUNCH_ATTEMPTS


def test_answers_are_counted_again_on_a_new_relayed_connection() -> None:
    punch, net, peer = _punch()
    addrs = [Multiaddr("/ip4/10.77.0.242/tcp/4002")]

    async def main() -> None:
        for _ in range(MAX_HOLE_PUNCH_ATTEMPTS + 1):
            await punch._perform_hole_punch(peer, addrs)
        # The relayed connection closes; the drive loop forgets the peer.
        net.connections.clear()
        async with trio.open_nursery() as n:
            punch._nursery = n
            n.start_soon(punch._auto_drive_loop)
            await trio.sleep(1.5)
            n.cancel_scope.cancel()
        assert peer not in punch._answered
        await punch._perform_hole_punch(peer, addrs)

    _run(main)
    assert len(net.dials) == 3 * (MAX_HOLE_PUNCH_ATTEMPTS + 1)


class _Stream:
    """A DCUtR stream from ``peer``: CONNECT (with ``addrs``), then SYNC."""

    def __init__(self, peer: ID, addrs: list[Multiaddr]) -> None:
        from libp2p.relay.circuit_v2.pb.dcutr_pb2 import HolePunch
        from libp2p.utils.varint import encode_varint_prefixed

        class _Muxed:
            peer_id = peer

        self.muxed_conn = _Muxed()
        connect = HolePunch(type=HolePunch.CONNECT, ObsAddrs=[a.to_bytes() for a in addrs])
        sync = HolePunch(type=HolePunch.SYNC)
        self._buf = bytearray(
            encode_varint_prefixed(connect.SerializeToString())
            + encode_varint_prefixed(sync.SerializeToString())
        )
        self.read_from = False
        self.closed = False

    async def read(self, n: int = -1) -> bytes:
        self.read_from = True
        n = len(self._buf) if n < 0 else n
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def write(self, data: bytes) -> None:
        pass

    async def close(self) -> None:
        self.closed = True


def test_connect_streams_beyond_the_bounds_are_closed_unread() -> None:
    punch, net, peer = _punch()
    punch._get_observed_addrs = _no_addrs  # type: ignore[method-assign]
    added: list[int] = []

    class _Counting(_Store):
        def add_addrs(self, peer: ID, addrs: list[Multiaddr], ttl: int) -> None:
            added.append(len(addrs))

    store = _Counting()
    host: Any = punch.host
    host.get_peerstore = lambda: store
    addrs = [Multiaddr(f"/ip4/10.1.{i // 250}.{i % 250 + 1}/tcp/22") for i in range(300)]
    streams = [_Stream(peer, addrs) for _ in range(12)]

    async def main() -> None:
        async with trio.open_nursery() as n:
            for s in streams[:6]:  # six CONNECTs at once, then six one after the other
                n.start_soon(punch._handle_dcutr_stream, s)
        for s in streams[6:]:
            await punch._handle_dcutr_stream(s)

    _run(main)
    # One read at once; the addresses it stored are capped (before: 300 stored per CONNECT).
    assert sum(s.read_from for s in streams) == MAX_HOLE_PUNCH_ATTEMPTS
    assert all(s.closed for s in streams)
    assert added and max(added) <= 20
    assert len(set(net.dials)) == MAX_PUNCH_ADDRS


async def _no_addrs() -> list[bytes]:
    return []


@pytest.mark.parametrize(
    ("addr", "peer_private", "own", "allowed"),
    [
        ("/ip4/203.0.113.9/tcp/4001", False, "public", False),  # documentation: not global
        ("/ip4/8.8.4.4/tcp/4001", False, "public", True),
        ("/ip4/8.8.4.4/tcp/4001", True, "private", True),
        ("/ip6/2001:4860::8844/tcp/4001", False, "public", True),
        ("/ip4/127.0.0.1/tcp/22", False, "public", False),
        ("/ip4/127.0.0.1/tcp/22", True, "private", False),
        ("/ip4/127.0.0.1/tcp/4001", True, "loopback", True),  # a loopback lab
        ("/ip6/::1/tcp/22", True, "private", False),
        ("/ip4/169.254.169.254/tcp/80", True, "private", False),  # link-local (cloud metadata)
        ("/ip6/fe80::1/tcp/22", True, "private", False),
        ("/ip4/224.0.0.1/tcp/22", True, "private", False),
        ("/ip4/0.0.0.0/tcp/22", True, "private", False),
        ("/ip4/240.0.0.1/tcp/22", True, "private", False),
        ("/ip4/10.0.0.5/tcp/22", False, "public", False),  # a public node's internal network
        ("/ip4/192.168.1.1/tcp/80", True, "public", False),
        ("/ip4/172.16.0.9/tcp/80", False, "private", False),  # the peer also names public ones
        ("/ip4/10.77.0.242/tcp/4001", True, "private", True),  # the NAT lab's "internet"
        ("/ip4/100.64.0.7/tcp/4001", True, "private", True),
        ("/ip6/fd00::7/tcp/4001", True, "private", True),
        ("/dns4/example.org/tcp/4001", False, "public", False),
    ],
)
def test_which_addresses_a_punch_may_dial(
    addr: str, peer_private: bool, own: str, allowed: bool
) -> None:
    why = punch_addr_refusal(Multiaddr(addr), peer_private=peer_private, own=own)
    assert (why is None) == allowed, why


def test_own_network_and_peer_private() -> None:
    class H:
        def __init__(self, *addrs: str) -> None:
            self.addrs = [Multiaddr(a) for a in addrs]

        def get_addrs(self) -> list[Multiaddr]:
            return self.addrs

    assert own_network(H("/ip4/0.0.0.0/tcp/1", "/ip4/8.8.8.8/tcp/1")) == "public"
    assert own_network(H("/ip4/127.0.0.1/tcp/1", "/ip4/10.1.2.3/tcp/1")) == "private"
    assert own_network(H("/ip4/127.0.0.1/tcp/1", "/ip6/::1/tcp/1")) == "loopback"
    assert own_network(H()) == "public"
    assert peer_private([Multiaddr("/ip4/10.0.0.1/tcp/1"), Multiaddr("/ip4/192.168.0.1/tcp/1")])
    assert not peer_private([Multiaddr("/ip4/10.0.0.1/tcp/1"), Multiaddr("/ip4/1.1.1.1/tcp/1")])
    assert not peer_private([])


class _PublicHost(_Host):
    def get_addrs(self) -> list[Multiaddr]:
        return [Multiaddr("/ip4/0.0.0.0/tcp/4001"), Multiaddr("/ip4/8.8.8.8/tcp/4001")]


def test_a_public_node_dials_none_of_the_private_addresses_a_peer_names() -> None:
    """A stranger's CONNECT naming this node's loopback, link-local and private addresses (and
    one public one): only the public one is dialled, the others are named in the outcome as not
    dialled (before: every one of them dialled, three rounds)."""
    peer = _pid(8)
    net = _Network({peer: [_Conn()]})
    outcomes: list[dict[str, Any]] = []
    punch = HolePuncher(_PublicHost(net), outcomes.append)
    punch._relayed_since[peer] = 0.0
    named = [
        "/ip4/127.0.0.1/tcp/22",
        "/ip4/169.254.169.254/tcp/80",
        "/ip4/10.0.0.5/tcp/5432",
        "/ip4/192.168.1.1/tcp/80",
        "/ip4/1.1.1.1/tcp/4001",
    ]

    async def main() -> bool:
        return await punch._perform_hole_punch(peer, [Multiaddr(a) for a in named])

    assert _run(main) is False
    assert set(net.dials) == {"/ip4/1.1.1.1/tcp/4001"}
    (outcome,) = outcomes
    assert "/ip4/127.0.0.1/tcp/22: not dialled (a loopback" in outcome["reason"]
    assert (
        "/ip4/10.0.0.5/tcp/5432: not dialled (a private address, and this node is on no "
        "private network)" in outcome["reason"]
    )
