"""The hard case of DHT discovery on the multi-host lab (issue 43): an owner behind NAT, found
by a subscriber whose only neighbour carries nothing.

Lab (``sim.netlab``; real ``odf-node run`` daemons in open mode on lab addresses,
``tests/multihost.py``):

* host 1: the public relay (``[p2p] relay_service``; no DHT, no IPFS, no HTTP);
* host 2: a public DHT-only node: a libp2p host running ``p2p/dht_service.py`` alone (it
  follows nothing and does not speak ``/odf/providers/1.0.0``, so it can name no carrier but
  through the provider records it stores);
* host 3: the subscriber, a light node (it asks the DHT, does not serve it) whose only
  bootstrap peer is the DHT node;
* host 4: the owner, behind an endpoint-independent NAT router (``Nat("eim")``), bootstrapped
  to the relay and the DHT node; AutoNAT says ``private``, it reserves a slot on the relay and
  advertises the relayed address, and its signed provider record (stored at the DHT node)
  carries that address.

The subscriber's one-hop discovery finds nothing; it asks the DHT, receives the owner's signed
record, confirms it by dialling the relayed address (the dial authenticates the owner), pulls
over the libp2p streams of that connection and verifies the head. The assertions read the
daemons' own records: the subscriber's ``status`` ``p2p.dht`` counters, its ``pull.ok`` event and
peers, and the DHT node's store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import FAR_SNAPSHOT, ROOT
from multihost import HostNode, open_config, relay_bootstrap, stop_all
from netns import require_loopback_only

from coordinator.identity import PrivateKey
from p2p.transport import peer_id_of_node
from sim.netlab import Nat, NetLab

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DHT_HOST, SUB_HOST, OWNER_HOST = 2, 3, 4
DHT_PORT = 7377
DHT_SEED = b"\x72" * 32

# The DHT-only node, run on its lab host by ``python -c`` (argv: address, port, status file):
# it serves the DHT and writes its store size and counters to the status file twice a second.
DHT_NODE = """
import asyncio, dataclasses, json, os, sys
from coordinator.identity import PrivateKey
from p2p.dht.wire import PROTOCOL
from p2p.dht_service import DhtConfig, DhtService
from p2p.libp2p_host import Libp2pConfig
from p2p.libp2p_process import Libp2pProcessTransport

SEED = bytes.fromhex(sys.argv[4])


async def main(host: str, port: int, status: str) -> None:
    t = Libp2pProcessTransport(
        Libp2pConfig(
            node_seed=SEED, listen_host=host, listen_port=port, loopback_only=False,
            nat=True, use_relays=False,
        )
    )
    await t.start()

    async def nothing() -> list:
        return []

    dht = DhtService(
        t,
        node_key=PrivateKey.from_seed(SEED),
        self_addrs=lambda: (tuple(str(a) for a in t.listen_addrs()), (), ""),
        provided=nothing,
        config=DhtConfig(loopback_only=False),
    )
    t.set_request_handler(PROTOCOL, dht.serve)
    while True:
        row = {"records": len(dht.store), **dataclasses.asdict(dht.stats)}
        with open(status + ".tmp", "w") as f:
            json.dump(row, f)
        os.replace(status + ".tmp", status)
        await asyncio.sleep(0.5)


asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""


class DhtNode:
    """The DHT-only node's process on its lab host (stopped by its PID)."""

    def __init__(self, lab: NetLab, host: int, base: Path) -> None:
        self.status = base / "dht-status.json"
        self.log = base / "dht-node.log"
        self.address = lab.address(host)
        peer = peer_id_of_node(PrivateKey.from_seed(DHT_SEED).dataset_id())
        self.multiaddr = f"/ip4/{self.address}/tcp/{DHT_PORT}/p2p/{peer}"
        python_c = [sys.executable, "-c", DHT_NODE]
        with open(self.log, "ab") as log:
            self.proc = lab.popen(
                host,
                [*python_c, self.address, str(DHT_PORT), str(self.status), DHT_SEED.hex()],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def row(self) -> dict[str, Any]:
        try:
            row: dict[str, Any] = json.loads(self.status.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return row

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.row():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the DHT node did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture()
def lab(tmp_path: Path) -> Iterator[tuple[HostNode, HostNode, HostNode, DhtNode]]:
    require_loopback_only()
    netlab = NetLab(3, [Nat("eim")])
    netlab.start()
    nodes: list[HostNode] = []
    dht: DhtNode | None = None
    try:
        relay, relay_addr = relay_bootstrap(netlab, tmp_path / "relay")
        relay.config["dht"] = {"enabled": False}
        relay.init_config()
        nodes.append(relay)
        dht = DhtNode(netlab, DHT_HOST, tmp_path)
        quick = {"ask_after_s": 1.0, "interval_s": 2.0}
        sub = HostNode(netlab, SUB_HOST, tmp_path / "sub", "sub")
        sub.config.update(open_config(sub.address, [dht.multiaddr]))
        sub.config["dht"] = {**quick, "serve": False}
        owner = HostNode(netlab, OWNER_HOST, tmp_path / "owner", "owner")
        owner.config.update(open_config(owner.address, [relay_addr, dht.multiaddr]))
        owner.config["dht"] = quick
        owner.config["p2p"]["reachability_interval_s"] = 2.0
        for n in (sub, owner):
            # No IPFS node: the owner's would be unreachable (docs/nat.md); the data path under
            # test is the libp2p streams of the relayed connection.
            n.config["ipfs"] = {"mode": "none"}
            n.config["p2p"]["discovery_interval_s"] = 1.0
            n.init()
            nodes.append(n)
        relay.launch()
        for n in (sub, owner):
            n.launch()
        dht.wait_ready()
        for n in nodes:
            n.wait_ready()
        yield relay, sub, owner, dht
    finally:
        stop_all(nodes)
        if dht is not None:
            dht.stop()
        netlab.close()


def test_a_subscriber_finds_an_owner_behind_nat_through_the_dht_and_verifies_it(
    lab: tuple[HostNode, HostNode, HostNode, DhtNode], tmp_path: Path
) -> None:
    relay, sub, owner, dht = lab
    t0 = time.monotonic()
    # The owner finds out it is behind NAT and advertises its relayed address first.
    owner.wait_for(
        "the owner's relay reservation",
        lambda: (owner.call("node.status")["p2p"]["reachability"] or {}).get("relayed_addrs"),
        timeout=90,
        every=0.5,
    )
    assert "/p2p-circuit/" in owner.gossip_addr()
    created = owner.call("dataset.create", snapshot_yaml=FAR_SNAPSHOT)
    did = created[0]["id"]
    csv = tmp_path / "a.csv"
    csv.write_text("city,population\nA,1\nB,2\n")
    head = owner.call("dataset.ingest", ref="far", files=[str(csv)])["new_head"]
    owner.wait_for(
        "the owner's provider record at the DHT node",
        lambda: dht.row().get("records") == 1,
        timeout=60,
        every=0.5,
    )
    ready_s = time.monotonic() - t0

    # The subscriber's one neighbour, the DHT node, carries nothing and names no carrier.
    owner_peer = owner.call("node.status")["p2p"]["peer_id"]
    relay_peer = relay.call("node.status")["p2p"]["peer_id"]
    connected = {p["peer_id"] for p in sub.call("peers.list") if p["connected"]}
    assert owner_peer not in connected and relay_peer not in connected
    started, started_ns = time.monotonic(), time.time_ns()
    sub.call("subscriptions.add", did=did)

    def verified() -> Any:
        rows = [s for s in sub.call("subscriptions.list") if s["did"] == did]
        ok = rows and rows[0]["accepted_head"] == head and rows[0]["verification"] == "verified"
        return rows[0] if ok else None

    sub.wait_for("the owner's head accepted and verified", verified, timeout=90, every=0.5)
    took = time.monotonic() - started

    # The subscriber's DHT found the owner's record and its dial confirmed the owner.
    def sub_dht() -> Any:
        row = sub.call("node.status")["p2p"]["dht"] or {}
        return row if row.get("providers_confirmed", 0) >= 1 else None

    row = sub.wait_for("the subscriber's DHT counters in status", sub_dht, timeout=20)
    assert row["lookups"] >= 1 and row["providers_found"] >= 1, row
    assert row["served"] == 0 and row["rate_limited_by_peers"] == 0, row
    log = sub.tail(400_000)
    assert "from the DHT" in log and f"provider(s) of {did}" in log, log[-3000:]
    # It pulled from the owner over the libp2p streams of the relayed connection.
    pulls = [e for e in sub.call("node.events", kind="pull.ok", limit=200) if e["did"] == did]
    assert pulls and pulls[0]["data"]["url"] == f"libp2p://{owner_peer}/{did}?head={head}"
    peers = {p["peer_id"]: p for p in sub.call("peers.list") if p["connected"]}
    # Connected to the owner, which only the relay (or a hole punch it set up) can reach: the
    # owner's own address is private, and nothing routes to it from the public hosts.
    assert owner_peer in peers, peers
    # The DHT node served the lookup (it stores the owner's record, and the subscriber's too
    # once the subscriber, a carrier that verified, provides it).
    served = dht.row()
    assert served["served"] >= 1 and served["records"] >= 1, served
    pulled_s = (pulls[0]["at_ns"] - started_ns) / 1e9
    print(
        f"lab ready + relay + provide {ready_s:.1f} s; subscribe -> pulled {pulled_s:.1f} s, "
        f"verified {took:.1f} s; sub dht {row}; owner at {peers[owner_peer]['addrs']}"
    )
