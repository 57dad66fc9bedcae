"""The odf DHT over real libp2p hosts (``p2p/dht_service.py`` serving ``/odf/kad/1.0.0``).

Six hosts, each in its own child process (``p2p/libp2p_process.py``), connected in a line
h0 - h1 - h2 - h3 - h4 - h5: a dataset's carrier at one end provides it; the seeker at the other
end, whose only neighbour carries nothing, finds it with one provider lookup (several hops of
``FIND_NODE`` / ``GET_PROVIDERS`` and dials to peers it was told of), gets the carrier's
signed record and dials its gossip address. Then the bounds: a frozen peer does not hold a
lookup up, a sender over its rate limit is answered ``RATE_LIMITED`` and the client holds back
and reports it, a record over the store's bounds is ``REFUSED`` (reported, not counted as
stored), and a node may not provide for another.

Runs inside a loopback-only network namespace, as every libp2p test.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from coordinator.identity import DatasetId, PrivateKey
from p2p.dht import RecordLimits
from p2p.dht.keys import dataset_key
from p2p.dht.wire import PROTOCOL, DhtOp, DhtRequest, SignedProviderRecord, Status
from p2p.dht_service import DhtConfig, DhtRateLimited, DhtService
from p2p.libp2p_host import Libp2pConfig
from p2p.libp2p_process import Libp2pProcessTransport

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

# Of h1..h5, the peers closest to this dataset's key are h4 and h3: the seeker's neighbour h1
# does not hold its record, so the lookup must walk past it.
DID = PrivateKey.from_seed(b"\x48" * 32).dataset_id()


async def _until(probe: object, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.1)
    return False


class Host:
    """A libp2p host with a DHT service."""

    def __init__(self, i: int, config: DhtConfig, carries: bool = False) -> None:
        self.seed = bytes([0x60 + i]) * 32
        self.key = PrivateKey.from_seed(self.seed)
        self.t = Libp2pProcessTransport(Libp2pConfig(node_seed=self.seed))
        self.config = config
        self.carries = carries
        self.dht: DhtService

    async def provided(self) -> list[DatasetId]:
        return [DID] if self.carries else []

    def start_dht(self) -> None:
        t = self.t
        self.dht = DhtService(
            t,
            node_key=self.key,
            self_addrs=lambda: (tuple(t.listen_addrs()), (), ""),
            provided=self.provided,
            config=self.config,
        )
        if self.config.serve:
            t.set_request_handler(PROTOCOL, self.dht.serve)


def test_a_provider_two_hops_past_the_neighbours_is_found_with_one_lookup() -> None:
    async def main() -> None:
        # k = 2: each record is stored at the 2 peers closest to its key, so the seeker's
        # neighbour may not hold it and the walk has to go further.
        cfg = DhtConfig(k=2, query_timeout_s=5.0, slow_after_s=0.5)
        hosts = [Host(i, cfg, carries=(i == 5)) for i in range(6)]
        await asyncio.gather(*(h.t.start() for h in hosts))
        try:
            for h in hosts:
                h.start_dht()
            seeker, neighbour, carrier = hosts[0], hosts[1], hosts[5]
            for a, b in itertools.pairwise(hosts[1:]):
                await b.t.connect(a.t.listen_addrs()[0])
            assert await _until(lambda: all(h.t.connected_peers() for h in hosts[1:]))
            # Each node refreshes its table (a walk to its own key); the carrier provides.
            for h in hosts[1:5]:
                await h.dht.run_once()
            (report,) = await carrier.dht.run_once()
            assert report.stored, report
            assert not report.refused and not report.rate_limited
            # A newcomer knows one neighbour, which carries nothing.
            await seeker.t.connect(neighbour.t.listen_addrs()[0])
            assert await _until(lambda: seeker.t.connected_peers() == [neighbour.t.peer_id])
            t0 = time.monotonic()
            found = await seeker.dht.find_providers(DID)
            elapsed = time.monotonic() - t0
            held = [h.t.peer_id for h in hosts if len(h.dht.store)]
            print(
                f"provider lookup: {elapsed:.2f} s, {found.walk.queried} queried; record at "
                f"{len(held)} peers, the neighbour among them: {neighbour.t.peer_id in held}"
            )
            assert neighbour.t.peer_id not in held and carrier.t.peer_id not in held
            assert found.walk.queried >= 2
            # ... one lookup brings the carrier's signed record, addresses included.
            (rec,) = found.records
            assert rec.node == carrier.key.dataset_id() and rec.did == DID
            assert rec.gossip == tuple(carrier.t.listen_addrs())
            assert await seeker.t.connect(rec.gossip[0]) == carrier.t.peer_id
            assert elapsed < 10
            # Republish: nothing is due again in the next round.
            assert await carrier.dht.run_once() == []
        finally:
            await asyncio.gather(*(h.t.stop() for h in hosts), return_exceptions=True)

    asyncio.run(main())


def test_bounds_a_frozen_peer_rate_limits_refusals_and_foreign_records() -> None:
    async def main() -> None:
        cfg = DhtConfig(query_timeout_s=4.0, slow_after_s=0.5, want_providers=1)
        strict = DhtConfig(
            rate_per_s=0.05, rate_burst=4.0, records=RecordLimits(max_records=1, per_key=1)
        )
        a, b, frozen = Host(10, cfg), Host(11, strict), Host(12, cfg)
        hosts = [a, b, frozen]
        await asyncio.gather(*(h.t.start() for h in hosts))
        try:
            for h in hosts:
                h.start_dht()

            async def never(peer: str, data: bytes) -> bytes:
                await asyncio.sleep(60)
                return b""

            frozen.t.set_request_handler(PROTOCOL, never)
            # b carries the dataset (it provided before it had peers: stored nowhere yet, but
            # it answers with its own record).
            assert not (await b.dht.provide(DID)).stored
            for h in (b, frozen):
                await a.t.connect(h.t.listen_addrs()[0])
            assert await _until(lambda: len(a.t.connected_peers()) == 2)

            # A frozen peer costs a slot, not the walk: the lookup ends on b's answer.
            t0 = time.monotonic()
            found = await a.dht.find_providers(DID)
            took = time.monotonic() - t0
            assert [r.node for r in found.records] == [b.key.dataset_id()]
            print(f"provider lookup with a frozen peer: {took:.2f} s")
            assert took < cfg.query_timeout_s / 2

            # Only a carrier's own record: a for b is refused as invalid.
            other = SignedProviderRecord.sign(b.key, DID, 1)
            req = DhtRequest(DhtOp.ADD_PROVIDER, dataset_key(DID), (), other.encoded)
            with pytest.raises(Exception, match="invalid"):
                await a.dht.query(b.t.peer_id, req)

            # The store's bound (one record in all): a's second dataset is refused, and said so.
            own = SignedProviderRecord.sign(a.key, DID, 1)
            ok = await a.dht.query(
                b.t.peer_id, DhtRequest(DhtOp.ADD_PROVIDER, dataset_key(DID), (), own.encoded)
            )
            assert ok.status is Status.OK
            did2 = PrivateKey.from_seed(b"\x45" * 32).dataset_id()
            own2 = SignedProviderRecord.sign(a.key, did2, 1)
            no = await a.dht.query(
                b.t.peer_id, DhtRequest(DhtOp.ADD_PROVIDER, dataset_key(did2), (), own2.encoded)
            )
            assert no.status is Status.REFUSED
            assert b.dht.stats.records_refused == 1 and b.dht.stats.records_stored == 1

            # Over its rate (a burst of 4, then one per 20 s): RATE_LIMITED, never dropped;
            # the client holds back until retry_after and reports both.
            with pytest.raises(DhtRateLimited):
                await a.dht.query(b.t.peer_id, DhtRequest(DhtOp.FIND_NODE, dataset_key(DID)))
            assert b.dht.stats.served_rate_limited == 1
            assert a.dht.stats.rate_limited_by_peers == 1
            with pytest.raises(DhtRateLimited):
                await a.dht.query(b.t.peer_id, DhtRequest(DhtOp.FIND_NODE, dataset_key(DID)))
            assert a.dht.stats.held_back == 1
            assert b.dht.stats.served_rate_limited == 1  # held back: not even sent
        finally:
            await asyncio.gather(*(h.t.stop() for h in hosts), return_exceptions=True)

    asyncio.run(main())


def test_lookups_overtake_peers_that_froze_after_joining() -> None:
    """Ten hosts, k = 3; after the tables fill and the carrier provides, three of the hosts
    freeze (their handler never answers, their connections stay up: the worst case, as a
    timeout is the only sign). A newcomer's provider lookup still ends on the live peers'
    answers, not on the frozen ones' timeouts."""

    async def main() -> None:
        cfg = DhtConfig(k=3, query_timeout_s=5.0, slow_after_s=0.5, want_providers=1)
        hosts = [Host(20 + i, cfg, carries=(i == 9)) for i in range(10)]
        await asyncio.gather(*(h.t.start() for h in hosts))
        try:
            for h in hosts:
                h.start_dht()
            seeker, hub, carrier = hosts[0], hosts[1], hosts[9]
            for h in hosts[2:]:
                await h.t.connect(hub.t.listen_addrs()[0])
            assert await _until(lambda: len(hub.t.connected_peers()) == 8)
            for h in hosts[1:]:
                await h.dht.run_once()
            assert len([h for h in hosts if len(h.dht.store)]) >= 2

            asked: list[str] = []

            async def never(peer: str, data: bytes) -> bytes:
                asked.append(peer)
                await asyncio.sleep(60)
                return b""

            holders = [h for h in hosts[2:9] if len(h.dht.store)]
            others = [h for h in hosts[2:9] if not len(h.dht.store)]
            # Freeze three peers, one of them holding the record when there is a choice.
            frozen = (holders[:1] + others)[:3] if len(holders) > 1 else others[:3]
            for h in frozen:
                h.t.set_request_handler(PROTOCOL, never)
            await seeker.t.connect(hub.t.listen_addrs()[0])
            assert await _until(lambda: seeker.t.connected_peers() == [hub.t.peer_id])
            t0 = time.monotonic()
            found = await seeker.dht.find_providers(DID)
            took = time.monotonic() - t0
            print(
                f"provider lookup, 3 of 9 peers frozen: {took:.2f} s, "
                f"{found.walk.queried} queried, {found.walk.failed} failed, "
                f"{asked.count(seeker.t.peer_id)} frozen peer(s) asked"
            )
            assert [r.node for r in found.records] == [carrier.key.dataset_id()]
            assert took < cfg.query_timeout_s
        finally:
            await asyncio.gather(*(h.t.stop() for h in hosts), return_exceptions=True)

    asyncio.run(main())
