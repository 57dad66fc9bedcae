"""The gossip peers: ``peers`` lists them, ``connect`` dials one (``--ipfs``: the IPFS node's
swarm)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from node.app import Application
from node.app.results import (
    ConnectResult,
    IpfsConnected,
    PeerRow,
)
from node.commands import spec
from node.commands.spec import Cli, Command, CommandParam, Context, Output


async def _peers(app: Application, ctx: Context) -> list[PeerRow]:
    return await app.queries.peers()


async def _peers_connect(app: Application, ctx: Context, multiaddr: str) -> ConnectResult:
    return ConnectResult(peer_id=await app.subscriptions.connect_peer(multiaddr))


async def _ipfs_connect(app: Application, ctx: Context, multiaddr: str) -> IpfsConnected:
    await app.subscriptions.connect_ipfs(multiaddr)
    return IpfsConnected(connected=multiaddr)


def _ago(ns: int, now_ns: int) -> str:
    s = max(0, (now_ns - ns) // 1_000_000_000)
    if s < 120:
        return f"{s} s ago"
    return f"{s // 60} min ago" if s < 7200 else f"{s // 3600} h ago"


def _render_peers(value: list[PeerRow], out: Output, opts: Mapping[str, Any]) -> None:
    """Score to two decimals and last seen as an age (they printed as 1.0672825206648733 and
    1795935950165979547); the peer id last, where a narrow terminal cuts it."""
    if not value:
        out.print("(none)")
        return
    now = time.time_ns()
    rows = [
        [
            "yes" if r.connected else "no",
            f"{r.score:.2f}",
            _ago(r.last_seen_ns, now),
            r.peer_id,
        ]
        for r in value
    ]
    out.table(["connected", "score", "last seen", "peer id"], rows, markup=False)


_NEEDS_PEER = "needs the daemon (dials a peer): offline it fails naming `odf-node run`"


PEER_COMMANDS: tuple[Command, ...] = (
    Command(
        "peers.list",
        "Gossip peers the node knows, with scores.",
        _peers,
        cli=("peers",),
        result=spec.array_of(PeerRow),
        result_type=PeerRow,
        render=_render_peers,
    ),
    Command(
        "peers.connect",
        "Dial a gossip peer (or, with --ipfs, connect the node's IPFS to another).",
        _peers_connect,
        (CommandParam("multiaddr", spec.STR, True, "/ip4/…/tcp/…/p2p/<peer id>", Cli("argument")),),
        cli=("connect",),
        daemon_only=True,
        alternate=("--ipfs", "Connect the IPFS node.", "ipfs.connect"),
        parity=_NEEDS_PEER,
        result=spec.object_of(ConnectResult),
    ),
    Command(
        "ipfs.connect",
        "Swarm-connect the node's IPFS.",
        _ipfs_connect,
        (CommandParam("multiaddr", spec.STR, True),),
        daemon_only=True,
        result=spec.object_of(IpfsConnected),
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["PEER_COMMANDS"]
