"""Limits of a real daemon: the gossip connection manager and the disk budget of followed
datasets (``[p2p] peers_*`` / ``max_peers_per_ip`` / ``dial_backoff_*``, ``[storage]``).

Connection manager: real ``p2p.devnode`` peer processes dial the daemon (inbound, all from
127.0.0.1) and the daemon dials others (outbound): the per-IP cap holds the inbound ones at
3, the high water mark (4) trims to the low one (2), inbound first, and a failed dial is held
back by the dial backoff. Disk budget: a follower whose budget a new head would exceed stays at
its last head, logs ``storage.budget_exceeded`` naming the budget and keeps no partial copy;
restarted with room, it catches up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import NodeProcess

from node.rpc.client import RpcCallError

pytestmark = pytest.mark.integration

SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: cities
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
"""


def connected(node: NodeProcess) -> set[str]:
    return {p["peer_id"] for p in node.call("peers.list") if p["connected"]}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[NodeProcess]:
    n = NodeProcess(
        tmp_path / "hub",
        "hub",
        config={
            "ipfs": {"mode": "none"},
            "p2p": {
                "peers_high_water": 4,
                "peers_low_water": 2,
                "max_peers_per_ip": 3,
                "conn_grace_s": 1.0,
                "dial_backoff_base_s": 60.0,
                "discovery": False,
            },
        },
    )
    n.init()
    n.launch()
    try:
        n.wait_ready(120)
        yield n
    finally:
        n.stop()


def test_connection_manager_caps_per_ip_trims_to_low_water_and_backs_off(
    hub: NodeProcess,
) -> None:
    from p2p.devcluster import DevNode, wait_until

    addr = hub.call("node.status")["p2p"]["listen_addrs"][0]
    from coordinator.identity import DatasetId

    # A dataset the hub does not follow: the devnodes are only peers to it.
    did = DatasetId.new_seeded_ed25519(b"limits").as_did_str()

    async def scenario() -> None:
        nodes = [DevNode(i, bytes([0x60 + i]) * 32, did) for i in range(7)]
        try:
            await asyncio.gather(*(n.start() for n in nodes))
            await asyncio.wait_for(asyncio.gather(*(n.ready.wait() for n in nodes)), 90)
            # Five dial in from 127.0.0.1; the cap keeps three. Each dial itself succeeds (the
            # connection is made, then closed by the hub at once).
            for n in nodes[:5]:
                await n.send(f"connect {addr}")
                await wait_until(lambda n=n: bool(n.of("connected") or n.of("dial-failed")), 30)
            inbound = {n.peer_id for n in nodes[:5]}
            assert await wait_until(lambda: len(connected(hub) & inbound) == 3, 20), connected(hub)
            time.sleep(2)  # stays capped (a refused peer is not admitted later by itself)
            assert len(connected(hub) & inbound) == 3
            # Two outbound: 5 > 4 peers. Past the 1 s grace the hub trims to 2, inbound first.
            outbound = {nodes[5].peer_id, nodes[6].peer_id}
            for n in nodes[5:]:
                hub.call("peers.connect", multiaddr=n.addr)
            assert await wait_until(lambda: connected(hub) == outbound, 20), connected(hub)
            # Dial backoff: a peer that is gone is dialled once; the next dial is refused at
            # once, naming the backoff, instead of waiting for another timeout.
            gone = nodes[6]
            await gone.stop()
            assert await wait_until(lambda: gone.peer_id not in connected(hub), 20)
            with pytest.raises(RpcCallError):
                hub.call("peers.connect", multiaddr=gone.addr)
            t0 = time.monotonic()
            with pytest.raises(RpcCallError, match="dial backoff"):
                hub.call("peers.connect", multiaddr=gone.addr)
            assert time.monotonic() - t0 < 2
        finally:
            await asyncio.gather(*(n.stop() for n in nodes))

    asyncio.run(scenario())


def test_follow_over_the_disk_budget_pauses_and_resumes(tmp_path: Path) -> None:
    conf = {"ipfs": {"mode": "none"}, "p2p": {"discovery": False}}
    owner = NodeProcess(tmp_path / "owner", "owner", config=conf)
    follower = NodeProcess(
        tmp_path / "follower",
        "follower",
        config={**conf, "storage": {"max_bytes": 60_000, "min_free_bytes": 0}},
    )
    small = tmp_path / "small.csv"
    small.write_text("city,population\nA,1\nB,2\n")
    big = tmp_path / "big.csv"
    # ~400 KB of incompressible text: its Parquet part alone is far over the 60 KB budget.
    import random

    rng = random.Random(7)
    big.write_text(
        "city,population\n"
        + "".join(f"{rng.randbytes(12).hex()},{rng.randrange(10**9)}\n" for _ in range(12_000))
    )
    try:
        for n in (owner, follower):
            n.init()
            n.launch()
        for n in (owner, follower):
            n.wait_ready(120)
        did = owner.call("dataset.create", snapshot_yaml=SNAPSHOT)[0]["id"]
        owner.call("dataset.ingest", ref="cities", files=[str(small)])
        follower.call(
            "peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0]
        )
        follower.call("subscriptions.add", did=did)

        def head_of(node: NodeProcess) -> str:
            return str(next(r["head"] for r in node.call("dataset.list") if r["id"] == did))

        def accepted() -> str | None:
            rows = follower.call("subscriptions.list")
            return next((r["accepted_head"] for r in rows if r["did"] == did), None)

        first = head_of(owner)
        follower.wait_for("the first head", lambda: accepted() == first, 120)
        owner.call("dataset.ingest", ref="cities", files=[str(big)])
        second = head_of(owner)
        events = follower.wait_for(
            "storage.budget_exceeded",
            lambda: follower.call("node.events", kind="storage.budget_exceeded"),
            120,
        )
        data = events[0]["data"]
        assert data["head"] == second and "[storage] max_bytes" in data["budget"]
        assert data["needed_bytes"] > 60_000 > data["allowed_bytes"]
        # Paused at its last head: the stored copy is the first head, whole; nothing partial.
        time.sleep(3)
        assert accepted() == first and head_of(follower) == first
        datasets = follower.home / "datasets"
        assert not [p for p in datasets.iterdir() if p.name.startswith(".")]
        assert not list(datasets.glob("*/info/pull-cache"))
        # Only one event for that head, however often the follow retried.
        assert len(follower.call("node.events", kind="storage.budget_exceeded")) == 1
        # With room (budget raised, daemon restarted), the follow resumes and catches up.
        follower.stop()
        follower.config["storage"]["max_bytes"] = 0
        follower.init_config()
        follower.launch()
        follower.wait_ready(120)
        follower.call(
            "peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0]
        )
        follower.wait_for("the second head", lambda: accepted() == second, 120)
        assert head_of(follower) == second
    finally:
        for n in (owner, follower):
            n.stop()
