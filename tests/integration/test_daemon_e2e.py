"""Three real daemons: an owner and two subscribers, each with its own embedded IPFS node and Spark.

The owner creates a root dataset and a derivative, ingests and transforms; the subscribers,
subscribed over RPC, pull through IPFS (bitswap from the owner's node), verify by replay,
republish and attest. Then the owner publishes a forged derivative slice (hashes consistent,
data not what the query yields): both subscribers gossip disputes. One subscriber is SIGKILLed
in the middle of that verification and, restarted, finishes it. Every state is read over RPC.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import CITIES_SNAPSHOT, NodeProcess, forge_next_step
from netns import require_loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

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


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, NodeProcess]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("e2e")
    procs = {n: NodeProcess(base / n, n) for n in ("owner", "sub1", "sub2")}
    try:
        for p in procs.values():
            p.init()
            p.launch()
        for p in procs.values():
            p.wait_ready()
        yield procs
    finally:
        for p in procs.values():
            p.stop()


def _own(items: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [i for i in items if i["own"] and all(i.get(k) == v for k, v in match.items())]


def test_owner_subscribers_attest_then_dispute_forgery(
    nodes: dict[str, NodeProcess], tmp_path: Path
) -> None:
    owner, sub1, sub2 = nodes["owner"], nodes["sub1"], nodes["sub2"]
    st = owner.call("node.status")
    for s in (sub1, sub2):
        s.call("peers.connect", multiaddr=st["p2p"]["listen_addrs"][0])
    sub2.call("peers.connect", multiaddr=sub1.call("node.status")["p2p"]["listen_addrs"][0])

    # Owner: create, ingest, transform; publication and announcement are queued automatically.
    csv = tmp_path / "c1.csv"
    csv.write_text(CSV1)
    ids, der_head = owner.create_and_transform(SNAPSHOTS, csv)
    root_id, der_id = ids["cities"], ids["big-cities"]
    # The owner's IPFS node started with its first publication ([ipfs] start = "lazy"); each
    # subscriber's starts with this connect.
    ipfs_addr = owner.call("node.status")["ipfs"]["addresses"][0]
    for s in (sub1, sub2):
        s.call("ipfs.connect", multiaddr=ipfs_addr)

    # Subscribers follow the derivative only; its input is pulled recursively.
    for s in (sub1, sub2):
        sub = s.call("subscriptions.add", did=der_id)
        assert sub["did"] == der_id
    for s in (sub1, sub2):
        att = s.wait_for(
            "own attestation of the derivative",
            lambda s=s: _own(s.call("attestations.list", did=der_id), head=der_head),
            timeout=420,
        )
        assert att[0]["verdict"] == "verified"
        listed = {d["id"]: d for d in s.call("dataset.list")}
        assert listed[der_id]["head"] == der_head  # heads equal to the owner's
        assert listed[der_id]["verification"] == "verified"
        assert root_id in listed  # the input was pulled too
        subs = {x["did"]: x for x in s.call("subscriptions.list")}
        assert subs[der_id]["accepted_head"] == der_head
    # Each subscriber also hears the other's attestation over gossip.
    sub1_node = sub1.call("node.status")["node_id"]
    sub2.wait_for(
        "sub1's attestation via gossip",
        lambda: [
            a
            for a in sub2.call("attestations.list", did=der_id)
            if not a["own"] and a["signer"] == sub1_node
        ],
        timeout=120,
    )
    # Republished: each subscriber added the verified dataset to its own IPFS node and got the
    # owner's root CID (publication is deterministic, so the data stays addressable).
    announced = [
        e["data"]["cids"]
        for e in owner.call("node.events", kind="announce", limit=1000)
        if e["did"] == der_id and e["data"]["head"] == der_head
    ]
    for s in (sub1, sub2):
        republished = [
            e["data"]["cid"]
            for e in s.call("node.events", kind="republish", limit=1000)
            if e["did"] == der_id and e["data"]["head"] == der_head
        ]
        assert republished and [republished[-1]] == announced[-1]

    # The owner turns malicious: new input, then a forged derivative step.
    csv2 = tmp_path / "c2.csv"
    csv2.write_text(CSV2)
    owner.call("dataset.ingest", ref="cities", files=[str(csv2)])
    from node.engine_client import EngineClient

    with EngineClient(master="local[1]", idle_timeout=0) as engine:
        forged_head = forge_next_step(owner.home, "big-cities", tmp_path / "forge", engine)
    owner.call("dataset.publish", ref="big-cities")

    # Kill sub1 in the middle of verifying the forged head.
    def verifying() -> bool:
        return any(
            e["did"] == der_id and e["data"].get("head") == forged_head
            for e in sub1.call("node.events", kind="verify.start", limit=1000)
        )

    sub1.wait_for("verification of the forged head to start", verifying, timeout=300, every=0.05)
    sub1.kill()
    killed_at = time.time_ns()
    sub1.launch()
    sub1.wait_ready()

    for s in (sub1, sub2):
        disputes = s.wait_for(
            "own dispute of the forged block",
            lambda s=s: _own(s.call("disputes.list", did=der_id), block=forged_head),
            timeout=420,
        )
        assert disputes[0]["kind"] == "replay_mismatch"
        assert "logical_hash" in disputes[0]["detail"] or "physical_hash" in disputes[0]["detail"]
        listed = {d["id"]: d for d in s.call("dataset.list")}
        assert listed[der_id]["verification"] == "failed"
    # sub1's dispute was made after the restart, by resuming the interrupted work item.
    d1 = _own(sub1.call("disputes.list", did=der_id), block=forged_head)[0]
    assert d1["at_ns"] > killed_at
    events = sub1.call("node.events", limit=1000)
    starts = [e["id"] for e in events if e["kind"] == "daemon.start"]
    assert len(starts) == 2
    interrupted = [
        e
        for e in events
        if e["kind"].startswith("verify.") and e["did"] == der_id and e["id"] < starts[1]
    ]
    # Before the kill the forged head's verification had started and not finished.
    assert interrupted[-1]["kind"] == "verify.start"
    assert interrupted[-1]["data"]["head"] == forged_head
    # Both subscribers hear each other's disputes, and the honest history stays attested.
    sub2.wait_for(
        "sub1's dispute via gossip",
        lambda: [d for d in sub2.call("disputes.list", did=der_id) if not d["own"]],
        timeout=120,
    )
    assert _own(sub2.call("attestations.list", did=der_id), head=der_head)

    # Metrics reflect the work (Prometheus text on the HTTP surface).
    import urllib.request

    http = sub2.call("node.status")["http_url"]
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert 'odf_verifications_total{outcome="verified"}' in text
    assert 'odf_verifications_total{outcome="failed"}' in text
