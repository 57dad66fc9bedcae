"""The gossip peers: ``peers`` lists them, ``connect`` dials one (``--ipfs``: the IPFS node's
swarm)."""

from __future__ import annotations

from node.app import Application
from node.app.results import (
    ConnectResult,
    IpfsConnected,
    PeerRow,
)
from node.commands import spec
from node.commands.spec import Cli, Command, CommandParam, Context


async def _peers(app: Application, ctx: Context) -> list[PeerRow]:
    return await app.queries.peers()


async def _peers_connect(app: Application, ctx: Context, multiaddr: str) -> ConnectResult:
    return ConnectResult(peer_id=await app.subscriptions.connect_peer(multiaddr))


async def _ipfs_connect(app: Application, ctx: Context, multiaddr: str) -> IpfsConnected:
    await app.subscriptions.connect_ipfs(multiaddr)
    return IpfsConnected(connected=multiaddr)


_NEEDS_PEER = "needs the daemon (dials a peer): offline it fails naming `odf-node run`"


PEER_COMMANDS: tuple[Command, ...] = (
    Command(
        "peers.list",
        "Gossip peers the node knows, with scores.",
        _peers,
        cli=("peers",),
        result=spec.array_of(PeerRow),
        columns=("peer_id", "connected", "score", "last_seen_ns"),
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
