"""The DHT driver (``p2p/dht_service.py``) over an in-memory network, on a hand-driven clock:
serving within per-sender rate limits that the client respects and counts, only a carrier's own
records, refusals reported as refusals, lookups through many peers, and republishing on the
core's interval or when the node's addresses change."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from coordinator.identity import DatasetId, PrivateKey
from p2p.dht import RecordLimits
from p2p.dht.keys import dataset_key
from p2p.dht.records import HOUR_NS
from p2p.dht.wire import (
    PROTOCOL,
    DhtOp,
    DhtRequest,
    DhtResponse,
    SignedProviderRecord,
    Status,
    decode_request,
    encode_response,
)
from p2p.dht_service import DhtConfig, DhtRateLimited, DhtRefused, DhtService
from p2p.transport import TransportError, peer_id_of_node

S = 1_000_000_000
DID = PrivateKey.from_seed(b"\x48" * 32).dataset_id()


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000 * S

    def __call__(self) -> int:
        return self.ns


class Net:
    """Nodes by peer id; a request reaches the node's ``serve`` if both ends are linked or
    the caller dialled it."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.links: set[frozenset[str]] = set()

    def link(self, a: str, b: str) -> None:
        self.links.add(frozenset((a, b)))


class Node:
    """A fake transport and the DHT service on it."""

    def __init__(
        self, net: Net, i: int, clock: Clock, config: DhtConfig | None = None, carries=()
    ) -> None:
        self.net = net
        self.key = PrivateKey.from_seed(i.to_bytes(2, "big") * 16)
        self.peer_id = peer_id_of_node(self.key.dataset_id())
        self.addr = f"/ip4/127.0.0.1/tcp/{4000 + i}/p2p/{self.peer_id}"
        self.carries: list[DatasetId] = list(carries)
        self.requests = 0
        net.nodes[self.peer_id] = self
        self.dht = DhtService(
            self,
            node_key=self.key,
            self_addrs=lambda: ((self.addr,), (), ""),
            provided=self.provided,
            config=config or DhtConfig(),
            clock_ns=clock,
            wall_ms=lambda: clock() // 1_000_000,
        )

    async def provided(self) -> Sequence[DatasetId]:
        return self.carries

    def connected_peers(self) -> list[str]:
        return [p for p in self.net.nodes if frozenset((p, self.peer_id)) in self.net.links]

    async def connect(self, addr: str) -> str:
        peer = addr.rsplit("/p2p/", 1)[1]
        if peer not in self.net.nodes:
            raise TransportError(f"no route to {peer}")
        self.net.link(self.peer_id, peer)
        return peer

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        assert protocol == PROTOCOL
        other = self.net.nodes.get(peer)
        if other is None or frozenset((peer, self.peer_id)) not in self.net.links:
            raise TransportError(f"not connected to {peer}")
        if not other.dht.config.serve:
            raise TransportError("protocol not supported")
        other.requests += 1
        return await other.dht.serve(self.peer_id, data)


def test_rate_limits_are_answered_respected_and_reported() -> None:
    async def main() -> None:
        clock, net = Clock(), Net()
        a = Node(net, 1, clock)
        b = Node(net, 2, clock, DhtConfig(rate_per_s=1.0, rate_burst=2.0))
        net.link(a.peer_id, b.peer_id)
        find = DhtRequest(DhtOp.FIND_NODE, dataset_key(DID))
        for _ in range(2):
            assert (await a.dht.query(b.peer_id, find)).status is Status.OK
        with pytest.raises(DhtRateLimited, match="1000 ms"):
            await a.dht.query(b.peer_id, find)
        assert (b.dht.stats.served_rate_limited, a.dht.stats.rate_limited_by_peers) == (1, 1)
        # Held back until retry_after: not sent at all.
        with pytest.raises(DhtRateLimited):
            await a.dht.query(b.peer_id, find)
        assert a.dht.stats.held_back == 1 and b.requests == 3
        clock.ns += S
        assert (await a.dht.query(b.peer_id, find)).status is Status.OK

    asyncio.run(main())


def test_only_a_carrier_s_own_record_under_its_dataset_s_key() -> None:
    async def main() -> None:
        clock, net = Clock(), Net()
        a, b, c = Node(net, 1, clock), Node(net, 2, clock), Node(net, 3, clock)
        net.link(a.peer_id, b.peer_id)
        c_rec = SignedProviderRecord.sign(c.key, DID, 1)
        with pytest.raises(DhtRefused):
            await a.dht.query(
                b.peer_id, DhtRequest(DhtOp.ADD_PROVIDER, dataset_key(DID), (), c_rec.encoded)
            )
        a_rec = SignedProviderRecord.sign(a.key, DID, 1)
        other = PrivateKey.from_seed(b"\x49" * 32).dataset_id()
        with pytest.raises(DhtRefused):
            await a.dht.query(
                b.peer_id, DhtRequest(DhtOp.ADD_PROVIDER, dataset_key(other), (), a_rec.encoded)
            )
        assert len(b.dht.store) == 0 and b.dht.stats.served_invalid == 2
        ok = await a.dht.query(
            b.peer_id, DhtRequest(DhtOp.ADD_PROVIDER, dataset_key(DID), (), a_rec.encoded)
        )
        assert ok.status is Status.OK and len(b.dht.store) == 1

    asyncio.run(main())


def test_a_refused_record_is_reported_refused_not_stored() -> None:
    async def main() -> None:
        clock, net = Clock(), Net()
        full = DhtConfig(records=RecordLimits(max_records=1))
        a = Node(net, 1, clock, carries=[DID, PrivateKey.from_seed(b"\x49" * 32).dataset_id()])
        b = Node(net, 2, clock, full)
        net.link(a.peer_id, b.peer_id)
        first, second = await a.dht.run_once()
        assert first.stored == (b.peer_id,)
        assert second.refused == (b.peer_id,) and not second.stored
        assert b.dht.stats.records_refused == 1

    asyncio.run(main())


def test_a_lookup_walks_past_neighbours_to_the_carrier_s_record() -> None:
    async def main() -> None:
        clock, net = Clock(), Net()
        nodes = [Node(net, i, clock) for i in range(1, 41)]
        # A ring: each node knows two neighbours only.
        for x, y in zip(nodes, nodes[1:] + nodes[:1], strict=True):
            net.link(x.peer_id, y.peer_id)
        for n in nodes:
            await n.dht.run_once()  # each walks to its own key: the tables fill
        carrier, seeker = nodes[0], nodes[20]
        carrier.carries.append(DID)
        (report,) = await carrier.dht.run_once()
        assert len(report.stored) >= 10
        found = await seeker.dht.find_providers(DID)
        assert [r.node for r in found.records] == [carrier.key.dataset_id()]
        records = await seeker.dht.find_peer_records([DID])
        assert records[0].peer_id == carrier.peer_id and records[0].gossip == (carrier.addr,)
        assert records[0].carries == (DID.as_did_str(),)

    asyncio.run(main())


def test_republish_on_the_interval_and_when_addresses_move() -> None:
    async def main() -> None:
        clock, net = Clock(), Net()
        a = Node(net, 1, clock, DhtConfig(interval_s=30.0), carries=[DID])
        # No peer yet: stored nowhere, tried again after the interval (not every round).
        (alone,) = await a.dht.run_once()
        assert not alone.stored
        assert await a.dht.run_once() == []
        b = Node(net, 2, clock)
        net.link(a.peer_id, b.peer_id)
        (report,) = await a.dht.run_once()  # a new peer: at once
        assert report.stored == (b.peer_id,)
        assert await a.dht.run_once() == []
        clock.ns += 21 * HOUR_NS
        assert await a.dht.run_once() == []
        clock.ns += 1 * HOUR_NS
        (again,) = await a.dht.run_once()  # 22 h: republished
        assert again.stored == (b.peer_id,)
        a.addr = "/ip4/127.0.0.1/tcp/5999/p2p/" + a.peer_id
        (moved,) = await a.dht.run_once()  # new addresses: at once
        assert moved.stored == (b.peer_id,)
        # A node with no peers finds nothing (and waits for nobody).
        assert (await Node(net, 3, clock).dht.find_providers(DID)).records == ()
        # No longer carried: not provided again.
        a.carries.clear()
        clock.ns += 23 * HOUR_NS
        assert await a.dht.run_once() == []

    asyncio.run(main())


def test_a_light_node_asks_but_does_not_serve_nor_announce_itself() -> None:
    async def main() -> None:
        clock, net = Clock(), Net()
        light = Node(net, 1, clock, DhtConfig(serve=False))
        server = Node(net, 2, clock)
        carrier = Node(net, 3, clock, carries=[DID])
        net.link(light.peer_id, server.peer_id)
        net.link(carrier.peer_id, server.peer_id)
        await light.dht.run_once()
        await carrier.dht.run_once()
        # The server never lists the light node (it sent no addresses)...
        assert light.peer_id not in server.dht.table
        # ... which finds the carrier all the same.
        found = await light.dht.find_providers(DID)
        assert [r.node for r in found.records] == [carrier.key.dataset_id()]
        # Connected peers that do not serve (the light node, which dialled the carrier in its
        # walk, and another) are asked once, not by every lookup.
        other = Node(net, 4, clock, DhtConfig(serve=False))
        net.link(other.peer_id, carrier.peer_id)
        before = carrier.dht.stats.query_failures
        await carrier.dht.find_providers(DID)
        failures = carrier.dht.stats.query_failures
        assert failures == before + 2
        await carrier.dht.find_providers(DID)
        assert carrier.dht.stats.query_failures == failures

    asyncio.run(main())


def test_a_sybil_s_fake_provider_records_cost_failed_dials_not_the_lookup() -> None:
    """A Sybil connected to the seeker answers every ``GET_PROVIDERS`` with 20 self-signed
    records of identities that exist nowhere. With ``want_providers`` = 1 the seeker does not
    stop at them: it dials each (all fail), walks on to the server holding the carrier's record,
    dials the carrier and ends there, the carrier's record first and the fakes dropped."""

    async def main() -> None:
        clock, net = Clock(), Net()
        seeker = Node(net, 1, clock, DhtConfig(want_providers=1))
        sybil, server = Node(net, 2, clock), Node(net, 3, clock)
        carrier = Node(net, 4, clock, carries=[DID])
        net.link(carrier.peer_id, server.peer_id)
        (report,) = await carrier.dht.run_once()
        assert report.stored == (server.peer_id,)
        net.link(seeker.peer_id, sybil.peer_id)
        net.link(seeker.peer_id, server.peer_id)
        fakes = []
        for i in range(20):
            key = PrivateKey.from_seed(bytes([100 + i]) * 32)
            pid = peer_id_of_node(key.dataset_id())
            addr = f"/ip4/127.0.0.1/tcp/{6000 + i}/p2p/{pid}"
            fakes.append(SignedProviderRecord.sign(key, DID, 1, gossip=(addr,)).encoded)
        honest = sybil.dht.serve

        async def lying(peer: str, data: bytes) -> bytes:
            if decode_request(data).op is DhtOp.GET_PROVIDERS:
                return encode_response(DhtResponse(providers=tuple(fakes)))
            return await honest(peer, data)

        sybil.dht.serve = lying  # type: ignore[method-assign]
        found = await seeker.dht.find_providers(DID)
        assert found.walk.confirmed == (carrier.peer_id,)
        assert [r.node for r in found.records] == [carrier.key.dataset_id()]
        st = seeker.dht.stats
        assert (st.providers_found, st.providers_confirmed) == (21, 1)
        # The fakes dialled before the carrier's confirmation all failed; the rest were not
        # dialled: the lookup ended at its one confirmed provider.
        assert 1 <= st.providers_failed == found.walk.failed_providers <= 20
        # The confirming dial left the seeker connected to the carrier: discovery needs no other.
        assert carrier.peer_id in seeker.connected_peers()

    asyncio.run(main())
