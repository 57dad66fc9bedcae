"""A sybil-dispute flood over real libp2p (issue 39, defects 1 and 2).

An owner publishes a DataFusion derivative (a light node's integrity check of a root would be
its own conclusive verdict); a light node (``quorum``, k = 2 of three trusted attesters A, B, C
whose keys this test holds, no replay) follows it and accepts the head. Four libp2p hosts
started here (not daemons: adversarial peers) then publish on the dataset's topic 1,400
disputes, each signed by a fresh key, each host within the core's per-peer rate: 1,050 of that
head (more than ``MAX_RECORDED_PER_HEAD``) and 350 of random blocks; then C disputes the head,
A and B (a colluding quorum) attest it VERIFIED, and 20 strangers' key rotations follow (half
of them by keys of the flood, which make the light node rebuild the dataset's policy from its
stored evidence). Before the fix the strangers filled the head's dispute slots, C's dispute
was dropped and the quorum trusted the head. The light node must show the head disputed by C
and never trust it, before and after a restart, and answer ``node.status`` within 250 ms (p99)
while the flood runs.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import BIG_CITIES_DF_SNAPSHOTS, NodeProcess

from coordinator.identity import PrivateKey, generate_private_key
from coordinator.multiformats import Multicodec, Multihash

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BASE = {"ipfs": {"mode": "none"}, "p2p": {"discovery": False}}
SNAPSHOTS = BIG_CITIES_DF_SNAPSHOTS
CSV = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n"
A, B, C = (generate_private_key(bytes([0x61 + i]) * 32) for i in range(3))
FLOOD = 1400
HOSTS = 4
PER_HOST_PER_S = 12.0  # under the core's 20 messages a second per peer
ROTATIONS = 20


def _sybil(n: int) -> PrivateKey:
    """The ``n``-th fresh key of the flood."""
    return generate_private_key(b"\xee" + n.to_bytes(31, "big"))


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[NodeProcess, NodeProcess]]:
    owner = NodeProcess(tmp_path / "owner", "owner", config=BASE)
    trusted = [k.dataset_id().as_did_key() for k in (A, B, C)]
    light = NodeProcess(
        tmp_path / "light",
        "light",
        config={
            **BASE,
            "pipeline": {"replay": False},
            "trust": {"policy": "quorum", "k": 2, "trusted_attesters": trusted},
        },
    )
    owner.init()
    light.init()
    try:
        for n in (owner, light):
            n.launch()
        for n in (owner, light):
            n.wait_ready(120)
        yield owner, light
    finally:
        for n in (owner, light):
            n.stop()


def _row(light: NodeProcess, did: str) -> dict[str, Any]:
    return dict(next(r for r in light.call("subscriptions.list") if r["did"] == did))


def _dispute(key: PrivateKey, did: Any, head: Multihash) -> bytes:
    from p2p.wire import Dispute, DisputeKind, Evidence, sign_message

    ev = Evidence(logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x11" * 32), offsets=(0, 1))
    bad = Evidence(logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x22" * 32), offsets=(0, 1))
    x = Dispute(
        node=key.dataset_id(),
        dataset=did,
        block=head,
        kind=DisputeKind.REPLAY_MISMATCH,
        expected=ev,
        computed=bad,
        detail="sybil",
        issued_at_ns=time.time_ns(),
        nonce=secrets.token_bytes(16),
    )
    return sign_message(x, key).envelope


def _attestation(key: PrivateKey, did: Any, head: Multihash) -> bytes:
    from p2p.wire import Attestation, Checks, FetchLocations, Verdict, sign_message

    a = Attestation(
        node=key.dataset_id(),
        dataset=did,
        head=head,
        verdict=Verdict.VERIFIED,
        engine_name="colluder",
        engine_version="1",
        checks=Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY | Checks.REPLAY,
        locations=FetchLocations(),
        issued_at_ns=time.time_ns(),
        nonce=secrets.token_bytes(16),
    )
    return sign_message(a, key).envelope


async def _attack(addr: str, did_text: str, head_text: str) -> None:
    from coordinator.identity import DatasetId
    from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
    from p2p.transport import NODE_TOPIC, dataset_topic
    from p2p.wire import KeyRotation, next_key_digest

    did, head = DatasetId.parse(did_text), Multihash.from_multibase(head_text)
    topic = dataset_topic(did.as_multibase())
    hosts = [Libp2pTransport(Libp2pConfig(node_seed=bytes([0x71 + i]) * 32)) for i in range(HOSTS)]
    try:
        for t in hosts:
            await t.start()
            await t.connect(addr)
        await asyncio.sleep(5)  # gossipsub exchanges the topic subscriptions

        async def flood(i: int, t: Any) -> None:
            for n in range(i, FLOOD, HOSTS):
                # A quarter dispute random blocks: they pushed the trusted dispute out of the
                # rebuild's "newest 1,000 of the dataset".
                block = Multihash.sha3_256(b"noise-%d" % n) if n % 4 == 0 else head
                await t.publish(topic, _dispute(_sybil(n), did, block))
                await asyncio.sleep(1 / PER_HOST_PER_S)

        await asyncio.gather(*(flood(i, t) for i, t in enumerate(hosts)))
        await asyncio.sleep(2)
        await hosts[0].publish(topic, _dispute(C, did, head))
        await asyncio.sleep(1)
        await hosts[1].publish(topic, _attestation(A, did, head))
        await hosts[2].publish(topic, _attestation(B, did, head))
        await asyncio.sleep(3)
        # Strangers' key rotations: sybil keys that disputed hand over to fresh keys, so that
        # the light node re-evaluates the dataset from its stored evidence (a rebuild), and
        # rotations between two fresh keys, which touch nothing.
        for n in range(ROTATIONS):
            old = (
                _sybil(n) if n % 2 == 0 else generate_private_key(b"\xf0" + bytes(30) + bytes([n]))
            )
            new = generate_private_key(b"\xf1" + bytes(30) + bytes([n]))
            after = generate_private_key(b"\xf2" + bytes(30) + bytes([n]))
            record = KeyRotation.make(
                old,
                new,
                time.time_ns(),
                secrets.token_bytes(16),
                next_key_digest(after.dataset_id()),
            )
            await hosts[3].publish(NODE_TOPIC, record.envelope)
            await asyncio.sleep(1 / PER_HOST_PER_S)
        await asyncio.sleep(3)
    finally:
        for t in hosts:
            await t.stop()


def test_a_sybil_dispute_flood_does_not_silence_a_trusted_attester(
    nodes: tuple[NodeProcess, NodeProcess], tmp_path: Path
) -> None:
    owner, light = nodes
    csv = tmp_path / "1.csv"
    csv.write_text(CSV)
    dids, head = owner.create_and_transform(SNAPSHOTS, csv)
    did = dids["big-cities"]
    light.call("peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0])
    light.call("subscriptions.add", did=did)
    light.wait_for("the head", lambda: _row(light, did)["accepted_head"] == head, 120)

    addr = light.call("node.status")["p2p"]["listen_addrs"][0]
    # node.status sampled every 100 ms while the flood runs (issue 39: p99 <= 250 ms).
    latencies: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            t = time.perf_counter()
            light.call("node.status", timeout=30)
            latencies.append(time.perf_counter() - t)
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        asyncio.run(_attack(addr, did, head))
    finally:
        done.set()
        sampler.join(60)
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(f"node.status during the flood: {len(latencies)} samples, p99 {1000 * p99:.0f} ms")
    assert p99 <= 0.25, latencies[-5:]
    c_id = C.dataset_id().as_did_key()

    def disputed_by_c() -> dict[str, Any] | None:
        row = _row(light, did)
        trust = row["trust"] or {}
        return row if c_id in (trust.get("disputed_by") or ()) else None

    row = light.wait_for("C's dispute recorded", disputed_by_c, 60)
    rotated = light.wait_for(
        "strangers' rotations taken (half of them rebuild the dataset's policy)",
        lambda: light.call("node.events", kind="node.key_rotated", limit=1000),
        30,
    )
    print(f"strangers' rotations the light node took: {len(rotated)} of {ROTATIONS}")
    assert row["trust"]["state"] == "disputed", row
    # The flood did reach the node (the state may keep fewer of strangers' disputes than
    # arrived, and the RPC lists at most 1,000).
    assert len(light.call("disputes.list", did=did, limit=1000)) >= 100
    time.sleep(3)  # the colluders' attestations have arrived and been handled
    row = _row(light, did)
    assert row["trusted_head"] is None and row["trust"]["state"] == "disputed", row

    light.stop()
    light.launch()
    light.wait_ready(120)
    row = light.wait_for("the rebuilt state", lambda: _row(light, did)["trust"], 30)
    row = _row(light, did)
    assert row["trusted_head"] is None, row
    assert row["trust"]["state"] == "disputed" and c_id in row["trust"]["disputed_by"], row
