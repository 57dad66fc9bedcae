"""Two real daemons and a DataFusion derivative: an owner and a subscriber, each with its own
embedded IPFS node; no Spark anywhere.

The owner creates a root dataset and a derivative with ``engine: datafusion``, ingests and runs
``dataset transform`` (on its newest pinned DataFusion release); the subscriber, subscribed by
DID through the CLI (which goes to its daemon's RPC), pulls both through IPFS, replays the
transform and reaches "verified": the verification event records, per replayed block, the
engine and release that reproduced it, and the signed attestation names them. Then the owner
publishes a forged slice (the real transform's output with one column changed, hashes
consistent): the query has no version-sensitive construct, so the mismatch on every pinned
release is a real dispute. Every state is read over RPC.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    CITIES_SNAPSHOT,
    ROOT,
    NodeProcess,
    _cmdline,
    descendants,
    forge_next_step,
)
from netns import require_loopback_only

from coordinator.transform.engines import DATAFUSION_VERSIONS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

NEWEST = DATAFUSION_VERSIONS[0]
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
        engine: datafusion
        query: |
          SELECT op, event_time, city, population * 2 AS pop2
          FROM cities WHERE population > 100
"""
)
CSV1 = (
    "event_time,city,population\n"
    "2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,2000\n2020-01-03T00:00:00Z,C,30\n"
)
CSV2 = "event_time,city,population\n2020-01-04T00:00:00Z,D,4000\n2020-01-05T00:00:00Z,E,5\n"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, NodeProcess]]:
    require_loopback_only()
    procs = {n: NodeProcess(tmp_path / n, n) for n in ("owner", "sub")}
    try:
        for p in procs.values():
            p.init()
            p.launch()
        for p in procs.values():
            p.wait_ready()
        yield procs
    finally:
        # Both at once: a daemon's orderly stop waits ~10 s for its IPFS node.
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(NodeProcess.stop, procs.values()))


def _own(items: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [i for i in items if i["own"] and all(i.get(k) == v for k, v in match.items())]


def _engine_workers(node: NodeProcess) -> list[list[str]]:
    """Command lines of the daemon's descendants that run an engine (worker or JVM)."""
    assert node.proc is not None
    out = []
    for pid in descendants(node.proc.pid):
        cmd = _cmdline(pid)
        if b"engine.worker" in cmd or b"java" in cmd or b"pyspark" in cmd:
            out.append([a.decode() for a in cmd.split(b"\0") if a])
    return out


def test_subscriber_verifies_datafusion_derivative_then_disputes_forgery(
    nodes: dict[str, NodeProcess], tmp_path: Path
) -> None:
    owner, sub = nodes["owner"], nodes["sub"]
    st = owner.call("node.status")
    sub.call("peers.connect", multiaddr=st["p2p"]["listen_addrs"][0])

    # Owner: create, ingest, transform on DataFusion; publication and announcement are queued.
    csv = tmp_path / "c1.csv"
    csv.write_text(CSV1)
    ids, der_head = owner.create_and_transform(SNAPSHOTS, csv)
    root_id, der_id = ids["cities"], ids["big-cities"]
    # The owner's IPFS node started with its first publication ([ipfs] start = "lazy"); the
    # subscriber's starts with this connect.
    sub.call("ipfs.connect", multiaddr=owner.call("node.status")["ipfs"]["addresses"][0])

    # Subscriber: follows the derivative by DID through the CLI (its daemon's RPC).
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", "subscribe", der_id, "--home", str(sub.home), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert json.loads(proc.stdout)["did"] == der_id

    att = sub.wait_for(
        "own attestation of the derivative",
        lambda: _own(sub.call("attestations.list", did=der_id), head=der_head),
        timeout=300,
    )
    assert att[0]["verdict"] == "verified"
    assert (att[0]["engine"], att[0]["engine_version"]) == ("odf-node-datafusion", NEWEST)
    listed = {d["id"]: d for d in sub.call("dataset.list")}
    assert listed[der_id]["head"] == der_head
    assert listed[der_id]["verification"] == "verified"
    assert root_id in listed  # the input was pulled too
    verified = [
        e["data"]
        for e in sub.call("node.events", kind="verify.verified", limit=1000)
        if e["did"] == der_id and e["data"]["head"] == der_head
    ]
    assert verified and verified[-1]["blocks_replayed"] == 1
    assert [(x["block"], x["engine"], x["version"]) for x in verified[-1]["engines"]] == [
        (der_head, "datafusion", NEWEST)
    ]

    # The owner turns malicious: new input, then a forged derivative step.
    csv2 = tmp_path / "c2.csv"
    csv2.write_text(CSV2)
    owner.call("dataset.ingest", ref="cities", files=[str(csv2)])
    from node.engine_client import EngineClient
    from node.engine_router import datafusion_python

    python = str(datafusion_python(NEWEST))
    with EngineClient(engine="datafusion", python=python, idle_timeout=0) as engine:
        # D (E is filtered out)
        forged_head = forge_next_step(
            owner.home, "big-cities", tmp_path / "forge", engine, expect_rows=1
        )
    owner.call("dataset.publish", ref="big-cities")

    disputes = sub.wait_for(
        "own dispute of the forged block",
        lambda: _own(sub.call("disputes.list", did=der_id), block=forged_head),
        timeout=300,
    )
    assert disputes[0]["kind"] == "replay_mismatch"
    assert "logical_hash" in disputes[0]["detail"]
    listed = {d["id"]: d for d in sub.call("dataset.list")}
    assert listed[der_id]["verification"] == "failed"
    assert not _own(sub.call("attestations.list", did=der_id), head=forged_head)
    assert _own(sub.call("attestations.list", did=der_id), head=der_head)  # history stays

    # Only DataFusion workers ran: no Spark worker, no JVM, on either node.
    for node in (owner, sub):
        workers = _engine_workers(node)
        assert workers, f"{node.name}: no engine worker ran"
        for cmd in workers:
            assert "--engine" in cmd and cmd[cmd.index("--engine") + 1] == "datafusion", cmd
            assert not any("java" in a for a in cmd), cmd
