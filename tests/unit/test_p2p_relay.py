"""Relay helpers (p2p/relay.py) and the open-mode-only rule of the host's NAT features."""

from __future__ import annotations

import asyncio

import pytest

from p2p.errors import NetworkNotIsolated
from p2p.libp2p_host import Libp2pConfig, Libp2pTransport, parse_peer_multiaddr
from p2p.relay import circuit_addr, dest_peer, is_relayed

RELAY = "12D3KooWFy8BjPcNCDW5uEPyzrqWqjycHgv1FWC7Kx8jQ1Jbunp5"
ME = "12D3KooW9uTpywgEEJRhv1avvfwfz459Qgtq5m2xgyzcAi99rFA8"


def test_circuit_addresses() -> None:
    relayed = circuit_addr("/ip4/10.77.0.11/tcp/7375", RELAY, ME)
    assert relayed == f"/ip4/10.77.0.11/tcp/7375/p2p/{RELAY}/p2p-circuit/p2p/{ME}"
    assert circuit_addr(f"/ip4/10.77.0.11/tcp/7375/p2p/{RELAY}", RELAY, ME) == relayed
    assert is_relayed(relayed) and not is_relayed(f"/ip4/10.77.0.11/tcp/7375/p2p/{RELAY}")
    assert dest_peer(relayed) == ME and dest_peer(f"/ip4/1.2.3.4/tcp/1/p2p/{RELAY}") == RELAY
    # The host's parser names the destination, not the relay, as the peer of a relayed address.
    assert parse_peer_multiaddr(relayed).peer_id.to_string() == ME


def test_relays_and_autonat_are_refused_in_loopback_only_mode() -> None:
    for flags in ({"nat": True}, {"relay_service": True}):
        t = Libp2pTransport(Libp2pConfig(node_seed=b"\x01" * 32, **flags))  # type: ignore[arg-type]
        with pytest.raises(NetworkNotIsolated, match="open mode"):
            asyncio.run(t.start())


class _Muxed:
    def __init__(self, kind: object) -> None:
        self.kind = kind

    def get_remote_address(self) -> tuple[str, int]:
        return ("10.77.0.11", 7375)

    def get_connection_type(self) -> object:
        if self.kind is None:
            raise AttributeError("a secured layer without get_connection_type")
        return self.kind


class _Conn:
    def __init__(self, tagged: object, below: object, addrs: list[str] | None = None) -> None:
        self.muxed_conn = _Muxed(below)
        self.tagged = tagged
        self.direction = type("D", (), {"name": "INBOUND"})()
        self._actual_transport_addresses = addrs

    def get_connection_type(self) -> object:
        return self.tagged


def test_relayed_connections_have_no_ip_for_the_per_ip_cap() -> None:
    # A relayed connection's remote address is the relay's, shared by every peer reached
    # through it: the connection manager must not count it against that IP.
    from libp2p.connection_types import ConnectionType

    from p2p.libp2p_host import _peer_conn

    direct = _peer_conn("a", _Conn(ConnectionType.DIRECT, ConnectionType.DIRECT))
    assert direct.ip == "10.77.0.11" and direct.inbound
    # Tagged by the swarm (an accepted circuit), by the layers below it, or by its addresses.
    for conn in (
        _Conn(ConnectionType.RELAYED, None),
        _Conn(ConnectionType.UNKNOWN, ConnectionType.RELAYED),
        _Conn(ConnectionType.UNKNOWN, None, [f"/p2p/{RELAY}/p2p-circuit/p2p/{ME}"]),
    ):
        relayed = _peer_conn("b", conn)
        assert relayed.ip is None and relayed.inbound


def test_held_slots_name_relays_and_live_reservation_holders() -> None:
    import time
    from types import SimpleNamespace

    from libp2p.peer.id import ID

    from p2p.relay import RelaySupport

    relay = RelaySupport.__new__(RelaySupport)
    relay.relayed = {RELAY: circuit_addr("/ip4/10.77.0.11/tcp/7375", RELAY, ME)}
    relay.service = False
    assert relay.held_slots() == {RELAY}
    # On a relay service: the peers holding an unexpired reservation on it too.
    other = "12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"
    now = time.time()
    reservations = {
        ID.from_base58(ME): SimpleNamespace(expires_at=now + 60),
        ID.from_base58(other): SimpleNamespace(expires_at=now - 1),
    }
    relay.service = True
    relay.protocol = SimpleNamespace(resource_manager=SimpleNamespace(_reservations=reservations))
    assert relay.held_slots() == {RELAY, ME}
