"""A subscriber finds a dataset's owner through the odf DHT, pulls and verifies it (issue 43).

Two real daemons and one DHT server: the owner and a light subscriber (it asks the DHT, does
not serve it) know only the bootstrap peer,
a libp2p host running the DHT alone (``p2p/dht_service.py``; it follows nothing and does not
speak ``/odf/providers/1.0.0``). So the subscriber's only neighbour carries nothing and can name
no carrier: one-hop discovery finds nothing, and the subscriber asks the DHT, whose server holds
the owner's signed provider record. The subscriber dials the owner from that record, hears its
head, pulls it and verifies it.

Runs inside a loopback-only network namespace, as every libp2p test.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import FAR_SNAPSHOT, NodeProcess
from netns import require_loopback_only

from coordinator.identity import PrivateKey
from p2p.dht.wire import PROTOCOL
from p2p.dht_service import DhtConfig, DhtService
from p2p.libp2p_host import Libp2pConfig
from p2p.libp2p_process import Libp2pProcessTransport

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class DhtServer:
    """A libp2p host running the DHT alone, on its own asyncio loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.transport = Libp2pProcessTransport(Libp2pConfig(node_seed=b"\x71" * 32))
        self.dht: DhtService | None = None

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> str:
        self.thread.start()

        async def start() -> None:
            await self.transport.start()

            async def nothing() -> list[Any]:
                return []

            self.dht = DhtService(
                self.transport,
                node_key=PrivateKey.from_seed(b"\x71" * 32),
                self_addrs=lambda: (tuple(self.transport.listen_addrs()), (), ""),
                provided=nothing,
                config=DhtConfig(),
            )
            self.transport.set_request_handler(PROTOCOL, self.dht.serve)

        self.run(start())
        return str(self.transport.listen_addrs()[0])

    def records(self) -> int:
        return len(self.dht.store) if self.dht is not None else 0

    def stop(self) -> None:
        self.run(self.transport.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture()
def network(tmp_path: Path) -> Iterator[tuple[NodeProcess, NodeProcess, DhtServer]]:
    require_loopback_only()
    server = DhtServer()
    boot = server.start()
    conf = {
        "ipfs": {"mode": "none"},
        "p2p": {"bootstrap": [boot], "discovery_interval_s": 1.0},
        "dht": {"ask_after_s": 2.0, "interval_s": 2.0},
    }
    owner = NodeProcess(tmp_path / "owner", "owner", config=conf)
    # A light subscriber: it asks the DHT but does not serve it, so no DHT walk of the owner's
    # meets it; it reaches the owner only by the provider record it asks for.
    light = {**conf, "dht": {**conf["dht"], "serve": False}}
    sub = NodeProcess(tmp_path / "sub", "sub", config=light)
    try:
        for n in (owner, sub):
            n.init()
            n.launch()
        for n in (owner, sub):
            n.wait_ready()
        yield owner, sub, server
    finally:
        for n in (owner, sub):
            n.stop()
        server.stop()


def _peer_id(n: NodeProcess) -> str:
    return str(n.call("node.status")["p2p"]["peer_id"])


def test_a_subscriber_whose_neighbours_carry_nothing_finds_the_owner_through_the_dht(
    network: tuple[NodeProcess, NodeProcess, DhtServer], tmp_path: Path
) -> None:
    owner, sub, server = network
    t0 = time.monotonic()
    created = owner.call("dataset.create", snapshot_yaml=FAR_SNAPSHOT)
    did = created[0]["id"]
    csv = tmp_path / "a.csv"
    csv.write_text("city,population\nA,1\nB,2\n")
    head = owner.call("dataset.ingest", ref="far", files=[str(csv)])["new_head"]
    # The owner provides what it owns: its record reaches the DHT server.
    owner.wait_for("the owner's provider record at the DHT server", server.records, 60)

    # The subscriber's one neighbour is the DHT server: it carries nothing, and does not even
    # speak the one-hop protocol.
    owner_peer = _peer_id(owner)
    sub.call("subscriptions.add", did=did)

    def accepted() -> Any:
        rows = [s for s in sub.call("subscriptions.list") if s["did"] == did]
        return rows and rows[0]["accepted_head"] == head

    sub.wait_for("the owner's head accepted", accepted, 120)
    found_in = time.monotonic() - t0
    log = sub.tail(400_000)
    assert f"provider(s) of {did}" in log and "from the DHT" in log, log[-3000:]
    assert owner_peer in log  # dialled from the DHT's record
    sub.wait_for(
        "verification",
        lambda: any(
            s["did"] == did and s["verification"] == "verified"
            for s in sub.call("subscriptions.list")
        ),
        120,
    )
    print(f"subscribed -> head accepted through the DHT: {found_in:.1f} s")

    # Status reports the DHT's work (copied every 2 s): the light subscriber's lookup, nothing
    # served (it does not serve), nothing refused or limited.
    def sub_dht() -> Any:
        dht = sub.call("node.status")["p2p"]["dht"] or {}
        return dht if dht.get("lookups", 0) >= 1 else None

    dht = sub.wait_for("the subscriber's lookups in status", sub_dht, 30)
    assert dht["served"] == 0 and dht["rate_limited_by_peers"] == 0
    owner.wait_for(
        "the owner's provides in status",
        lambda: (owner.call("node.status")["p2p"]["dht"] or {}).get("provides", 0) >= 1,
        30,
    )
    # A follower that verified carries the dataset: it provides it too (a second record).
    sub.wait_for(
        "the subscriber's provider record at the DHT server", lambda: server.records() == 2, 60
    )
