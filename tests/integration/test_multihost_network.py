"""Open-mode nodes on separate hosts of a private test network find each other.

Five lab hosts (``sim.netlab``, 10.77.0.0/24 inside the test's own namespaces): an owner, a
bootstrap-only node and three subscribers, each an ``odf-node run`` daemon in ``isolation =
"open"`` listening on its host address. Every node but the bootstrap is configured with the
bootstrap peer alone; nobody calls ``peers.connect`` or ``ipfs.connect``. The subscribers
subscribe to the owner's derivative over RPC, find the owner through the bootstrap node
(``/odf/providers/1.0.0``), connect their IPFS nodes to the owner's, pull, replay and attest;
the owner receives the attestations. Then one subscriber's link goes down, the owner appends
two heads, the link comes back, and that subscriber catches up and verifies them; no
subscriber pulls any block twice.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT
from multihost import HostNode, lab_network, open_config, stop_all
from netns import require_loopback_only

from node.home import NodeHome
from sim.netlab import SUBNET

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SNAPSHOTS = (
    CITIES_SNAPSHOT
    + """\
kind: DatasetSnapshot
version: 1
content:
  name: big-cities
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: spark
        queries:
          - alias: big
            query: SELECT * FROM cities WHERE population > 100
          - query: SELECT op, event_time, city, population * 2 AS pop2 FROM big
"""
)
CSV1 = (
    "event_time,city,population\n"
    "2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,2000\n2020-01-03T00:00:00Z,C,30\n"
)
CSV2 = "event_time,city,population\n2020-01-04T00:00:00Z,D,4000\n2020-01-05T00:00:00Z,E,5\n"
CSV3 = "event_time,city,population\n2020-01-06T00:00:00Z,F,6000\n"
BOOTSTRAP_PORT = 7375


def _peer_id(home: Path) -> str:
    """The libp2p peer id of a node home (as its gossip host derives it)."""
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    seed = NodeHome(home).node_key().seed()
    return str(ID.from_pubkey(create_new_key_pair(seed).public_key))


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HostNode]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("multihost")
    with lab_network(5) as lab:
        names = ["owner", "boot", "sub1", "sub2", "sub3"]
        nodes: dict[str, HostNode] = {}
        boot_home = base / "boot"
        try:
            boot = HostNode(lab, 2, boot_home, "boot")
            boot.config.update(open_config(boot.address))
            boot.config["p2p"]["port"] = BOOTSTRAP_PORT
            # A bootstrap-only node: no IPFS node, no HTTP surface, follows nothing.
            boot.config["ipfs"] = {"mode": "none"}
            boot.config["http"] = {"enabled": False}
            boot.init()
            bootstrap = f"/ip4/{boot.address}/tcp/{BOOTSTRAP_PORT}/p2p/{_peer_id(boot_home)}"
            nodes["boot"] = boot
            for k, name in enumerate(names, start=1):
                if name == "boot":
                    continue
                n = HostNode(lab, k, base / name, name)
                n.config.update(open_config(n.address, [bootstrap]))
                n.init()
                nodes[name] = n
            for n in nodes.values():
                n.launch()
            for n in nodes.values():
                n.wait_ready()
            yield nodes
        finally:
            stop_all(list(nodes.values()))


def _own(items: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [i for i in items if i["own"] and all(i.get(k) == v for k, v in match.items())]


def _idle(node: HostNode) -> bool:
    return not node.call("work.list", state="pending") and not node.call(
        "work.list", state="claimed"
    )


def _append(owner: HostNode, csv: Path, text: str) -> str:
    csv.write_text(text)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])
    head: str = owner.call("dataset.transform", ref="big-cities")["new_head"]
    owner.wait_for("publication", lambda: _idle(owner))
    return head


def test_subscribers_find_the_owner_through_the_bootstrap_node(
    network: dict[str, HostNode], tmp_path: Path
) -> None:
    owner, boot = network["owner"], network["boot"]
    subs = [network["sub1"], network["sub2"], network["sub3"]]
    # Every node listens on its own host address (open mode), not on loopback.
    for n in network.values():
        st = n.call("node.status")
        assert st["p2p"]["listen_addrs"][0].startswith(f"/ip4/{n.address}/tcp/")

    created = owner.call("dataset.create", snapshot_yaml=SNAPSHOTS)
    ids = {c["alias"]: c["id"] for c in created}
    root_id, der_id = ids["cities"], ids["big-cities"]
    head1 = _append(owner, tmp_path / "c1.csv", CSV1)
    assert not owner.call("work.list", state="failed")

    started = {}
    for s in subs:
        started[s.name] = time.monotonic()
        assert s.call("subscriptions.add", did=der_id)["did"] == der_id
    took = {}
    for s in subs:
        att = s.wait_for(
            "own attestation of the derivative",
            lambda s=s: _own(s.call("attestations.list", did=der_id), head=head1),
            timeout=300,
            every=0.2,
        )
        took[s.name] = time.monotonic() - started[s.name]
        assert att[0]["verdict"] == "verified"
        listed = {d["id"]: d for d in s.call("dataset.list")}
        assert listed[der_id]["head"] == head1 and root_id in listed
    print(
        f"subscribe -> own attestation (s): {took}, median {statistics.median(took.values()):.1f}"
    )
    # The owner receives every subscriber's attestation over gossip.
    sub_ids = {s.call("node.status")["node_id"] for s in subs}
    owner.wait_for(
        "the subscribers' attestations at the owner",
        lambda: (
            sub_ids
            <= {
                a["signer"]
                for a in owner.call("attestations.list", did=der_id)
                if not a["own"] and a["head"] == head1
            }
        ),
        timeout=120,
    )
    # Nobody was told where anyone is but the bootstrap node: no manual connect happened, and
    # the subscribers' gossip and IPFS nodes reached the owner (found through discovery).
    owner_peer = owner.call("node.status")["p2p"]["peer_id"]
    owner_ipfs = owner.call("node.status")["ipfs"]["peer_id"]
    for n in network.values():
        assert not n.call("node.events", kind="ipfs.connect", limit=100)
    for s in subs:
        peers = {p["peer_id"] for p in s.call("peers.list") if p["connected"]}
        assert owner_peer in peers
        pulls = [e for e in s.call("node.events", kind="pull.ok", limit=1000) if e["did"] == der_id]
        assert pulls and pulls[0]["data"]["url"].startswith("ipfs://"), pulls
    assert owner_ipfs
    # Their IPFS nodes started on first use (the owner's publication, the subscribers' connects
    # to it) and listen on their host addresses too.
    for n in (owner, *subs):
        ipfs = n.call("node.status")["ipfs"]["addresses"]
        assert ipfs and all(a.startswith(f"/ip4/{n.address}/tcp/") for a in ipfs), ipfs

    # Partition sub3, append two heads, heal: sub3 catches up and verifies both.
    late = subs[2]
    late_peer = late.call("node.status")["p2p"]["peer_id"]
    boot.lab.link_down(late.host)
    head2 = _append(owner, tmp_path / "c2.csv", CSV2)
    head3 = _append(owner, tmp_path / "c3.csv", CSV3)
    # The cut-off subscriber heard nothing of them; the others did.
    subs[0].wait_for(
        "a connected subscriber to accept the newest head",
        lambda: {d["id"]: d for d in subs[0].call("dataset.list")}[der_id]["head"] == head3,
        timeout=120,
    )
    seen = time.monotonic()  # every node forwarded head3 when it first got it, before this
    assert {d["id"]: d for d in late.call("dataset.list")}[der_id]["head"] == head1
    # The outage outlasts the connection: the owner's gossip to sub3 went unanswered and the
    # lab's hosts give a connection up after ~3 s of that, so what was sent is lost with it.
    owner.wait_for(
        "the owner to lose its connection to the partitioned subscriber",
        lambda: not any(
            p["connected"] for p in owner.call("peers.list") if p["peer_id"] == late_peer
        ),
        timeout=120,
    )
    # ... and gossipsub's caches: a message is offered to (re)subscribing peers for 3
    # heartbeats of 1 s and kept 5 s (docs/libp2p.md, "Gossipsub settings"). After the heal,
    # only anti-entropy can bring the two heads back.
    time.sleep(max(0.0, seen + 10.0 - time.monotonic()))
    boot.lab.link_up(late.host)
    healed = time.monotonic()
    late.wait_for(
        "the partitioned subscriber to catch up",
        lambda: _own(late.call("attestations.list", did=der_id), head=head3),
        timeout=300,
        every=0.2,
    )
    print(f"heal -> attestation of the newest head: {time.monotonic() - healed:.1f} s")
    # Anti-entropy, not gossip, brought the newest head back (gossip had dropped it).
    repaired = [
        e["data"]["head"]
        for e in late.call("node.events", kind="head.repaired", limit=1000)
        if e["did"] == der_id
    ]
    assert head3 in repaired, repaired
    listed = {d["id"]: d for d in late.call("dataset.list")}
    assert listed[der_id]["head"] == head3
    assert listed[der_id]["verification"] == "verified"
    log = late.call("dataset.log", ref=der_id)
    hashes = [b["hash"] for b in (log if isinstance(log, list) else log["blocks"])]
    assert head2 in hashes and head3 in hashes
    verified = {
        e["data"]["head"]: e["data"]
        for e in late.call("node.events", kind="verify.verified", limit=1000)
        if e["did"] == der_id
    }
    assert head3 in verified, verified
    # Both new heads are verified: each on its own (gossip brought both), or the verification
    # of the newest replayed every transform block of the chain, head2's included
    # (anti-entropy hands over only the newest head).
    transforms = sum(
        1
        for b in (log if isinstance(log, list) else log["blocks"])
        if b["block"]["event"]["kind"] == "ExecuteTransform"
    )
    assert transforms >= 3
    assert head2 in verified or verified[head3]["blocks_replayed"] == transforms, verified
    for s in subs[:2]:
        s.wait_for(
            "attestation of the newest head",
            lambda s=s: _own(s.call("attestations.list", did=der_id), head=head3),
            timeout=300,
        )

    # Restart a host's node: the bootstrap node comes back with the same key and port, and
    # every other node redials it (its bootstrap peer).
    restarted = time.monotonic()
    boot.stop()
    boot.launch()
    boot.wait_ready()
    boot.wait_for(
        "the other nodes to reconnect to the restarted bootstrap node",
        lambda: boot.call("node.status")["p2p"]["peers"] >= 4,
        timeout=120,
    )
    print(f"bootstrap restart -> 4 peers back: {time.monotonic() - restarted:.1f} s")

    # No subscriber pulled any block twice: every pull that fetched blocks moved the head to
    # a head no earlier pull had reached.
    for s in subs:
        moved = [
            e["data"]["new_head"]
            for e in s.call("node.events", kind="pull.ok", limit=1000)
            if e["did"] == der_id and e["data"]["new_blocks"]
        ]
        assert len(moved) == len(set(moved)), (s.name, moved)


def test_kamu_clients_pull_from_a_node_on_another_host(
    network: dict[str, HostNode], tmp_path: Path
) -> None:
    """The owner's HTTP surface on its host address serves a Simple Transfer Protocol client on
    another host: this project's own pull (the CLI, no daemon) and a plain GET walk."""
    owner = network["owner"]
    lab = owner.lab
    http = owner.call("node.status")["http_url"]
    assert http.startswith(f"http://{owner.address}:")
    listed = {d["alias"]: d for d in owner.call("dataset.list")}
    der = listed["big-cities"]
    owner_blocks = [b["hash"] for b in owner.call("dataset.log", ref="big-cities", limit=1000)]
    assert owner_blocks[0] == der["head"]  # newest first

    # This project's pull, on host 4, from a fresh home in open mode (the test subnet allowed).
    home = tmp_path / "client"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")},
        "ODF_NODE_NETWORK_ISOLATION": "open",
        "ODF_NODE_TRANSFER_ALLOWED_SOURCE_NETWORKS": str(SUBNET),
    }
    cli = [sys.executable, "-m", "node.cli"]
    init = lab.run(4, [*cli, "init", "--home", str(home)], env=env, cwd=ROOT)
    assert init.returncode == 0, init.stderr
    url = f"{http}/{der['id']}"
    pulled = lab.run(
        4,
        [*cli, "dataset", "pull", url, "--as", "copy", "--home", str(home), "--json"],
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert json.loads(pulled.stdout)["new_head"] == der["head"]
    # A plain GET walk on host 5, by alias as `kamu pull http://host:port/<alias>` addresses it.
    for ref, ds in (("big-cities", der), ("cities", listed["cities"])):
        walked = lab.run(5, [sys.executable, "tests/stp_walk.py", f"{http}/{ref}"], cwd=ROOT)
        assert walked.returncode == 0, walked.stderr
        summary = json.loads(walked.stdout)
        assert summary["head"] == ds["head"]
        assert summary["objects"] >= 1
        if ref == "big-cities":
            assert summary["blocks"] == owner_blocks
