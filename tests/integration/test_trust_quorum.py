"""Trust by quorum on real daemons: an owner, two verifying attesters and a light node.

Four daemons on loopback (no IPFS: heads are pulled over the Simple Transfer Protocol). The
owner publishes a DataFusion derivative; the two attesters follow it with the default
``verify-all`` policy, replay it and attest it; the light node runs ``[pipeline] replay =
false`` with ``[trust] policy = "quorum"``, ``k = 2`` of the two attesters. Shared by the cases,
in order (a module fixture, so the daemons start once):

1. the light node trusts the head by ``quorum``, naming both attesters, serves it over the
   Simple Transfer Protocol and never starts an engine;
2. with one attester stopped (fewer attesters up than ``k``) a new honest head stays
   ``pending`` on the light node, which keeps serving the previous trusted head;
3. a forged head is replayed and disputed by the attester that is up (it can replay), and the
   light node records the trusted attester's dispute and never trusts the forged head; after a
   restart it still neither trusts it nor forgets the dispute.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    BIG_CITIES_DF_SNAPSHOTS,
    NodeProcess,
    _cmdline,
    descendants,
    forge_next_step,
)
from netns import require_loopback_only

from coordinator.transform.engines import DATAFUSION_VERSIONS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SNAPSHOTS = BIG_CITIES_DF_SNAPSHOTS
CSV1 = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n"
CSV2 = "event_time,city,population\n2020-01-03T00:00:00Z,C,3000\n"
CSV3 = "event_time,city,population\n2020-01-04T00:00:00Z,D,4000\n"
NO_IPFS: dict[str, dict[str, Any]] = {"ipfs": {"mode": "none"}}
PENDING_FOR_S = 8.0
"""How long the light node must keep a head short of its quorum pending (after the one attester
that is up attested it)."""


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("trust")
    names = ("owner", "att1", "att2")
    procs = {n: NodeProcess(base / n, n, config=NO_IPFS) for n in names}
    try:
        for p in procs.values():
            p.init()
            p.launch()
        for p in procs.values():
            p.wait_ready()
        attesters = [procs[n].call("node.status")["node_id"] for n in ("att1", "att2")]
        light = procs["light"] = NodeProcess(
            base / "light",
            "light",
            config={
                **NO_IPFS,
                "pipeline": {"replay": False},
                "trust": {"policy": "quorum", "k": 2, "trusted_attesters": attesters},
            },
        )
        light.init()
        light.launch()
        light.wait_ready()
        owner_addr = procs["owner"].call("node.status")["p2p"]["listen_addrs"][0]
        for n in ("att1", "att2", "light"):
            procs[n].call("peers.connect", multiaddr=owner_addr)
        yield {"procs": procs, "attesters": attesters, "base": base}
    finally:
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(NodeProcess.stop, procs.values()))


def _sub(node: NodeProcess, did: str) -> dict[str, Any] | None:
    rows = [r for r in node.call("subscriptions.list") if r["did"] == did]
    return rows[0] if rows else None


def _served_head(node: NodeProcess, did: str) -> str | None:
    """``refs/head`` of ``did`` over the node's Simple Transfer Protocol (None: 404)."""
    base = node.call("node.status")["http_url"]
    try:
        with urllib.request.urlopen(f"{base}/{did}/refs/head", timeout=10) as r:
            return str(r.read().decode())
    except urllib.error.HTTPError as e:
        assert e.code == 404
        return None


def _no_engine_ever(node: NodeProcess) -> None:
    """No engine worker or JVM among the node's processes, and its router never started one."""
    assert node.proc is not None
    for pid in descendants(node.proc.pid):
        cmd = _cmdline(pid)
        assert b"engine.worker" not in cmd and b"java" not in cmd, cmd
    engine = node.call("node.status")["engine"]
    assert engine["starts"] == 0 and not engine["running"], engine


def _head_events(node: NodeProcess, kind: str, did: str, head: str) -> list[dict[str, Any]]:
    return [
        e["data"]
        for e in node.call("node.events", kind=kind, limit=1000)
        if e["did"] == did and e["data"]["head"] == head
    ]


def test_light_node_trusts_by_quorum_and_never_starts_an_engine(
    net: dict[str, Any], tmp_path: Path
) -> None:
    procs, attesters = net["procs"], net["attesters"]
    owner, light = procs["owner"], procs["light"]
    csv = tmp_path / "c1.csv"
    csv.write_text(CSV1)
    ids, head = owner.create_and_transform(SNAPSHOTS, csv)
    net["did"] = did = ids["big-cities"]
    for n in ("att1", "att2", "light"):
        procs[n].call("subscriptions.add", did=did)

    row = light.wait_for(
        "trusted by quorum",
        lambda: (r := _sub(light, did)) and r["trusted_head"] == head and r,
        timeout=300,
    )
    assert row["accepted_head"] == head
    assert row["trust"]["state"] == "trusted" and row["trust"]["by"] == "quorum"
    assert sorted(row["trust"]["attesters"]) == sorted(attesters)
    # The light node checked integrity only: its own attestation is not a replay.
    own = [a for a in light.call("attestations.list", did=did) if a["own"]]
    assert own and own[0]["verdict"] == "integrity_only"
    trusted = _head_events(light, "head.trusted", did, head)
    assert [(e["by"], sorted(e["attesters"])) for e in trusted] == [("quorum", sorted(attesters))]
    assert _served_head(light, did) == head
    for n in ("att1", "att2"):  # the attesters replayed it (verify-all, today's behaviour)
        assert _sub(procs[n], did)["trust"] == {"state": "trusted", "by": "local", "attesters": []}
    _no_engine_ever(light)


def test_fewer_attesters_up_than_k_keeps_a_head_pending(
    net: dict[str, Any], tmp_path: Path
) -> None:
    procs, did = net["procs"], net["did"]
    owner, light, att1 = procs["owner"], procs["light"], procs["att1"]
    trusted_before = _sub(light, did)["trusted_head"]
    procs["att2"].stop()
    csv = tmp_path / "c2.csv"
    csv.write_text(CSV2)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])
    head = owner.call("dataset.transform", ref="big-cities")["new_head"]
    net["pending_head"] = head
    # att1 replays and attests the new head; it reaches the light node ...
    light.wait_for(
        "att1's attestation of the new head",
        lambda: any(
            a["head"] == head and a["signer"] == net["attesters"][0] and a["verdict"] == "verified"
            for a in light.call("attestations.list", did=did)
        ),
        timeout=300,
    )
    assert _sub(att1, did)["trust"]["state"] == "trusted"
    # ... and one of two is not a quorum: pending, for as long as we look.
    deadline = PENDING_FOR_S
    while deadline > 0:
        row = _sub(light, did)
        assert row["accepted_head"] == head
        assert row["trust"]["state"] == "pending", row
        assert row["trusted_head"] == trusted_before
        assert _served_head(light, did) == trusted_before  # the previous trusted head
        deadline -= 1.0
        time.sleep(1.0)
    assert not _head_events(light, "head.trusted", did, head)
    _no_engine_ever(light)


def test_forged_head_is_disputed_by_a_replaying_node_and_never_trusted_by_the_light_one(
    net: dict[str, Any], tmp_path: Path
) -> None:
    procs, did, attesters = net["procs"], net["did"], net["attesters"]
    owner, light, att1 = procs["owner"], procs["light"], procs["att1"]
    trusted_before = _sub(light, did)["trusted_head"]
    csv = tmp_path / "c3.csv"
    csv.write_text(CSV3)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])
    from node.engine_client import EngineClient
    from node.engine_router import datafusion_python

    python = str(datafusion_python(DATAFUSION_VERSIONS[0]))
    with EngineClient(engine="datafusion", python=python, idle_timeout=0) as engine:
        forged = forge_next_step(owner.home, "big-cities", tmp_path / "forge", engine)
    owner.call("dataset.publish", ref="big-cities")

    # The attester that can replay does, and disputes it.
    disputes = att1.wait_for(
        "att1's dispute of the forged head",
        lambda: [
            x for x in att1.call("disputes.list", did=did) if x["own"] and x["block"] == forged
        ],
        timeout=300,
    )
    assert disputes[0]["kind"] == "replay_mismatch"
    assert _sub(att1, did)["trust"]["state"] == "disputed"
    # The light node hears the trusted attester's dispute: disputed, never trusted.
    row = light.wait_for(
        "the light node's disputed state",
        lambda: (r := _sub(light, did)) and r["trust"]["state"] == "disputed" and r,
        timeout=120,
    )
    assert row["accepted_head"] == forged
    assert row["trust"]["disputed_by"] == [attesters[0]]
    assert row["trusted_head"] == trusted_before
    assert _served_head(light, did) == trusted_before
    distrusted = _head_events(light, "head.distrusted", did, forged)
    assert [e["disputer"] for e in distrusted] == [attesters[0]]
    assert not _head_events(light, "head.trusted", did, forged)
    _no_engine_ever(light)

    # A restart rebuilds the state: the dispute still stands, nothing is trusted again.
    light.stop()
    light.launch()
    light.wait_ready()
    row = _sub(light, did)
    assert row["trust"]["state"] == "disputed" and row["trusted_head"] == trusted_before
    assert _served_head(light, did) == trusted_before
    assert len(light.call("node.events", kind="head.trusted", limit=1000)) == 1
    _no_engine_ever(light)
