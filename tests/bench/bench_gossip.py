"""Benchmark: announcement delivery over real py-libp2p node processes on loopback.

Starts ``--nodes`` (default 20) ``p2p.devnode`` processes inside a private loopback-only network
namespace (the script re-executes itself under ``unshare -rn``), wires them as a ring plus seeded
random chords (average degree about 4), lets the dataset owner (this process's own libp2p host)
publish ``--messages`` signed announcements at ``--rate`` msg/s into node 0, and reports:

* delivery ratio (announcements validated by a node / announcements x nodes),
* p50 / p99 delivery latency (publish -> validated at each node, same-host clocks),
* CPU milliseconds per message per node (``/proc/<pid>/stat`` over the publishing phase).

Optional ``--netem-ms`` is not applied: links are loopback inside one namespace (no veth pairs).

Usage: .venv/bin/python tests/bench/bench_gossip.py [--nodes 20] [--messages 40] [--rate 2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


async def run(nodes_n: int, messages: int, rate: float, seed: int) -> dict[str, Any]:
    from coordinator.identity import generate_private_key
    from coordinator.multiformats import Multihash
    from p2p.devcluster import DevNode, wait_until
    from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
    from p2p.transport import dataset_topic
    from p2p.wire import FetchLocations, HeadAnnouncement, sign_message

    owner = generate_private_key(b"\x01" * 32)
    did = owner.dataset_id()
    topic = dataset_topic(did.as_multibase())
    rng = random.Random(seed)
    nodes = [
        DevNode(i, (0x1000 + i).to_bytes(2, "big") * 16, did.as_did_str()) for i in range(nodes_n)
    ]
    host = Libp2pTransport(Libp2pConfig(node_seed=b"\x31" * 32))
    edges: set[tuple[int, int]] = {(i, (i + 1) % nodes_n) for i in range(nodes_n)}
    while len(edges) < 2 * nodes_n:
        a, b = rng.sample(range(nodes_n), 2)
        if (b, a) not in edges:
            edges.add((a, b))
    sent: dict[int, int] = {}
    try:
        t0 = time.monotonic()
        await asyncio.gather(*(n.start() for n in nodes))
        await asyncio.wait_for(asyncio.gather(*(n.ready.wait() for n in nodes)), 120)
        for a, b in sorted(edges):
            await nodes[a].send(f"connect {nodes[b].addr}")
        await host.start()
        await host.connect(nodes[0].addr)
        startup_s = time.monotonic() - t0
        await asyncio.sleep(5)
        cpu0 = [n.cpu_seconds() for n in nodes]
        for seq in range(1, messages + 1):
            msg = HeadAnnouncement(
                did,
                Multihash.sha3_256(f"head-{seq}".encode()),
                seq,
                None,
                0,
                FetchLocations(),
                time.time_ns(),
                seq.to_bytes(16, "big"),
            )
            sent[seq] = time.time_ns()
            await host.publish(topic, sign_message(msg, owner).envelope)
            await asyncio.sleep(1 / rate)
        await wait_until(lambda: all(len(n.of("candidate")) >= messages for n in nodes), 15)
        cpu1 = [n.cpu_seconds() for n in nodes]
    finally:
        for n in nodes:
            await n.stop()
        await host.stop()
    latencies = [
        (e["t_ns"] - sent[e["seq"]]) / 1e6
        for n in nodes
        for e in n.of("candidate")
        if e["seq"] in sent
    ]
    delivered = len({(n.idx, e["seq"]) for n in nodes for e in n.of("candidate")})
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    cpu_ms = [(b - a) * 1000 / messages for a, b in zip(cpu0, cpu1, strict=True)]
    return {
        "nodes": nodes_n,
        "edges": len(edges),
        "messages": messages,
        "rate_per_s": rate,
        "startup_s": round(startup_s, 1),
        "delivery_ratio": round(delivered / (messages * nodes_n), 4),
        "latency_ms_p50": round(statistics.median(latencies), 1) if latencies else None,
        "latency_ms_p99": round(q[98], 1),
        "latency_ms_max": round(max(latencies), 1) if latencies else None,
        "cpu_ms_per_msg_per_node_median": round(statistics.median(cpu_ms), 2),
        "cpu_ms_per_msg_per_node_max": round(max(cpu_ms), 2),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    """Parse arguments; re-execute inside a loopback-only namespace unless already inside."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--messages", type=int, default=40)
    p.add_argument("--rate", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.inside:
        cmd = " ".join([sys.executable, str(Path(__file__).resolve()), *sys.argv[1:], "--inside"])
        inner = f"ip link set lo up && exec {cmd}"
        rc = subprocess.run(["unshare", "-rn", "bash", "-c", inner], check=False)
        sys.exit(rc.returncode)
    result = asyncio.run(run(args.nodes, args.messages, args.rate, args.seed))
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:34s} {v}")


if __name__ == "__main__":
    main()
