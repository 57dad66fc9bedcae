"""A dispute flood over real libp2p fills ``state.db`` no further than the caps (issue 39,
defect 5).

One daemon follows a dataset (its owner is not needed: following joins the dataset's topic) with
small ``[storage]`` evidence caps and a small ``[p2p]`` signer budget, and a trusted attester C
in its ``[trust]``. libp2p hosts started here (adversarial peers, not daemons) publish on the
topic C's dispute, then 150 disputes signed by one key (Mallory) from one host and 90 each
signed by a fresh key from three others, every host within the core's per-peer rate. Before the
fix all 241 were stored and forwarded. Now: Mallory's pass the core only within its key's
budget and at most ``evidence_per_signer`` of them are kept, strangers' disputes of the dataset
stay within ``evidence_per_dataset``, and C's is kept.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import NodeProcess

from coordinator.identity import PrivateKey, generate_private_key
from coordinator.multiformats import Multicodec, Multihash

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

OWNER = generate_private_key(b"\x81" * 32)
C = generate_private_key(b"\x82" * 32)
MALLORY = generate_private_key(b"\x83" * 32)
PER_SIGNER, PER_DATASET, BURST = 10, 40, 20
ONE_KEY, FRESH, HOSTS = 150, 90, 4
PER_HOST_PER_S = 12.0  # under the core's 20 messages a second per peer


@pytest.fixture
def light(tmp_path: Path) -> Iterator[NodeProcess]:
    node = NodeProcess(
        tmp_path / "light",
        "light",
        config={
            "ipfs": {"mode": "none"},
            "p2p": {
                "discovery": False,
                "signer_rate_burst": float(BURST),
                "signer_rate_per_s": 1.0,
            },
            "storage": {
                "evidence_per_signer": PER_SIGNER,
                "evidence_per_dataset": PER_DATASET,
            },
            "pipeline": {"replay": False},
            "trust": {
                "policy": "quorum",
                "k": 1,
                "trusted_attesters": [C.dataset_id().as_did_key()],
            },
        },
    )
    node.init()
    try:
        node.launch()
        node.wait_ready(120)
        yield node
    finally:
        node.stop()


def _dispute(key: PrivateKey, head: Multihash) -> bytes:
    from p2p.wire import Dispute, DisputeKind, Evidence, sign_message

    ev = Evidence(logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x11" * 32), offsets=(0, 1))
    bad = Evidence(logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x22" * 32), offsets=(0, 1))
    return sign_message(
        Dispute(
            node=key.dataset_id(),
            dataset=OWNER.dataset_id(),
            block=head,
            kind=DisputeKind.REPLAY_MISMATCH,
            expected=ev,
            computed=bad,
            detail="flood",
            issued_at_ns=time.time_ns(),
            nonce=secrets.token_bytes(16),
        ),
        key,
    ).envelope


def _block(i: int) -> Multihash:
    return Multihash.sha3_256(f"block-{i}".encode())


async def _flood(addr: str) -> None:
    from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
    from p2p.transport import dataset_topic

    topic = dataset_topic(OWNER.dataset_id().as_multibase())
    hosts = [Libp2pTransport(Libp2pConfig(node_seed=bytes([0x91 + i]) * 32)) for i in range(HOSTS)]
    try:
        for t in hosts:
            await t.start()
            await t.connect(addr)
        await asyncio.sleep(5)  # gossipsub exchanges the topic subscriptions
        await hosts[0].publish(topic, _dispute(C, _block(0)))
        await asyncio.sleep(1)

        async def mallory() -> None:
            for n in range(ONE_KEY):
                await hosts[0].publish(topic, _dispute(MALLORY, _block(n + 1)))
                await asyncio.sleep(1 / PER_HOST_PER_S)

        async def fresh(i: int) -> None:
            for n in range(i, FRESH, HOSTS - 1):
                key = generate_private_key(b"\xef" + n.to_bytes(31, "big"))
                await hosts[1 + i].publish(topic, _dispute(key, _block(1000 + n)))
                await asyncio.sleep(1 / PER_HOST_PER_S)

        await asyncio.gather(mallory(), *(fresh(i) for i in range(HOSTS - 1)))
        await asyncio.sleep(3)
    finally:
        for t in hosts:
            await t.stop()


def _counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT signer, count(*) FROM disputes GROUP BY signer").fetchall()
        return {str(s): int(n) for s, n in rows}
    finally:
        conn.close()


def test_a_dispute_flood_is_stored_within_the_caps_and_the_trusted_dispute_kept(
    light: NodeProcess,
) -> None:
    did = OWNER.dataset_id().as_did_str()
    light.call("subscriptions.add", did=did)
    addr = light.call("node.status")["p2p"]["listen_addrs"][0]
    asyncio.run(_flood(addr))
    mallory, c = MALLORY.dataset_id().as_did_key(), C.dataset_id().as_did_key()
    db = light.home / "state.db"

    def settled() -> dict[str, int] | None:
        counts = _counts(db)
        return counts if sum(counts.values()) >= PER_DATASET + 1 else None

    counts = light.wait_for("the flood stored", settled, 60)
    time.sleep(2)  # the writes of the last messages
    counts = _counts(db)
    print(f"disputes stored by signer: {len(counts)} signers, {sum(counts.values())} rows")
    assert counts.get(c) == 1  # kept, whatever the strangers sent
    assert 0 < counts.get(mallory, 0) <= PER_SIGNER
    assert sum(n for s, n in counts.items() if s != c) <= PER_DATASET
    # The fresh keys' disputes got through (each key's first), the node did not stop at Mallory.
    assert len(counts) > PER_DATASET // 2
