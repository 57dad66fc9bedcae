"""The relay service's bounds beyond py-libp2p 0.8.1's (p2p/relay_hop.py; docs/nat.md "The relay
under abuse"): circuits in total and per peer, a circuit's duration when nobody writes into it,
bytes per peer across circuits and in total, and reservations of peers that left. The library's
CONNECT handler runs on fake streams and a fake host, in trio's virtual clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio
import trio.testing
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, StopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.resources import RelayLimits, RelayResourceManager
from libp2p.utils.varint import encode_varint_prefixed

from p2p.relay_hop import CircuitAccounts, CircuitLimits, ConnectedReservations, OwnCircuitsProtocol


def _pid(n: int) -> ID:
    return ID.from_pubkey(create_new_key_pair(bytes([n]) * 32).public_key)


class _Stream:
    """One side of a circuit as the relay sees it: a byte pipe the peer feeds."""

    def __init__(self, peer: ID) -> None:
        self.muxed_conn = SimpleNamespace(peer_id=peer)
        self._buf = bytearray()
        self._ev = trio.Event()
        self.written = bytearray()
        self.closed = False

    def feed(self, data: bytes) -> None:
        self._buf += data
        self._ev.set()

    async def read(self, n: int = -1) -> bytes:
        while not self._buf and not self.closed:
            self._ev = trio.Event()
            await self._ev.wait()
        if not self._buf:
            return b""
        n = len(self._buf) if n < 0 else n
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise RuntimeError("closed")
        self.written += data

    async def close(self) -> None:
        self.closed = True
        self._ev.set()

    async def reset(self) -> None:
        await self.close()

    def is_open(self) -> bool:
        return not self.closed


class _Host:
    """The relay's host: its destinations are connected and answer STOP with OK."""

    def __init__(self) -> None:
        self.connections: dict[ID, list[object]] = {}
        self.dst_streams: list[_Stream] = []

    def get_id(self) -> ID:
        return _pid(1)

    def get_peerstore(self) -> None:
        return None

    def get_network(self) -> Any:
        return SimpleNamespace(connections=self.connections)

    async def new_stream(self, peer: ID, protocols: list[Any]) -> _Stream:
        s = _Stream(peer)
        ok = StopMessage(type=StopMessage.STATUS, status=StatusCode.OK)  # type: ignore[arg-type]
        s.feed(encode_varint_prefixed(ok.SerializeToString()))
        self.dst_streams.append(s)
        return s


def _relay(**limits: Any) -> tuple[OwnCircuitsProtocol, _Host, list[ID]]:
    """A relay with reservations for destinations 10..13, and the per-circuit library limits
    high enough never to be the reason."""
    host = _Host()
    per_peer = limits.get("max_circuits_per_peer", 4)
    lib = RelayLimits(
        duration=10_000, data=1 << 30, max_circuit_conns=per_peer, max_reservations=16
    )
    proto = OwnCircuitsProtocol(host, limits=lib, allow_hop=True, circuits=CircuitLimits(**limits))
    dsts = [_pid(n) for n in range(10, 14)]
    for d in dsts:
        host.connections[d] = [object()]
        proto.resource_manager.reserve(d)
    return proto, host, dsts


def _connect(dst: ID) -> HopMessage:
    return HopMessage(type=HopMessage.CONNECT, peer=CircuitPeerId(id=dst.to_bytes()))


def _statuses(stream: _Stream) -> list[int]:
    """The status codes of the HOP messages the relay wrote to a source before relaying."""
    out: list[int] = []
    data = bytes(stream.written)
    while data:
        n, shift, i = 0, 0, 0
        while True:
            b = data[i]
            n |= (b & 0x7F) << shift
            i += 1
            shift += 7
            if not b & 0x80:
                break
        msg = HopMessage()
        try:
            msg.ParseFromString(data[i : i + n])
        except Exception:
            break  # relayed bytes, not a HOP message
        if msg.type != HopMessage.STATUS:
            break
        out.append(int(msg.status))
        data = data[i + n :]
    return out


def _run(fn: Any) -> Any:
    return trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def test_circuits_beyond_the_total_are_refused() -> None:
    # The library caps circuits per destination only: 3 circuits to two destinations with 2 each.
    async def main() -> list[list[int]]:
        proto, _, (d1, d2, *_) = _relay(max_circuits=3, max_circuits_per_peer=2)
        srcs = [_Stream(_pid(20 + i)) for i in range(4)]
        async with trio.open_nursery() as n:
            for s, d in zip(srcs, (d1, d1, d2, d2), strict=True):
                n.start_soon(proto._handle_connect, s, _connect(d))
                await trio.sleep(1)
            codes = [_statuses(s) for s in srcs]
            assert proto.accounts.open_total == 3
            n.cancel_scope.cancel()
        return codes

    codes = _run(main)
    assert codes[:3] == [[StatusCode.OK]] * 3
    assert codes[3] == [StatusCode.RESOURCE_LIMIT_EXCEEDED]


def test_a_source_opens_at_most_its_circuits_per_peer() -> None:
    # A source without a reservation was not capped by the library at all.
    async def main() -> list[list[int]]:
        proto, _, dsts = _relay(max_circuits=16, max_circuits_per_peer=2)
        src = _pid(30)
        streams = [_Stream(src) for _ in dsts]
        async with trio.open_nursery() as n:
            for s, d in zip(streams, dsts, strict=True):
                n.start_soon(proto._handle_connect, s, _connect(d))
                await trio.sleep(1)
            codes = [_statuses(s) for s in streams]
            n.cancel_scope.cancel()
        # Every circuit ended: nothing stays counted.
        assert proto.accounts.open_total == 0
        return codes

    codes = _run(main)
    assert codes[:2] == [[StatusCode.OK]] * 2
    assert codes[2:] == [[StatusCode.RESOURCE_LIMIT_EXCEEDED]] * 2


def test_an_idle_circuit_closes_at_its_duration() -> None:
    # The library checked the deadline only after a read returned: a silent circuit stayed open.
    async def main() -> tuple[bool, bool, bool]:
        proto, host, (d1, *_) = _relay(circuit_duration_s=60)
        src = _Stream(_pid(40))
        async with trio.open_nursery() as n:
            n.start_soon(proto._handle_connect, src, _connect(d1))
            await trio.sleep(59)
            open_before = not src.closed
            await trio.sleep(2)
            closed = src.closed and host.dst_streams[0].closed
            n.cancel_scope.cancel()
        return open_before, closed, proto.accounts.open_total == 0

    assert _run(main) == (True, True, True)


def test_bytes_per_peer_are_bounded_across_circuits() -> None:
    # The library budgets bytes per circuit: a new circuit started a fresh budget.
    async def main() -> tuple[bytes, bytes, bool]:
        proto, host, (d1, *_) = _relay(peer_bytes=1000)
        got = []
        for _ in range(2):
            src = _Stream(_pid(50))
            async with trio.open_nursery() as n:
                n.start_soon(proto._handle_connect, src, _connect(d1))
                await trio.sleep(1)
                src.feed(b"x" * 600)
                await trio.sleep(1)
                dst = host.dst_streams[-1]
                got.append(bytes(dst.written[-600:]) if len(dst.written) >= 600 else b"")
                closed = src.closed and dst.closed
                await src.close()
                await trio.sleep(1)
                n.cancel_scope.cancel()
        return got[0], got[1], closed

    first, second, closed = _run(main)
    assert first == b"x" * 600
    assert second == b""  # past the peer's 1,000 B: not relayed, the circuit closed
    assert closed


def test_total_bytes_are_bounded_across_peers() -> None:
    async def main() -> tuple[int, int]:
        proto, host, (d1, d2, *_) = _relay(total_bytes=1000)
        a, b = _Stream(_pid(60)), _Stream(_pid(61))
        async with trio.open_nursery() as n:
            n.start_soon(proto._handle_connect, a, _connect(d1))
            n.start_soon(proto._handle_connect, b, _connect(d2))
            await trio.sleep(1)
            a.feed(b"a" * 600)
            await trio.sleep(1)
            b.feed(b"b" * 600)
            await trio.sleep(1)
            written = b"".join(bytes(s.written) for s in host.dst_streams)
            sizes = [written.count(b"a"), written.count(b"b")]
            assert b.closed and not a.closed
            n.cancel_scope.cancel()
        return sizes[0], sizes[1]

    assert _run(main) == (600, 0)


def test_accounts_window_restarts_byte_budgets() -> None:
    now = [0.0]
    acc = CircuitAccounts(
        CircuitLimits(peer_bytes=100, total_bytes=150, window_s=60), lambda: now[0]
    )
    assert acc.charge("a", "b", 100)
    assert not acc.charge("a", "c", 1)
    assert acc.refusal("a", "c") is not None
    assert acc.charge("c", "d", 50)
    assert not acc.charge("e", "f", 1)  # the total
    now[0] = 60.0
    assert acc.refusal("a", "c") is None
    assert acc.open("a", "b") is None
    assert acc.charge("a", "b", 100)
    acc.close("a", "b")
    assert acc.open_total == 0 and not acc._open


def _reservations(cls: type[RelayResourceManager]) -> bool:
    host = _Host()
    mgr = cls(RelayLimits(duration=60, data=1, max_circuit_conns=1, max_reservations=2), host)  # type: ignore[arg-type]
    leavers = [_pid(70), _pid(71)]
    for p in leavers:
        host.connections[p] = [object()]
        assert mgr.can_accept_reservation(p)
        mgr.reserve(p)
    for p in leavers:
        del host.connections[p]  # fresh identities that reserved and left
    return mgr.can_accept_reservation(_pid(72))


def test_reservations_of_peers_that_left_free_their_slots() -> None:
    assert _reservations(ConnectedReservations)


def test_the_library_alone_keeps_departed_peers_slots_until_their_ttl() -> None:
    # Why ConnectedReservations exists; if this fails, py-libp2p changed.
    assert not _reservations(RelayResourceManager)


def _conn_from(ip: str, *, relayed: bool = False) -> Any:
    """A connection as the relay's host lists it: remote address ``ip`` (a relayed one reports
    its relay's address and says it is relayed)."""
    from libp2p.connection_types import ConnectionType

    kind = ConnectionType.RELAYED if relayed else ConnectionType.DIRECT
    return SimpleNamespace(
        muxed_conn=SimpleNamespace(get_remote_address=lambda: (ip, 4001)),
        get_connection_type=lambda: kind,
    )


def test_reservations_per_ip_address_are_capped() -> None:
    """Fresh peer ids behind one IP address take at most ``per_ip`` reservations (before: all
    ``max_reservations``); other addresses, relayed peers and refreshes are not refused, and a
    peer that leaves frees its address's slot."""
    host = _Host()
    lib = RelayLimits(duration=60, data=1, max_circuit_conns=1, max_reservations=16)
    mgr = ConnectedReservations(lib, host, per_ip=2)  # type: ignore[arg-type]
    sybils = [_pid(n) for n in range(80, 86)]
    accepted = []
    for p in sybils:
        host.connections[p] = [_conn_from("203.0.113.7")]
        ok = mgr.can_accept_reservation(p)
        accepted.append(ok)
        if ok:
            mgr.reserve(p)
    assert accepted == [True, True, False, False, False, False]
    assert mgr.can_accept_reservation(sybils[0])  # a refresh of a held reservation
    other = _pid(90)
    host.connections[other] = [_conn_from("198.51.100.1")]
    assert mgr.can_accept_reservation(other)
    via_relay = _pid(91)  # its remote address is the relay's, shared by everyone it carries
    host.connections[via_relay] = [_conn_from("203.0.113.7", relayed=True)]
    assert mgr.can_accept_reservation(via_relay)
    del host.connections[sybils[0]]
    assert mgr.can_accept_reservation(sybils[2])


def test_the_protocol_and_config_carry_the_per_ip_cap() -> None:
    """``[p2p] relay_max_reservations_per_ip`` reaches the relay's reservations; 0 is refused
    naming it."""
    import pytest

    from node.config import ConfigError, load_config

    proto = OwnCircuitsProtocol(
        _Host(),
        limits=RelayLimits(duration=60, data=1, max_circuit_conns=1, max_reservations=4),
        allow_hop=True,
        reservations_per_ip=3,
    )
    assert isinstance(proto.resource_manager, ConnectedReservations)
    assert proto.resource_manager.per_ip == 3
    assert load_config(None, environ={}).p2p.relay_max_reservations_per_ip == 4
    with pytest.raises(ConfigError, match="relay_max_reservations_per_ip"):
        load_config(None, environ={}, overrides={"p2p": {"relay_max_reservations_per_ip": 0}})
