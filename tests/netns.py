"""Loopback-only guard and fixtures for tests that start IPFS or libp2p nodes.

Every fixture or launcher that starts a node calls :func:`require_loopback_only` first: it
refuses to start when any network interface other than ``lo`` exists (the node's own guard,
:mod:`p2p.netguard`), so no test can ever send traffic off the machine. Run such tests as::

    unshare -rn bash -c 'ip link set lo up; .venv/bin/pytest tests/integration'

Test modules import the fixtures from here (``from netns import ipfs_node, ipfs_pair``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node.ipfs.embedded import EmbeddedIpfs, js_dir
from p2p.netguard import NetworkNotIsolated, assert_loopback_only, non_loopback_interfaces

__all__ = [
    "NetworkNotIsolated",
    "ipfs_node",
    "ipfs_pair",
    "non_loopback_interfaces",
    "require_loopback_only",
    "start_ipfs",
]


def require_loopback_only() -> None:
    """Fail unless ``lo`` is the only network interface (raises :class:`NetworkNotIsolated`)."""
    assert_loopback_only("a test node")


def start_ipfs(*repos: Path) -> list[EmbeddedIpfs]:
    """Start embedded IPFS nodes (one per repo dir) in parallel; guarded by the netns check."""
    require_loopback_only()
    if not (js_dir() / "node_modules" / "helia").is_dir():
        pytest.fail(
            "the IPFS node (Helia) is not installed: run `cd js && npm ci --no-audit --no-fund`"
        )
    nodes = [EmbeddedIpfs(r) for r in repos]
    try:
        for n in nodes:
            n.launch()
        for n in nodes:
            n.wait_ready()
    except BaseException:
        for n in nodes:
            n.stop()
        raise
    return nodes


@pytest.fixture(scope="module")
def ipfs_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedIpfs]:
    """One running embedded IPFS node on random loopback ports (per test module); stopped by PID."""
    (node,) = start_ipfs(tmp_path_factory.mktemp("ipfs") / "node")
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def ipfs_pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmbeddedIpfs, EmbeddedIpfs]]:
    """Two embedded IPFS nodes (per test module), not yet connected to each other."""
    root = tmp_path_factory.mktemp("ipfs")
    a, b = start_ipfs(root / "a", root / "b")
    try:
        yield a, b
    finally:
        b.stop()
        a.stop()
