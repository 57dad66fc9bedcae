"""Owners behind NAT with no port forwarding are verified by a subscriber that knows only the
bootstrap node (issue 32, item 1; docs/nat.md).

Lab (``sim.netlab``): a public bootstrap node offering a circuit relay (``[p2p] relay_service``,
host 1), a public subscriber configured with the bootstrap peer alone (host 2), an owner behind
an endpoint-independent NAT (host 3) and an owner behind a symmetric NAT (host 4), each owner
configured as the README's open-network section reads (listeners on its own, private, address;
no ``advertise_host``, no forwarding). Each owner's AutoNAT check says ``private``, it reserves a
slot on the bootstrap node's relay and advertises its relayed address; the subscriber finds it
through the bootstrap node, dials it through the relay, and pulls over ``/odf/stp/1.0.0``
streams of that connection (the owner's IPFS and HTTP addresses are private, unreachable and,
for HTTP, refused by the subscriber's source policy; the nodes run no IPFS node here), replays
the derivative and attests it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import CITIES_SNAPSHOT
from multihost import HostNode, open_config, peer_id_of, relay_bootstrap, stop_all
from netns import require_loopback_only

from sim.netlab import Nat, NetLab

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SUB_PORT = 7376
DERIVATIVE = (
    CITIES_SNAPSHOT
    + (Path(__file__).resolve().parents[2] / "examples" / "big-cities-datafusion.yaml").read_text()
)
CSV = (
    "event_time,city,population\n"
    "2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,2000\n2020-01-03T00:00:00Z,C,30\n"
)


@pytest.fixture(scope="module")
def lab_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HostNode]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("nat")
    lab = NetLab(2, [Nat("eim", hosts=2), Nat("symmetric")])
    lab.start()
    nodes: dict[str, HostNode] = {}
    try:
        boot, bootstrap = relay_bootstrap(lab, base / "boot")
        nodes["boot"] = boot
        for k, name in ((2, "sub"), (3, "owner-eim"), (5, "owner-sym"), (4, "lonely")):
            n = HostNode(lab, k, base / name, name)
            peers = [bootstrap]
            if name == "lonely":  # behind the first NAT, knowing only the subscriber (no relay)
                peers = [f"/ip4/{lab.address(2)}/tcp/{SUB_PORT}/p2p/{peer_id_of(base / 'sub')}"]
            n.config.update(open_config(n.address, peers))
            if name == "sub":
                n.config["p2p"]["port"] = SUB_PORT
            n.config["p2p"]["reachability_interval_s"] = 5.0
            # No IPFS node: an owner's would be as unreachable as its HTTP surface (docs/nat.md),
            # and the data path under test is the libp2p streams of the relayed connection.
            n.config["ipfs"] = {"mode": "none"}
            n.init()
            nodes[name] = n
        # The bootstrap node first: a node whose first dial fails redials with backoff, and
        # reserves its relay slot only once connected.
        boot.launch()
        boot.wait_ready()
        for n in nodes.values():
            if n is not boot:
                n.launch()
        for n in nodes.values():
            n.wait_ready()
        yield nodes
    finally:
        stop_all(list(nodes.values()))
        lab.close()


def _reach(node: HostNode) -> dict[str, Any]:
    r: dict[str, Any] = node.call("node.status")["p2p"]["reachability"] or {}
    return r


@pytest.mark.parametrize("owner_name", ["owner-eim", "owner-sym"])
def test_a_subscriber_verifies_a_derivative_of_an_owner_behind_nat(
    lab_nodes: dict[str, HostNode], owner_name: str, tmp_path: Path
) -> None:
    owner, sub, boot = lab_nodes[owner_name], lab_nodes["sub"], lab_nodes["boot"]
    assert owner.lab.nat_of(owner.host) is not None
    # The owner finds out it is behind NAT and reserves a slot on the bootstrap node's relay.
    reach = owner.wait_for(
        "a relay reservation",
        lambda: (r := _reach(owner)).get("relayed_addrs") and r,
        timeout=120,
    )
    assert reach["status"] == "private" and not reach["unreachable"]
    boot_peer = boot.call("node.status")["p2p"]["peer_id"]
    assert all(f"/p2p/{boot_peer}/p2p-circuit/" in a for a in reach["relayed_addrs"])
    assert _reach(boot)["relay_service"] is True
    # It advertises the relayed address first (its direct one reaches no one).
    assert "/p2p-circuit/" in owner.gossip_addr()
    events = owner.call("node.events", kind="node.reachability", limit=20)
    assert any(e["data"].get("relayed_addrs") for e in events)

    created = owner.call("dataset.create", snapshot_yaml=DERIVATIVE)
    ids = {c["alias"]: c["id"] for c in created}
    csv = tmp_path / "c.csv"
    csv.write_text(CSV)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])
    head = owner.call("dataset.transform", ref="big-cities-df")["new_head"]
    der = ids["big-cities-df"]

    started, started_ns = time.monotonic(), time.time_ns()
    sub.call("subscriptions.add", did=der)
    att = sub.wait_for(
        "the subscriber's attestation of the derivative",
        lambda: [
            a for a in sub.call("attestations.list", did=der) if a["own"] and a["head"] == head
        ],
        timeout=240,
        every=0.5,
    )
    took = time.monotonic() - started
    assert att[0]["verdict"] == "verified"
    pulls = [e for e in sub.call("node.events", kind="pull.ok", limit=200) if e["did"] == der]
    path = pulls[0]["data"]["url"]
    failed = [
        (e["data"]["url"].split(":", 1)[0], e["data"]["reason"])
        for e in sub.call("node.events", kind="pull.source_failed", limit=200)
        if e["did"] == der
    ]
    pulled = (pulls[0]["at_ns"] - started_ns) / 1e9
    print(
        f"{owner_name}: subscribe -> derivative pulled {pulled:.1f} s, verified {took:.1f} s; "
        f"data path {path}; failed sources {failed}"
    )
    # The data came over libp2p streams of the relayed connection, from the owner.
    owner_peer = owner.call("node.status")["p2p"]["peer_id"]
    assert path == f"libp2p://{owner_peer}/{der}?head={head}", path
    # The owner's HTTP address is private: refused by the subscriber's policy, named as such.
    assert ("http", "refused") in failed
    # The subscriber is connected to the owner through the relay: the owner is on its peers.
    assert owner_peer in {p["peer_id"] for p in sub.call("peers.list") if p["connected"]}


def test_a_node_behind_nat_without_a_relay_says_it_is_unreachable(
    lab_nodes: dict[str, HostNode],
) -> None:
    lonely = lab_nodes["lonely"]
    reach = lonely.wait_for(
        "the unreachable verdict",
        lambda: (r := _reach(lonely)).get("unreachable") and r,
        timeout=60,
    )
    assert reach["status"] == "private" and reach["relayed_addrs"] == []
    assert any("no relay service" in why for why in reach["relay_errors"].values())
    (event,) = [
        e["data"]
        for e in lonely.call("node.events", kind="node.reachability", limit=20)
        if "message" in e["data"]
    ][:1]
    assert "peers cannot dial this node" in event["message"]
    assert event["setting"].startswith("[p2p] bootstrap")
    assert "reachability: behind NAT and no relay slot" in lonely.log_path.read_text()
