"""A minimal gossip node process for loopback clusters (integration tests and benchmarks).

``python -m p2p.devnode --seed HEX --follow DID [--connect MULTIADDR]...`` starts a
:class:`Libp2pTransport` (loopback only; refuses to start otherwise), a :class:`ProtocolCore` and
a :class:`GossipService`, and prints one JSON object per line on stdout: ``ready`` (peer id and
address), then ``candidate``, ``fetch``, ``accepted``, ``proof``, ``penalise``,
``anti-entropy``. Lines ``connect <multiaddr>`` on stdin dial more peers. Its fetcher trusts the
announcement (``ancestry_ok=True``) - there is no chain storage here; the real daemon supplies a
fetcher that downloads and checks the chain.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from typing import Any

from coordinator.identity import DatasetId
from p2p.core import (
    Accept,
    CoreConfig,
    Decision,
    EmitEquivocationProof,
    HeadAccepted,
    Penalise,
    ProtocolCore,
    RequestAntiEntropy,
    RequestFetch,
)
from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
from p2p.service import GossipService
from p2p.transport import TransportError
from p2p.wire import EquivocationProof, HeadAnnouncement, SignedMessage


def _emit(obj: dict[str, Any]) -> None:
    obj["t_ns"] = time.time_ns()
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _report(d: Decision) -> None:
    match d:
        case RequestFetch():
            _emit({"event": "fetch", "seq": d.sequence, "head": d.head.to_multibase()})
        case HeadAccepted():
            _emit({"event": "accepted", "seq": d.sequence, "head": d.head.to_multibase()})
        case EmitEquivocationProof():
            _emit({"event": "proof", "did": d.dataset.as_did_str(), "origin": "self"})
        case Penalise():
            _emit({"event": "penalise", "peer": d.peer, "reason": d.reason})
        case RequestAntiEntropy():
            _emit({"event": "anti-entropy", "peer": d.peer})
        case Accept() if isinstance(d.message, SignedMessage) and isinstance(
            d.message.message, HeadAnnouncement
        ):
            _emit({"event": "candidate", "seq": d.message.message.sequence})
        case _:
            pass


async def _run(args: argparse.Namespace) -> None:
    did = DatasetId.parse(args.follow)
    transport = Libp2pTransport(Libp2pConfig(node_seed=bytes.fromhex(args.seed)))
    await transport.start()
    core = ProtocolCore(CoreConfig(), random.Random(args.seed), [did])

    async def trusting_fetch(req: RequestFetch) -> bool:
        return True

    service = GossipService(core, transport, time.time_ns, trusting_fetch)

    def report(d: Decision) -> None:
        _report(d)
        if isinstance(d, Accept) and isinstance(d.message, EquivocationProof):
            _emit({"event": "proof", "did": d.message.dataset.as_did_str(), "origin": "gossip"})

    service.on_decision(report)
    await service.start()
    _emit({"event": "ready", "peer_id": transport.peer_id, "addr": transport.listen_addrs()[0]})

    async def dial(addr: str) -> None:
        try:
            peer = await transport.connect(addr)
        except TransportError as e:
            _emit({"event": "dial-failed", "addr": addr, "error": str(e)})
            return
        _emit({"event": "connected", "peer": peer})
        service.peer_connected(peer)

    for addr in args.connect:
        await dial(addr)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line or line == "quit":
            break
        if line.startswith("connect "):
            await dial(line.removeprefix("connect "))
    await service.stop()
    await transport.stop()


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments and run until stdin closes."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", required=True, help="node ed25519 seed, 64 hex chars")
    p.add_argument("--follow", required=True, help="dataset DID to follow")
    p.add_argument("--connect", action="append", default=[], help="loopback multiaddr to dial")
    asyncio.run(_run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
