"""The libp2p host refuses to start outside a loopback-only network namespace."""

from __future__ import annotations

import asyncio
import socket

import pytest

from p2p import netguard
from p2p.errors import NetworkNotIsolated
from p2p.libp2p_host import Libp2pConfig, Libp2pTransport


def test_refuses_when_other_interfaces_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "lo"), (2, "eth0")])
    assert netguard.non_loopback_interfaces() == ["eth0"]
    with pytest.raises(NetworkNotIsolated, match="eth0"):
        netguard.assert_loopback_only()
    transport = Libp2pTransport(Libp2pConfig(node_seed=b"\x05" * 32))
    with pytest.raises(NetworkNotIsolated):
        asyncio.run(transport.start())
    assert transport.peer_id == ""  # nothing was started


def test_loopback_only_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "lo")])
    netguard.assert_loopback_only()


@pytest.mark.parametrize(
    "addr",
    [
        "/ip4/10.0.0.1/tcp/4001",
        "/ip4/0.0.0.0/tcp/0",
        "/ip6/::1/tcp/1",
        "/dns4/example.org/tcp/1",
        "/ip4/not-an-ip/tcp/1",
        "",
    ],
)
def test_non_loopback_multiaddrs_are_refused(addr: str) -> None:
    with pytest.raises(NetworkNotIsolated):
        netguard.assert_loopback_multiaddr(addr)


def test_loopback_multiaddr_is_allowed() -> None:
    netguard.assert_loopback_multiaddr("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWabc")


def test_non_loopback_bootstrap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "lo")])
    cfg = Libp2pConfig(node_seed=b"\x05" * 32, bootstrap=("/ip4/192.168.1.1/tcp/1/p2p/x",))
    with pytest.raises(NetworkNotIsolated):
        asyncio.run(Libp2pTransport(cfg).start())
