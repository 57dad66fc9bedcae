"""The one network guard: the libp2p host, the embedded IPFS node and test fixtures refuse to
start outside a loopback-only network namespace."""

from __future__ import annotations

import asyncio
import socket

import pytest

from node.ipfs.embedded import EmbeddedIpfs, node_config
from p2p import netguard
from p2p.errors import NetworkNotIsolated
from p2p.libp2p_host import Libp2pConfig, Libp2pTransport


def _only(names: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Both interface sources report ``names``."""
    monkeypatch.setattr(socket, "if_nameindex", lambda: list(enumerate(names, 1)))
    monkeypatch.setattr(netguard, "_proc_interfaces", lambda _p: set(names))


def test_refuses_when_other_interfaces_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(["lo", "eth0"], monkeypatch)
    assert netguard.non_loopback_interfaces() == ["eth0"]
    with pytest.raises(NetworkNotIsolated, match="eth0"):
        netguard.assert_loopback_only()
    transport = Libp2pTransport(Libp2pConfig(node_seed=b"\x05" * 32))
    with pytest.raises(NetworkNotIsolated):
        asyncio.run(transport.start())
    assert transport.peer_id == ""  # nothing was started


def test_loopback_only_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(["lo"], monkeypatch)
    netguard.assert_loopback_only()


def test_an_interface_only_one_source_shows_is_still_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "lo")])
    monkeypatch.setattr(netguard, "_proc_interfaces", lambda _p: {"lo", "veth0"})
    with pytest.raises(NetworkNotIsolated, match="veth0"):
        netguard.assert_loopback_only("the embedded IPFS node")


def test_no_source_at_all_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object) -> object:
        raise OSError("no netlink")

    monkeypatch.setattr(socket, "if_nameindex", broken)
    monkeypatch.setattr(netguard, "_proc_interfaces", broken)
    monkeypatch.setattr(netguard, "_SYS_NET", netguard.Path("/nonexistent-sysfs"))
    with pytest.raises(NetworkNotIsolated, match="cannot list"):
        netguard.assert_loopback_only()


def test_embedded_ipfs_launcher_is_guarded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    _only(["lo", "wlan0"], monkeypatch)
    node = EmbeddedIpfs(tmp_path / "repo")  # type: ignore[operator]
    with pytest.raises(NetworkNotIsolated, match="embedded IPFS node"):
        node.start()
    assert node.process is None


def test_embedded_ipfs_config_is_loopback_by_default() -> None:
    cfg = node_config(1, 2, 3)
    assert cfg["swarm"] == ["/ip4/127.0.0.1/tcp/3"]
    assert cfg["announce"] == [] and cfg["pubsub"] is False
    # The API and gateway ports only: js/helia-ipfs.mjs binds both to 127.0.0.1 itself.
    assert (cfg["api_port"], cfg["gateway_port"]) == (1, 2)
    open_mode = node_config(1, 2, 4001, swarm_host="0.0.0.0", announce=("/ip4/192.0.2.1/tcp/4001",))
    assert open_mode["swarm"] == ["/ip4/0.0.0.0/tcp/4001"]
    assert open_mode["announce"] == ["/ip4/192.0.2.1/tcp/4001"]


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
    _only(["lo"], monkeypatch)
    cfg = Libp2pConfig(node_seed=b"\x05" * 32, bootstrap=("/ip4/192.168.1.1/tcp/1/p2p/x",))
    with pytest.raises(NetworkNotIsolated):
        asyncio.run(Libp2pTransport(cfg).start())
