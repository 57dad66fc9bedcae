"""Node key rotation across three real daemons (docs/operations.md, "Node key rotation").

An owner publishes a DataFusion derivative; an attester (``verify-all``) replays and attests
each head; a light node (``quorum``, k = 1, no replay) lists the attester's *original* node id
as its only trusted attester. The attester is stopped, rotates its key (``odf-node key
rotate``) and starts again: its rotation record reaches both other nodes, the owner moves its
peer score to the new peer id, and for the next head the owner hears the attestation signed by
the new key and shows both the old and the new attestation under the new id, while the light
node trusts the head by a quorum naming the new id (its config still names the old one).

Then a thief copies the attester's new key (not ``keys/next.key``), rotates it to a key of its
own and runs a daemon that gossips that record: both nodes refuse it (pre-rotation). The
attester rotates to the key it committed to and revokes the stolen key; both nodes accept.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import BIG_CITIES_DF_SNAPSHOTS, ROOT, NodeProcess

from node.home import NodeHome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SNAPSHOTS = BIG_CITIES_DF_SNAPSHOTS
CSV1 = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n"
CSV2 = "event_time,city,population\n2020-01-03T00:00:00Z,C,3000\n"

BASE = {"ipfs": {"mode": "none"}, "p2p": {"discovery": False}}


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[NodeProcess, NodeProcess, NodeProcess]]:
    owner = NodeProcess(tmp_path / "owner", "owner", config=BASE)
    attester = NodeProcess(tmp_path / "attester", "attester", config=BASE)
    attester.init()
    old_id = NodeHome(attester.home).node_key().dataset_id().as_did_key()
    light = NodeProcess(
        tmp_path / "light",
        "light",
        config={
            **BASE,
            "pipeline": {"replay": False},
            "trust": {"policy": "quorum", "k": 1, "trusted_attesters": [old_id]},
        },
    )
    owner.init()
    light.init()
    try:
        for n in (owner, attester, light):
            n.launch()
        for n in (owner, attester, light):
            n.wait_ready(120)
        yield owner, attester, light
    finally:
        for n in (owner, attester, light):
            n.stop()


def _addr(n: NodeProcess) -> str:
    return str(n.call("node.status")["p2p"]["listen_addrs"][0])


def _trust(light: NodeProcess, did: str) -> dict[str, Any]:
    row = next(r for r in light.call("subscriptions.list") if r["did"] == did)
    return dict(row["trust"] or {}) | {"accepted_head": row["accepted_head"]}


def test_rotated_attester_keeps_its_identity_across_three_daemons(
    nodes: tuple[NodeProcess, NodeProcess, NodeProcess], tmp_path: Path
) -> None:
    owner, attester, light = nodes
    old_id = NodeHome(attester.home).node_key().dataset_id().as_did_key()
    csv1, csv2 = tmp_path / "1.csv", tmp_path / "2.csv"
    csv1.write_text(CSV1)
    csv2.write_text(CSV2)
    dids, _ = owner.create_and_transform(SNAPSHOTS, csv1)
    did = dids["big-cities"]
    attester.call("peers.connect", multiaddr=_addr(owner))
    light.call("peers.connect", multiaddr=_addr(owner))
    light.call("peers.connect", multiaddr=_addr(attester))
    attester.call("subscriptions.add", did=did)
    light.call("subscriptions.add", did=did)

    def head(n: NodeProcess) -> str:
        return str(next(r["head"] for r in n.call("dataset.list") if r["id"] == did))

    # Head 1, replayed and attested by the original key: trusted by the light node's quorum
    # naming the old id.
    head1 = head(owner)
    t1 = light.wait_for(
        "head 1 trusted",
        lambda: (
            (t := _trust(light, did)).get("state") == "trusted"
            and t["accepted_head"] == head1
            and t
        ),
        180,
    )
    assert t1["by"] == "quorum" and t1["attesters"] == [old_id]
    owner.wait_for(
        "the attestation of head 1",
        lambda: [a for a in owner.call("attestations.list", did=did) if a["head"] == head1],
        120,
    )
    old_peer = attester.call("node.status")["p2p"]["peer_id"]
    owner.wait_for(
        "the attester's score",
        lambda: any(p["peer_id"] == old_peer and p["score"] > 0 for p in owner.call("peers.list")),
        60,
    )

    # Rotate (daemon stopped), start again, reconnect: the record is gossiped on connection.
    attester.stop()
    out = subprocess.run(
        [sys.executable, "-m", "node.cli", "key", "rotate", "--home", str(attester.home), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rotated = json.loads(out.stdout)
    new_id, new_peer = rotated["new_id"], rotated["new_peer_id"]
    assert rotated["old_id"] == old_id and rotated["old_peer_id"] == old_peer
    attester.launch()
    attester.wait_ready(120)
    assert attester.call("node.status")["p2p"]["peer_id"] == new_peer
    attester.call("peers.connect", multiaddr=_addr(owner))
    light.call("peers.connect", multiaddr=_addr(attester))
    for n in (owner, light):
        events = n.wait_for(
            "the rotation record",
            lambda n=n: n.call("node.events", kind="node.key_rotated"),
            60,
        )
        assert events[0]["data"]["old"] == old_id and events[0]["data"]["new"] == new_id
    # The owner moved the attester's score to its new peer id.
    owner.wait_for(
        "the moved score",
        lambda: any(p["peer_id"] == new_peer and p["score"] > 0 for p in owner.call("peers.list")),
        60,
    )

    # Head 2, attested by the new key: the owner hears it and counts both under the new id; the
    # light node, whose config still names the old id, trusts it by quorum [new id].
    owner.call("dataset.ingest", ref="cities", files=[str(csv2)])
    head2 = str(owner.call("dataset.transform", ref="big-cities")["new_head"])
    assert head(owner) == head2
    rows = owner.wait_for(
        "the attestation of head 2",
        lambda: (
            (r := owner.call("attestations.list", did=did))
            and any(a["head"] == head2 and a["signer"] == new_id for a in r)
            and r
        ),
        180,
    )
    # (The light node attests too, integrity only, under its own id.)
    mine = [a for a in rows if a["signer"] in (old_id, new_id)]
    assert {(a["head"], a["signer"]) for a in mine} == {(head1, old_id), (head2, new_id)}
    assert {a["node"] for a in mine} == {new_id}
    t2 = light.wait_for(
        "head 2 trusted",
        lambda: (
            (t := _trust(light, did)).get("state") == "trusted"
            and t["accepted_head"] == head2
            and t
        ),
        180,
    )
    assert t2["by"] == "quorum" and t2["attesters"] == [new_id]

    # A thief copies the attester's current node key (not keys/next.key), rotates it to a key
    # of its own on a home of its own and runs a daemon there, which gossips that record:
    # the owner and the light node refuse it (the key committed to another next key).
    thief = NodeProcess(tmp_path / "thief", "thief", config=BASE)
    thief.init()
    shutil.copyfile(attester.home / "keys" / "node.key", thief.home / "keys" / "node.key")
    stolen = _cli("key", "rotate", "--home", str(thief.home), "--json")
    assert stolen["old_id"] == new_id
    thief_id = stolen["new_id"]
    try:
        thief.launch()
        thief.wait_ready(120)
        for n in (owner, light):
            n.call("peers.connect", multiaddr=_addr(thief))
        for n in (owner, light):
            n.wait_for(
                "the thief's rotation refused",
                lambda n=n: f"key rotation {new_id} -> {thief_id} refused" in n.tail(200_000),
                60,
            )
            assert [e["data"]["new"] for e in n.call("node.events", kind="node.key_rotated")] == [
                new_id
            ]
    finally:
        thief.stop()

    # The owner rotates to the key it committed to and revokes the stolen key (signed by that
    # committed key): both count at the owner and the light node.
    attester.stop()
    recovered = _cli("key", "rotate", "--home", str(attester.home), "--json")
    assert recovered["old_id"] == new_id and recovered["new_id"] != thief_id
    _cli("key", "revoke", new_id, "--home", str(attester.home), "--json")
    attester.launch()
    attester.wait_ready(120)
    attester.call("peers.connect", multiaddr=_addr(owner))
    light.call("peers.connect", multiaddr=_addr(attester))
    for n in (owner, light):
        n.wait_for(
            "the owner's rotation after the theft",
            lambda n=n: any(
                e["data"]["new"] == recovered["new_id"]
                for e in n.call("node.events", kind="node.key_rotated")
            ),
            60,
        )
        n.wait_for(
            "the revocation of the stolen key",
            lambda n=n: any(
                e["data"]["node"] == new_id for e in n.call("node.events", kind="node.key_revoked")
            ),
            60,
        )


def _cli(*args: str) -> dict[str, Any]:
    """``odf-node <args>`` (with ``--json``), its output parsed."""
    out = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout))
