"""Hole punching (p2p/holepunch.py) on a fake host, in trio's virtual time: who drives a punch,
what an outcome says, and how a dial's error is shortened. The lab test
(tests/integration/test_multihost_holepunch.py) runs the real thing through NAT routers."""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import socket
from typing import Any

import trio
import trio.testing
from libp2p.connection_types import ConnectionType
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from multiaddr import Multiaddr

import p2p.holepunch as hp
from p2p.holepunch import HolePuncher, QuietPunchDials, connection_kinds, dial_error


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


class _LoopbackHost(_Host):
    """A node on loopback alone (a lab): a hole punch may dial loopback addresses."""

    def get_addrs(self) -> list[Multiaddr]:
        return [Multiaddr("/ip4/127.0.0.1/tcp/4001")]


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
    # Both addresses are dialed at once: the errors come in the order the dials ended.
    assert o["reason"].startswith("every dial failed: ")
    assert sorted(o["reason"].removeprefix("every dial failed: ").split("; ")) == [
        "/ip4/10.77.0.242/tcp/4002: Connection refused",
        "/ip4/10.77.2.11/tcp/4002: Connection refused",
    ]
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


class _TcpNetwork(_Network):
    """Dials with py-libp2p's real TCP transport (loopback only), as the swarm would."""

    async def _dial(self, addr: Multiaddr, peer: ID, source: tuple[str, int] | None) -> None:
        from libp2p.transport.tcp.tcp import TCP

        self.dials.append((str(addr), source))
        tcp = TCP()
        await tcp.dial(addr) if source is None else await tcp.dial_with_source(addr, source)

    dial_addr = _dial
    dial_addr_as_responder = _dial


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_expected_punch_dial_failures_are_quiet_genuine_errors_are_not() -> None:
    tcp_log = logging.getLogger("libp2p.transport.tcp.tcp")
    dcutr_log = logging.getLogger("libp2p.relay.circuit_v2.dcutr")
    seen = _Records()
    for lg in (tcp_log, dcutr_log):
        lg.addHandler(seen)
    peer = _pid(6)
    net = _TcpNetwork({peer: [_Conn(RELAYED, _Dir.INBOUND)]})
    outcomes: list[dict[str, Any]] = []
    punch = HolePuncher(_LoopbackHost(net), outcomes.append)  # installs the filter
    HolePuncher(_Host(net), outcomes.append)
    assert sum(isinstance(f, QuietPunchDials) for f in tcp_log.filters) == 1
    port = _closed_port()
    closed = Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")
    try:

        async def main() -> None:
            # A punch dial from the listen port and the plain dial of step 0: refused, as a
            # dial to a NAT that has no mapping yet would be.
            await punch._dial_peer(peer, closed, ("127.0.0.1", 0), as_responder=True)
            await punch._dial_peer(peer, closed)
            # The same dial outside a hole punch: a genuine failure, still logged.
            with contextlib.suppress(Exception):
                await net._dial(closed, peer, None)

        trio.run(main)
        messages = [r.getMessage() for r in seen.records if r.levelno >= logging.WARNING]
        assert len(messages) == 1, messages
        assert messages[0].startswith("Failed to open TCP stream: all attempts to connect")
        # The punch still knows why each dial failed: it goes into the outcome.
        assert punch._dial_errors[peer] == [
            f"/ip4/127.0.0.1/tcp/{port}: Connection refused",
            f"/ip4/127.0.0.1/tcp/{port}: Connection refused",
        ]

        # Inside a punch dial, an error a punch does not expect (no file descriptors left) is
        # kept; so is the DCUtR responder's line about anything but the failed punch.
        from libp2p.transport.exceptions import OpenConnectionError

        async def unexpected() -> None:
            token = hp._in_punch_dial.set(True)
            try:
                try:
                    raise OSError(errno.EMFILE, "Too many open files")
                except OSError as e:
                    err = OpenConnectionError("Failed to create TCP socket: [Errno 24]")
                    err.__cause__ = e
                tcp_log.error("Unexpected error opening TCP stream: %s", err)
                dcutr_log.warning("Failed to establish direct connection with %s", peer)
                dcutr_log.warning("Timeout in DCUtR protocol with peer %s", peer)
            finally:
                hp._in_punch_dial.reset(token)

        seen.records.clear()
        trio.run(unexpected)
        assert [r.getMessage() for r in seen.records] == [
            "Unexpected error opening TCP stream: Failed to create TCP socket: [Errno 24]",
            f"Timeout in DCUtR protocol with peer {peer}",
        ]
    finally:
        for lg in (tcp_log, dcutr_log):
            lg.removeHandler(seen)
            for f in [f for f in lg.filters if isinstance(f, QuietPunchDials)]:
                lg.removeFilter(f)


def test_time_to_the_outcome_counts_from_the_relayed_connection_of_the_attempt() -> None:
    # The drive loop forgets when a peer was first seen relayed-only as soon as the direct
    # connection appears, which can be before the punch that made it reports.
    peer = _pid(7)
    net = _Network({peer: [_Conn(RELAYED, _Dir.INBOUND)]})
    outcomes: list[dict[str, Any]] = []
    punch = HolePuncher(_Host(net), outcomes.append)

    async def initiate(p: ID) -> bool:
        await trio.sleep(0.9)
        net.connections[p].append(_Conn(DIRECT, _Dir.OUTBOUND))
        await trio.sleep(1.2)  # the loop sees the direct connection meanwhile
        assert p not in punch._relayed_since
        punch._report(p, True, "initiator", "simultaneous dial connected", [])
        return True

    punch.initiate_hole_punch = initiate  # type: ignore[method-assign]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            punch._nursery = nursery
            nursery.start_soon(punch._auto_drive_loop)
            await trio.sleep(5)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    (o,) = outcomes
    assert o["result"] == "direct" and o["since_relayed_s"] == 2.1
    assert not punch._attempt_since


def test_a_relayed_connection_gone_during_the_attempt_is_named_as_such() -> None:
    # A subscriber that stops leaves its relayed connection behind for a moment: the attempt
    # that starts on it finds no connection to open the DCUtR stream on.
    left, silent = _pid(8), _pid(9)
    net = _Network({left: [_Conn(RELAYED, _Dir.INBOUND)], silent: [_Conn(RELAYED, _Dir.INBOUND)]})
    outcomes: list[dict[str, Any]] = []
    punch = HolePuncher(_Host(net), outcomes.append)

    async def initiate(p: ID) -> bool:
        await trio.sleep(0.7)
        if p == left:
            del net.connections[p]
        return False

    punch.initiate_hole_punch = initiate  # type: ignore[method-assign]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            punch._nursery = nursery
            nursery.start_soon(punch._auto_drive_loop)
            await trio.sleep(1.9)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    reasons = {o["peer"]: o["reason"] for o in outcomes}
    assert reasons == {
        left.to_string(): "the relayed connection closed before the DCUtR exchange",
        silent.to_string(): "the DCUtR exchange over the relayed connection did not complete "
        "(no /libp2p/dcutr on the peer, the stream failed or timed out)",
    }
    assert {o["peer"]: o["peer_connected"] for o in outcomes} == {
        left.to_string(): False,
        silent.to_string(): True,
    }
    assert all(o["since_relayed_s"] == 0.7 for o in outcomes)


class _ServingHost(_Host):
    """A host whose protocols and streams are recorded; no stream can be opened (as over a
    relayed connection to a peer that has no ``/libp2p/dcutr``)."""

    def __init__(self, network: _Network) -> None:
        super().__init__(network)
        self.handlers: list[str] = []  # every protocol ever served
        self.streams: list[tuple[ID, list[str]]] = []

    def set_stream_handler(self, protocol: Any, handler: Any) -> None:
        self.handlers.append(str(protocol))

    def remove_stream_handler(self, protocol: Any) -> None:
        pass

    async def new_stream(self, peer: ID, protocols: list[Any]) -> Any:
        self.streams.append((peer, [str(p) for p in protocols]))
        raise RuntimeError(f"failed to open a stream to peer {peer}")


class _Loop:
    """The asyncio loop the host posts to, run at once."""

    def call_soon_threadsafe(self, fn: Any, *args: Any) -> None:
        fn(*args)


def _run_host_punching(enabled: bool) -> tuple[Any, _ServingHost, ID]:
    from p2p.libp2p_host import Libp2pConfig, Libp2pTransport

    peer = _pid(10)
    host = _ServingHost(_Network({peer: [_Conn(RELAYED, _Dir.INBOUND)]}))
    t = Libp2pTransport(Libp2pConfig(node_seed=b"\x01" * 32, nat=True, hole_punching=enabled))
    t._host, t._loop = host, _Loop()  # type: ignore[assignment]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            t._start_hole_punching(nursery)
            await trio.sleep(30)
            t._set_conn_kinds(connection_kinds(host))  # as the peer watch does
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return t, host, peer


def test_with_hole_punching_off_no_punch_is_tried_and_the_pair_stays_relayed() -> None:
    t, host, peer = _run_host_punching(False)
    # Nothing answers /libp2p/dcutr (a peer's attempt fails), nothing is dialed or opened.
    assert host.handlers == [] and host.streams == [] and host.network.dials == []
    assert t.hole_punching() == {
        "enabled": False,
        "connections": {peer.to_string(): "relayed"},
        "outcomes": [],
    }

    # The same host with it on: the service answers /libp2p/dcutr and the side that received
    # the relayed connection tries (the stream cannot be opened here, so it says it failed).
    t, host, peer = _run_host_punching(True)
    assert host.handlers == ["/libp2p/dcutr"]
    assert host.streams and host.streams[0] == (peer, ["/libp2p/dcutr"])
    punched = t.hole_punching()
    assert punched["enabled"] is True
    assert punched["outcomes"][0]["peer"] == peer.to_string()
    assert punched["outcomes"][0]["role"] == "initiator"
    assert punched["outcomes"][0]["result"] == "failed"
