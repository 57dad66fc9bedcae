"""A light node answers ``/query`` from a head it trusts by quorum, and ``include:
["Attestations"]`` carries the attesters' envelopes (issue 40's acceptance; ``docs/query.md``).

Four daemons on loopback (no IPFS; heads pulled over the Simple Transfer Protocol, attestations
gossiped): the owner of ``cities`` and its DataFusion derivative ``big-cities``; two attesters
that follow the derivative with the default policy, replay it and attest its head; a light node
with ``[pipeline] replay = false`` and ``[trust] policy = "quorum"``, ``k = 2`` of the two
attesters. Once the light node trusts the head by quorum, its ``/query`` reads that head, its
answer's proof verifies at an attester's ``/verify``, and ``include: ["Attestations"]`` holds
both attesters' signed attestations of the head (sealed by the light node, theirs inside),
which ``odf-node attestation verify`` accepts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import BIG_CITIES_DF_SNAPSHOTS, ROOT, NodeProcess
from netns import require_loopback_only

from node.app.query_proofs import check_commitment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CSV = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n"
NO_IPFS: dict[str, dict[str, Any]] = {
    "ipfs": {"mode": "none"},
    "query": {"flight_sql_enabled": False},
}


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("quorum-query")
    procs = {n: NodeProcess(base / n, n, config=NO_IPFS) for n in ("owner", "att1", "att2")}
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
        owner = procs["owner"]
        owner_addr = owner.call("node.status")["p2p"]["listen_addrs"][0]
        for n in ("att1", "att2", "light"):
            procs[n].call("peers.connect", multiaddr=owner_addr)
        csv = base / "c.csv"
        csv.write_text(CSV)
        # A derivative: the light node cannot replay it, so only the attesters' quorum can make
        # its head trusted there (a root dataset's integrity check trusts it locally).
        ids, head = owner.create_and_transform(BIG_CITIES_DF_SNAPSHOTS, csv)
        did = ids["big-cities"]
        for n in ("att1", "att2", "light"):
            procs[n].call("subscriptions.add", did=did)
        light.wait_for(
            "trusted by quorum",
            lambda: next(
                (
                    r
                    for r in light.call("subscriptions.list")
                    if r["did"] == did and r["trusted_head"] == head
                ),
                None,
            ),
            timeout=300,
        )
        yield {"procs": procs, "attesters": attesters, "did": did, "head": head}
    finally:
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(NodeProcess.stop, procs.values()))


def post(url: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_light_node_answers_from_its_quorum_trusted_head(
    net: dict[str, Any], tmp_path: Path
) -> None:
    procs, did, head = net["procs"], net["did"], net["head"]
    light = procs["light"]
    [sub] = [r for r in light.call("subscriptions.list") if r["did"] == did]
    assert sub["trust"]["state"] == "trusted" and sub["trust"]["by"] == "quorum", sub
    url = light.call("node.status")["http_url"]
    query = f'select city, pop2 from "{did}" order by city'
    status, answer = post(url + "/query", {"query": query, "include": ["Proof", "Attestations"]})
    assert status == 200, answer
    assert answer["output"]["data"] == [{"city": "A", "pop2": 2000}]
    [pinned] = answer["input"]["datasets"]
    assert (pinned["id"], pinned["blockHash"]) == (did, head)
    request = {k: v for k, v in answer.items() if k not in ("output", "attestations")}
    assert check_commitment(request) is None
    # An attester that replayed the head itself reproduces the light node's answer.
    att_url = procs["att1"].call("node.status")["http_url"]
    assert post(att_url + "/verify", request) == (200, {"ok": True})

    [entry] = answer["attestations"]
    assert (entry["id"], entry["blockHash"]) == (did, head)
    export = tmp_path / "envelopes.json"
    export.write_text(json.dumps(entry["envelopes"]))
    # On the light node's home: the CLI needs a node home (the default one need not exist on
    # the machine running the tests; the check itself reads nothing of it).
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "node.cli",
            "attestation",
            "verify",
            str(export),
            "--json",
            "--home",
            str(light.home),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    checked = json.loads(p.stdout)
    assert all(v["ok"] and v["block"] == head for v in checked), checked
    # Both attesters' own signed verdicts are there, beside the light node's integrity check.
    signers = {v["node"] for v in checked}
    assert set(net["attesters"]) <= signers, (signers, net["attesters"])
