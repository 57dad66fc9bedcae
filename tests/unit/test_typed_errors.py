"""Errors a user acts on are typed under ``OdfNodeError`` and name what to change."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.errors import OdfNodeError
from node.adapters.gossip import NoGossip
from node.app.errors import Unavailable
from node.ipfs.embedded import EmbeddedIpfs, IpfsStartError
from node.rpc.errors import UNAVAILABLE
from p2p.errors import InvalidPeerAddress
from p2p.redial import peer_id_of


def test_missing_js_ipfs_says_how_to_install_it_or_turn_it_off(tmp_path: Path) -> None:
    node = EmbeddedIpfs(tmp_path / "repo", js=tmp_path / "no-js", require_isolation=False)
    with pytest.raises(IpfsStartError) as e:
        node.start()
    assert isinstance(e.value, OdfNodeError) and e.value.rpc_code == UNAVAILABLE
    assert "make setup" in str(e.value) and '[ipfs] mode = "external"' in str(e.value)
    assert node.process is None


def test_dialing_with_gossip_off_names_the_setting() -> None:
    with pytest.raises(Unavailable, match=r"\[p2p\] enabled = true"):
        asyncio.run(NoGossip().connect("/ip4/127.0.0.1/tcp/1/p2p/12D3KooWA"))


def test_a_bootstrap_address_without_a_peer_id_is_a_typed_config_error() -> None:
    with pytest.raises(InvalidPeerAddress, match=r"\[p2p\] bootstrap"):
        peer_id_of("/ip4/127.0.0.1/tcp/4001")
