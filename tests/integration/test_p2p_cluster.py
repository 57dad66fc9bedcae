"""Five real node processes over py-libp2p in a private loopback-only network namespace.

The pytest test re-runs this file as a script under ``unshare -rn`` (a fresh network namespace
with only ``lo``), so no packet can leave the machine whatever namespace pytest itself runs in.
The script (the orchestrator) starts 5 ``p2p.devnode`` processes in a ring and plays the dataset
owner and an attacker through its own libp2p host:

1. a forged announcement (owner's DID, attacker's key) reaches no node, and the first hop
   penalises the sender;
2. a valid announcement is accepted by all five;
3. the owner equivocates (same sequence, other head): the proof reaches all five;
4. node 4 is stopped, the owner announces again, node 4 restarts with the same key and catches up
   through anti-entropy (``/odf/heads/1.0.0``), and no node fetches the same head twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
N = 5

pytestmark = pytest.mark.integration


async def scenario() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from coordinator.identity import generate_private_key
    from coordinator.multiformats import Multihash
    from p2p.devcluster import DevNode, wait_until
    from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
    from p2p.transport import dataset_topic
    from p2p.wire import FetchLocations, HeadAnnouncement, sign_message

    owner = generate_private_key(b"\x01" * 32)
    mallory = generate_private_key(b"\x03" * 32)
    did = owner.dataset_id()
    topic = dataset_topic(did.as_multibase())
    nonce = iter(range(1, 1000))

    def ann(seq: int, head: str, key: Any = owner) -> bytes:
        msg = HeadAnnouncement(
            did,
            Multihash.sha3_256(head.encode()),
            seq,
            None,
            0,
            FetchLocations(http_urls=("http://127.0.0.1:1/ds",)),
            time.time_ns(),
            next(nonce).to_bytes(16, "big"),
        )
        return sign_message(msg, key).envelope

    out: dict[str, Any] = {}
    nodes = [DevNode(i, bytes([0x40 + i]) * 32, did.as_did_str()) for i in range(N)]
    host = Libp2pTransport(Libp2pConfig(node_seed=b"\x30" * 32))
    try:
        t0 = time.monotonic()
        await asyncio.gather(*(n.start() for n in nodes))
        await asyncio.wait_for(asyncio.gather(*(n.ready.wait() for n in nodes)), 60)
        for i, n in enumerate(nodes):
            await n.send(f"connect {nodes[i - 1].addr}")  # a ring
        await host.start()
        await host.connect(nodes[0].addr)
        owner_peer = host.peer_id
        out["startup_s"] = round(time.monotonic() - t0, 2)
        await asyncio.sleep(3)  # meshes form on the 1 s heartbeat

        # 1. forged announcement
        await host.publish(topic, ann(1, "h1", key=mallory))
        await asyncio.sleep(3)
        out["forged_accepted"] = sum(len(n.of("accepted")) + len(n.of("fetch")) for n in nodes)
        out["forged_penalised_by_first_hop"] = any(
            e["peer"] == owner_peer and e["reason"] == "bad-signature"
            for e in nodes[0].of("penalise")
        )

        # 2. valid announcement reaches all
        sent = time.time_ns()
        await host.publish(topic, ann(1, "h1"))
        out["valid_reached_all"] = await wait_until(
            lambda: all(any(e["seq"] == 1 for e in n.of("accepted")) for n in nodes), 20
        )
        out["latency_ms"] = sorted(
            round((n.of("accepted")[0]["t_ns"] - sent) / 1e6, 1) for n in nodes if n.of("accepted")
        )

        # 3. equivocation: the proof reaches all
        await host.publish(topic, ann(1, "h1-fork"))
        out["proof_reached_all"] = await wait_until(lambda: all(n.of("proof") for n in nodes), 20)

        # 4. node 4 down; new head; restart; anti-entropy catch-up
        await nodes[4].stop()
        await host.publish(topic, ann(2, "h2"))
        out["seq2_reached_survivors"] = await wait_until(
            lambda: all(any(e["seq"] == 2 for e in n.of("accepted")) for n in nodes[:4]), 20
        )
        await nodes[4].start()
        await asyncio.wait_for(nodes[4].ready.wait(), 60)
        await nodes[4].send(f"connect {nodes[3].addr}")
        out["restarted_asked_for_heads"] = await wait_until(
            lambda: bool(nodes[4].of("anti-entropy", life=2)), 20
        )
        out["restarted_caught_up"] = await wait_until(
            lambda: any(e["seq"] == 2 for e in nodes[4].of("accepted", life=2)), 20
        )
        # reconnects: duplicates must not re-trigger work
        for i in range(4):
            await nodes[i].send(f"connect {nodes[4].addr}")
        await asyncio.sleep(3)
        out["fetches_per_survivor"] = [len(n.of("fetch")) for n in nodes[:4]]
        out["fetches_restarted_node_second_life"] = len(nodes[4].of("fetch", life=2))
        out["duplicate_fetches"] = sum(
            len(fs) - len({e["head"] for e in fs})
            for n in nodes
            for fs in (n.of("fetch", life=1), n.of("fetch", life=2))
        )
    finally:
        for n in nodes:
            await n.stop()
        await host.stop()
    return out


def test_five_node_cluster_in_private_namespace() -> None:
    if shutil.which("unshare") is None:
        pytest.fail("unshare(1) is required to isolate the cluster in a network namespace")
    cmd = f"ip link set lo up && exec {sys.executable} {Path(__file__).resolve()}"
    proc = subprocess.run(
        ["unshare", "-rn", "bash", "-c", cmd],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(result)
    assert result["forged_accepted"] == 0, result
    assert result["forged_penalised_by_first_hop"], result
    assert result["valid_reached_all"], result
    assert result["proof_reached_all"], result
    assert result["seq2_reached_survivors"], result
    assert result["restarted_asked_for_heads"], result
    assert result["restarted_caught_up"], result
    assert result["fetches_per_survivor"] == [2] * 4, result
    # The restarted node may first hear the older head re-gossiped on reconnect, then the newer
    # one: one or two fetches, but never the same head twice anywhere.
    assert result["fetches_restarted_node_second_life"] in (1, 2), result
    assert result["duplicate_fetches"] == 0, result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(scenario())))
