"""Hostile strings where the node expects a file name or a peer address.

Found by ``tests/bench/bench_hostile.py``: ``dataset.ingest`` with a 100,000-character or
NUL-bearing file name raised ``OSError: File name too long`` / ``ValueError`` (-32603 over
RPC), and ``peers.connect`` with an unparsable multiaddr leaked the multiaddr library's error
(-32603). Both are typed ``INVALID_INPUT`` errors now.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.errors import INVALID_INPUT
from node.app.datasets import check_input_files
from node.app.errors import InvalidArgument
from p2p.errors import InvalidPeerAddress
from p2p.libp2p_host import parse_peer_multiaddr


@pytest.mark.parametrize("name", ["a" * 100_000, "x\x00y", "/" + "d/" * 3000 + "f"])
def test_unusable_input_file_names_are_invalid_arguments(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_input_files([Path(name)])
    assert len(str(info.value)) < 400  # the hostile name is not echoed in full
    assert InvalidArgument.rpc_code == INVALID_INPUT


def test_special_files_are_not_regular(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="not a regular file"):
        check_input_files([tmp_path])
    with pytest.raises(InvalidArgument, match="not found"):
        check_input_files([tmp_path / "missing.csv"])


@pytest.mark.parametrize(
    "addr",
    [
        "/ip4/127.0.0.1/tcp/1/p2p/QmNotAPeer",
        "",
        "not a multiaddr",
        "/ip4/127.0.0.1/tcp/99999",
        "/ip4/127.0.0.1/tcp/1",
        "\ud800",
    ],
)
def test_unparsable_peer_addresses_are_typed(addr: str) -> None:
    with pytest.raises(InvalidPeerAddress):
        parse_peer_multiaddr(addr)
    assert InvalidPeerAddress.rpc_code == INVALID_INPUT


def test_a_valid_peer_address_parses() -> None:
    peer = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"
    info = parse_peer_multiaddr(f"/ip4/127.0.0.1/tcp/4001/p2p/{peer}")
    assert info.peer_id.to_string() == peer
