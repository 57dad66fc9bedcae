"""A misconfigured open-mode LAN: the subscriber says why its pull waits.

Three lab hosts (``sim.netlab``, 10.77.0.0/24 inside the test's own namespaces): an owner, a
bootstrap-only node and a subscriber, each an ``odf-node run`` daemon in ``isolation = "open"``
configured as the README's open-network section reads, except that the owner's IPFS swarm is
left on its default ``127.0.0.1`` and the subscriber does not allow private HTTP sources. The
owner warns at start that its IPFS node is unreachable from other hosts (log, event, status);
within 60 s of ``subscribe`` the subscriber's events and ``subscriptions`` name the owner's
unreachable IPFS address and the source policy's refusal of its HTTP address, with the setting
that would allow it (issue 32, item 4). The owner does not serve libp2p streams (``[p2p]
serve_streams = false``), else the subscriber would pull from it that way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import CITIES_SNAPSHOT
from multihost import HostNode, lab_network, open_config, peer_id_of, stop_all
from netns import require_loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BOOTSTRAP_PORT = 7375
CSV = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n"


@pytest.fixture(scope="module")
def lan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HostNode]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("pullreasons")
    with lab_network(3) as lab:
        nodes: dict[str, HostNode] = {}
        try:
            boot = HostNode(lab, 2, base / "boot", "boot")
            boot.config.update(open_config(boot.address))
            boot.config["p2p"]["port"] = BOOTSTRAP_PORT
            boot.config["ipfs"] = {"mode": "none"}
            boot.config["http"] = {"enabled": False}
            boot.init()
            nodes["boot"] = boot
            bootstrap = f"/ip4/{boot.address}/tcp/{BOOTSTRAP_PORT}/p2p/{peer_id_of(base / 'boot')}"
            for k, name in ((1, "owner"), (3, "sub")):
                n = HostNode(lab, k, base / name, name)
                n.config.update(open_config(n.address, [bootstrap]))
                # The misconfiguration: the IPFS swarm on its default (loopback) and no private
                # HTTP sources allowed.
                n.config["ipfs"] = {"swarm_port": 0}
                # Started with the daemon, so its start warnings name it (a node that starts
                # it on first use warns then, in its log and events).
                n.config["ipfs"]["start"] = "eager"
                n.config["transfer"] = {}
                # Nor does the owner serve its datasets over libp2p streams (which would carry
                # the pull here, the owner being connected): the sources this test is about are
                # the announced IPFS and HTTP ones.
                n.config["p2p"]["serve_streams"] = False
                n.init()
                nodes[name] = n
            for n in nodes.values():
                n.launch()
            for n in nodes.values():
                n.wait_ready()
            yield nodes
        finally:
            stop_all(list(nodes.values()))


def _failures(sub: HostNode, did: str) -> list[dict[str, Any]]:
    return [
        e["data"]
        for e in sub.call("node.events", kind="pull.source_failed", limit=100)
        if e["did"] == did
    ]


def test_the_subscriber_names_the_unreachable_ipfs_address_and_the_policy_refusal(
    lan: dict[str, HostNode], tmp_path: Path
) -> None:
    owner, sub = lan["owner"], lan["sub"]
    # The owner warns at start: its IPFS node listens on loopback only.
    status = owner.call("node.status")
    warning = next(w for w in status["warnings"] if w["kind"] == "ipfs-unreachable")
    assert warning["setting"] == "[ipfs] swarm_host"
    assert "127.0.0.1" in warning["message"]
    assert status["ipfs"]["addresses"] == []
    assert any(
        e["data"]["kind"] == "ipfs-unreachable"
        for e in owner.call("node.events", kind="node.reachability", limit=10)
    )
    assert "reachability: the IPFS node listens on /ip4/127.0.0.1/" in owner.tail()
    withheld = status["ipfs"]["withheld_addresses"]
    assert withheld and all(a.startswith("/ip4/127.0.0.1/") for a in withheld)
    # Its HTTP and gossip addresses are on the LAN: nothing to say about them.
    assert {w["kind"] for w in status["warnings"]} == {"ipfs-unreachable"}

    (created,) = owner.call(
        "dataset.create", snapshot_yaml=CITIES_SNAPSHOT.rstrip().removesuffix("---")
    )
    did = created["id"]
    csv = tmp_path / "c.csv"
    csv.write_text(CSV)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])

    started = time.monotonic()
    sub.call("subscriptions.add", did=did)

    def named() -> list[dict[str, Any]] | None:
        failed = _failures(sub, did)
        seen = {(f["url"].split(":", 1)[0], f["reason"]) for f in failed}
        return failed if {("ipfs", "unreachable"), ("http", "refused")} <= seen else None

    failed = sub.wait_for("the pull's failed sources", named, timeout=60, every=0.5)
    took = time.monotonic() - started
    print(f"subscribe -> both failed sources named: {took:.1f} s")
    assert took < 60
    ipfs = next(f for f in failed if f["url"].startswith("ipfs://"))
    http = next(f for f in failed if f["reason"] == "refused")
    assert ipfs["reason"] == "unreachable"
    assert ipfs["addresses"] == withheld
    assert withheld[0] in ipfs["error"]
    assert ipfs["setting"] == "[ipfs] swarm_host (on the provider)"
    assert http["url"].startswith(f"http://{owner.address}:")
    assert http["setting"] == "[transfer] allowed_source_networks"
    assert "allow_private_sources" in http["error"]
    # ... and so does `subscriptions`.
    (row,) = [s for s in sub.call("subscriptions.list") if s["did"] == did]
    attempts = row["pull"]["attempts"]
    assert {(a["url"].split(":", 1)[0], a["reason"]) for a in attempts} >= {
        ("ipfs", "unreachable"),
        ("http", "refused"),
    }
    assert any(a.get("setting") == "[transfer] allowed_source_networks" for a in attempts)
    assert any(withheld[0] in a.get("addresses", []) for a in attempts)
    assert row["pull"]["last_ok_ns"] is None
