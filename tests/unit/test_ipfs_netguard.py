"""The loopback-only guard refuses to start nodes when other interfaces exist."""

from __future__ import annotations

import socket

import pytest
from netns import NetworkNotIsolated, require_loopback_only

import node.ipfs.netguard as guard
from node.ipfs.embedded import EmbeddedIpfs, loopback_config


def _only(names: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "if_nameindex", lambda: list(enumerate(names, 1)))
    monkeypatch.setattr(guard, "_proc_interfaces", lambda _p: set(names))


def test_refuses_with_other_interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(["lo", "eth0"], monkeypatch)
    with pytest.raises(NetworkNotIsolated, match="eth0"):
        require_loopback_only()


def test_accepts_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(["lo"], monkeypatch)
    require_loopback_only()


def test_embedded_launcher_is_guarded(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    _only(["lo", "wlan0"], monkeypatch)
    node = EmbeddedIpfs(tmp_path / "repo")  # type: ignore[operator]
    with pytest.raises(NetworkNotIsolated):
        node.start()
    assert node.process is None


def test_loopback_config() -> None:
    cfg: dict[str, object] = {"Addresses": {"Swarm": ["/ip4/0.0.0.0/tcp/4002"]}, "Bootstrap": ["x"]}
    loopback_config(cfg, 1, 2, 3, 4)
    addrs = cfg["Addresses"]
    assert isinstance(addrs, dict)
    for v in addrs.values():
        for a in v if isinstance(v, list) else [v]:
            assert a.startswith("/ip4/127.0.0.1/")
    assert cfg["Bootstrap"] == []
    assert cfg["Routing"] == {"Type": "none"}
    assert cfg["Discovery"]["MDNS"]["Enabled"] is False  # type: ignore[index]
    assert cfg["Swarm"]["DisableNatPortMap"] is True  # type: ignore[index]
