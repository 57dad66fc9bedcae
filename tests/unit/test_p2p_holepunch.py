"""Hole punching (p2p/holepunch.py) on a fake host, in trio's virtual time: who drives a punch,
what an outcome says, and how a dial's error is shortened. The lab test
(tests/integration/test_multihost_holepunch.py) runs the real thing through NAT routers."""

from __future__ import annotations

import enum
from typing import Any

import trio
import trio.testing
from libp2p.connection_types import ConnectionType
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from p2p.holepunch import HolePuncher, connection_kinds, dial_error


class _Dir(enum.Enum):
    INBOUND = 0
    OUTBOUND = 1


def _pid(n: int) -> ID:
    return ID.from_pubkey(create_new_key_pair(bytes([n]) * 32).public_key)


class _Conn:
    def __init__(self, kind: ConnectionType, direction: _Dir) -> None:
        self.kind, self.direction = kind, direction

    def get_connection_type(self) -> ConnectionType:
        return self.kind

    def get_transport_addresses(self) -> list[Multiaddr]:
        return []


class _Network:
    def __init__(self, conns: dict[ID, list[_Conn]], refuse: bool = True) -> None:
        self.connections = conns
        self.refuse = refuse
        self.dials: list[tuple[str, tuple[str, int] | None]] = []

    def get_connections_map(self) -> dict[ID, list[_Conn]]:
        return self.connections

    async def _dial(self, addr: Multiaddr, peer: ID, source: tuple[str, int] | None) -> None:
        self.dials.append((str(addr), source))
        await trio.sleep(0.01)
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as e:
            raise RuntimeError(f"fail to open connection to peer {peer}") from e

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
        self.network, self.me = network, _pid(99)

    def get_network(self) -> _Network:
        return self.network

    def get_peerstore(self) -> _Store:
        return _Store()

    def get_id(self) -> ID:
        return self.me

    def get_addrs(self) -> list[Multiaddr]:
        return [Multiaddr("/ip4/10.77.1.11/tcp/4001")]


RELAYED, DIRECT = ConnectionType.RELAYED, ConnectionType.DIRECT


def test_only_the_side_that_received_a_relayed_connection_drives_the_punch() -> None:
    received, dialed, upgraded = _pid(1), _pid(2), _pid(3)
    net = _Network(
        {
            received: [_Conn(RELAYED, _Dir.INBOUND)],
            dialed: [_Conn(RELAYED, _Dir.OUTBOUND)],
            upgraded: [_Conn(RELAYED, _Dir.INBOUND), _Conn(DIRECT, _Dir.OUTBOUND)],
        }
    )
    outcomes: list[dict[str, Any]] = []
    punch = HolePuncher(_Host(net), outcomes.append)
    driven: list[ID] = []

    async def initiate(peer: ID) -> bool:
        driven.append(peer)
        return True  # as if the unilateral direct dial had connected

    punch.initiate_hole_punch = initiate  # type: ignore[method-assign]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            punch._nursery = nursery
            nursery.start_soon(punch._auto_drive_loop)
            await trio.sleep(1.5)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert driven == [received]
    (o,) = outcomes
    assert o["peer"] == received.to_string() and o["result"] == "direct"
    assert o["role"] == "initiator" and "dialed directly" in o["reason"]
    assert connection_kinds(_Host(net)) == {
        received.to_string(): "relayed",
        dialed.to_string(): "relayed",
        upgraded.to_string(): "direct",
    }


def test_a_failed_punch_names_every_dial_and_why() -> None:
    peer = _pid(4)
    net = _Network({peer: [_Conn(RELAYED, _Dir.INBOUND)]})
    outcomes: list[dict[str, Any]] = []
    punch = HolePuncher(_Host(net), outcomes.append)
    addrs = [Multiaddr("/ip4/10.77.0.242/tcp/4002"), Multiaddr("/ip4/10.77.2.11/tcp/4002")]

    async def main() -> bool:
        return await punch._perform_hole_punch(peer, addrs)  # the responder's side

    ok = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert ok is False
    (o,) = outcomes
    assert o["result"] == "failed" and o["role"] == "responder" and o["attempt"] is None
    assert o["reason"] == (
        "every dial failed: /ip4/10.77.0.242/tcp/4002: Connection refused; "
        "/ip4/10.77.2.11/tcp/4002: Connection refused"
    )
    # Three rounds, each dialing both addresses from the listen port (TCP simultaneous open).
    assert len(net.dials) == 6
    assert {source for _, source in net.dials} == {("10.77.1.11", 4001)}


def test_no_address_to_dial_is_said_so() -> None:
    peer = _pid(5)
    outcomes: list[dict[str, Any]] = []
    punch = HolePuncher(_Host(_Network({peer: [_Conn(RELAYED, _Dir.INBOUND)]})), outcomes.append)

    async def main() -> bool:
        return await punch._perform_hole_punch(peer, [], as_responder=True)

    assert trio.run(main) is False
    assert outcomes[0]["reason"] == "no direct address to dial"
    assert outcomes[0]["role"] == "initiator"


def test_dial_errors_are_shortened_to_their_cause() -> None:
    try:
        try:
            raise OSError(101, "Network is unreachable")
        except OSError as e:
            raise RuntimeError("An unexpected error occurred when dialing /ip4/…") from e
    except RuntimeError as wrapped:
        assert dial_error(wrapped) == "Network is unreachable"
    msg = "Failed to connect 10.77.0.242:1 from 10.77.1.11:2: [Errno 111] Error: Connection refused"
    assert dial_error(RuntimeError(msg)) == "Connection refused"
    assert dial_error(RuntimeError("peer id mismatch\nmore")) == "peer id mismatch"
