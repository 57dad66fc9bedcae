"""An adversarial libp2p peer set for issue 39's acceptance shape: 2,000 disputes from fresh keys
and strangers' key rotations while a trusted attester disputes a forged head.

Eight libp2p hosts (the project's own ``Libp2pTransport``, not daemons) connect to one daemon
and publish, round-robin and each just under the protocol core's per-peer rate (20 messages a
second, not configurable), the messages of :func:`schedule`, signed with the project's own
``p2p.wire`` code. Run as a script in its own process (``python tests/dispute_flood.py ADDR DID
HEAD``), so that a test or benchmark measuring the daemon's answers meanwhile shares no
interpreter (nor its GIL) with the eight hosts; it prints one JSON line: the messages sent and
the seconds the flood took. Used by ``tests/integration/test_hostile_dispute_flood.py`` and
``tests/bench/bench_hostile_flood.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coordinator.identity import DatasetId, PrivateKey, generate_private_key
from coordinator.multiformats import Multicodec, Multihash

A, B, C = (generate_private_key(bytes([0xA1 + i]) * 32) for i in range(3))
"""The trusted attesters: A and B collude (they attest the forged head), C disputes it."""
FLOOD = 2000
ROTATIONS = 40
C_AFTER = 1100  # C's dispute follows this many of the flood (more than MAX_RECORDED_PER_HEAD)
HOSTS = 8
PER_HOST_PER_S = 14.0  # under the core's 20 messages a second per peer


def sybil(n: int) -> PrivateKey:
    """The ``n``-th fresh key of the flood."""
    return generate_private_key(b"\xd7" + n.to_bytes(31, "big"))


def dispute(key: PrivateKey, did: DatasetId, block: Multihash) -> bytes:
    """A replay-mismatch dispute of ``block`` signed by ``key``."""
    from p2p.wire import Dispute, DisputeKind, Evidence, sign_message

    ev = Evidence(logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x11" * 32), offsets=(0, 1))
    bad = Evidence(logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x22" * 32), offsets=(0, 1))
    x = Dispute(
        node=key.dataset_id(),
        dataset=did,
        block=block,
        kind=DisputeKind.REPLAY_MISMATCH,
        expected=ev,
        computed=bad,
        detail="replay of the forged step" if key is C else "sybil",
        issued_at_ns=time.time_ns(),
        nonce=secrets.token_bytes(16),
    )
    return sign_message(x, key).envelope


def attestation(key: PrivateKey, did: DatasetId, head: Multihash) -> bytes:
    """A VERIFIED attestation of ``head`` signed by ``key``."""
    from p2p.wire import Attestation, Checks, FetchLocations, Verdict, sign_message

    a = Attestation(
        node=key.dataset_id(),
        dataset=did,
        head=head,
        verdict=Verdict.VERIFIED,
        engine_name="attester",
        engine_version="1",
        checks=Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY | Checks.REPLAY,
        locations=FetchLocations(),
        issued_at_ns=time.time_ns(),
        nonce=secrets.token_bytes(16),
    )
    return sign_message(a, key).envelope


def rotation(n: int) -> bytes:
    """The ``n``-th stranger's key rotation: by a key of the flood that disputed the forged head
    before it (even ``n``: the node re-evaluates what that key touched) or between two fresh
    keys."""
    from p2p.wire import KeyRotation, next_key_digest

    step = FLOOD // ROTATIONS
    old = (
        sybil(n * step + 1) if n % 2 == 0 else generate_private_key(b"\xd8" + n.to_bytes(31, "big"))
    )
    new = generate_private_key(b"\xd9" + n.to_bytes(31, "big"))
    after = generate_private_key(b"\xda" + n.to_bytes(31, "big"))
    record = KeyRotation.make(
        old, new, time.time_ns(), secrets.token_bytes(16), next_key_digest(after.dataset_id())
    )
    return record.envelope


def schedule(did: DatasetId, forged: Multihash) -> list[tuple[str, bytes]]:
    """Every message of the flood in sending order, as (topic, envelope): ``FLOOD`` disputes by
    fresh keys (three quarters of ``forged``, a quarter of random blocks), a stranger's rotation
    after every ``FLOOD / ROTATIONS`` of them, C's dispute of ``forged`` after ``C_AFTER``, and
    the colluders' attestations of it 50 disputes later."""
    from p2p.transport import NODE_TOPIC, dataset_topic

    topic = dataset_topic(did.as_multibase())
    step = FLOOD // ROTATIONS
    out: list[tuple[str, bytes]] = []
    for n in range(FLOOD):
        block = Multihash.sha3_256(b"noise-%d" % n) if n % 4 == 0 else forged
        out.append((topic, dispute(sybil(n), did, block)))
        if n == C_AFTER:
            out.append((topic, dispute(C, did, forged)))
        if n == C_AFTER + 50:
            out += [(topic, attestation(k, did, forged)) for k in (A, B)]
        if n % step == step - 1:
            out.append((NODE_TOPIC, rotation(n // step)))
    return out


def storm(
    did: DatasetId, head: Multihash, disputes: int, rotations: int
) -> list[tuple[str, bytes]]:
    """A rotation storm: ``disputes`` disputes of ``head`` by fresh keys, then a key rotation by
    each of the first ``rotations`` of those keys (each makes the node re-evaluate the dataset
    its key disputed), then C's dispute of ``head``."""
    from p2p.transport import NODE_TOPIC, dataset_topic
    from p2p.wire import KeyRotation, next_key_digest

    topic = dataset_topic(did.as_multibase())
    out = [(topic, dispute(sybil(n), did, head)) for n in range(disputes)]
    for n in range(rotations):
        new = generate_private_key(b"\xdb" + n.to_bytes(31, "big"))
        after = generate_private_key(b"\xdc" + n.to_bytes(31, "big"))
        record = KeyRotation.make(
            sybil(n),
            new,
            time.time_ns(),
            secrets.token_bytes(16),
            next_key_digest(after.dataset_id()),
        )
        out.append((NODE_TOPIC, record.envelope))
    return [*out, (topic, dispute(C, did, head))]


async def run_hosts(addr: str, body: Callable[[list[Any]], Awaitable[None]]) -> None:
    """Start ``HOSTS`` libp2p hosts, connect them to ``addr``, run ``body`` on them, stop them."""
    from p2p.libp2p_host import Libp2pConfig, Libp2pTransport

    hosts = [Libp2pTransport(Libp2pConfig(node_seed=bytes([0xC1 + i]) * 32)) for i in range(HOSTS)]
    try:
        for t in hosts:
            await t.start()
            await t.connect(addr)
        await asyncio.sleep(5)  # gossipsub exchanges the topic subscriptions
        await body(hosts)
        await asyncio.sleep(3)
    finally:
        for t in hosts:
            await t.stop()


def publish_all(addr: str, messages: list[tuple[str, bytes]]) -> float:
    """Publish ``messages`` round-robin over the hosts, each host at ``PER_HOST_PER_S``; the
    seconds the flood took (the order of ``messages`` is kept to within one round)."""
    took = 0.0

    async def body(hosts: list[Any]) -> None:
        nonlocal took
        start = time.monotonic()

        async def one(i: int) -> None:
            for j in range(i, len(messages), len(hosts)):
                due = start + (j // len(hosts)) / PER_HOST_PER_S
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await hosts[i].publish(*messages[j])

        await asyncio.gather(*(one(i) for i in range(len(hosts))))
        took = time.monotonic() - start

    asyncio.run(run_hosts(addr, body))
    return took


def run(
    addr: str, did: str, head: str, *, attest_only: bool = False, storm_of: str = ""
) -> dict[str, Any]:
    """This module as a script in a child process (see the module docstring); its result.
    ``storm_of``: "DISPUTES,ROTATIONS" sends :func:`storm` instead of :func:`schedule`."""
    cmd = [sys.executable, str(Path(__file__).resolve()), addr, did, head]
    if attest_only:
        cmd.append("--attest-only")
    if storm_of:
        cmd += ["--storm", storm_of]
    out = subprocess.run(
        cmd,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("addr", help="the daemon's libp2p multiaddr")
    p.add_argument("did", help="the dataset (did:odf)")
    p.add_argument("head", help="the forged head (or, with --attest-only, the honest one)")
    p.add_argument(
        "--attest-only", action="store_true", help="A and B attest HEAD VERIFIED, nothing else"
    )
    p.add_argument("--storm", default="", help="DISPUTES,ROTATIONS: a rotation storm instead")
    args = p.parse_args()
    did, head = DatasetId.parse(args.did), Multihash.from_multibase(args.head)
    if args.attest_only:
        from p2p.transport import dataset_topic

        topic = dataset_topic(did.as_multibase())
        messages = [(topic, attestation(k, did, head)) for k in (A, B)]
    elif args.storm:
        disputes, rotations = (int(x) for x in args.storm.split(","))
        messages = storm(did, head, disputes, rotations)
    else:
        messages = schedule(did, head)
    took = publish_all(args.addr, messages)
    print(json.dumps({"messages": len(messages), "took_s": took}))


if __name__ == "__main__":
    main()
