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
