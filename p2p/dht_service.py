"""The odf DHT on the wire: serves ``/odf/kad/1.0.0`` and runs the sans-IO core's lookups over
real streams (``docs/libp2p.md``, "Provider discovery beyond one hop").

:mod:`p2p.dht` decides (routing table, the walk of a lookup, the provider store's bounds);
this module does the IO: it answers requests from other odf nodes, sends each query the
:class:`~p2p.dht.Lookup` asks for (dialling a peer first when the answer that named it gave
addresses), feeds answers and failures back, and wakes the lookup on its deadlines, so a
frozen peer costs a slot, never the whole walk.

**Serving** (only when this node serves: a light node queries but registers no handler).
Each sender has a token bucket (``rate_burst`` requests refilled at ``rate_per_s``); a request
over it is answered ``RATE_LIMITED`` with the milliseconds until a token is back, never
dropped, and never counted as done. ``ADD_PROVIDER`` takes only the sender's own record
(its signer's peer id is the sender's: the stream authenticated it), stored within the store's
bounds (per dataset, per provider, in all); a record the bounds refuse is answered
``REFUSED``. A sender that says it serves (it sends its addresses) enters the routing table.

**Querying.** A peer that answered ``RATE_LIMITED`` is not asked again before its
``retry_after_ms`` (the client respects the limit and counts it, :attr:`DhtService.stats`).
Provider records are checked (signature, dataset, one per provider, the newest kept) before
anything uses them; they stay hints, as every dial authenticates the peer.

**Confirming providers.** A provider lookup counts a provider toward ``want_providers`` only
once it is confirmed: its record's signature verified, and a dial to the record's gossip
addresses (relayed ones included) authenticated the peer the record was signed by (or a
connection to it is already open). The walk goes on meanwhile; a dial that fails, or reaches
another peer, is reported to the walk as failed (:meth:`p2p.dht.Lookup.on_provider_failed`)
and its record is dropped. So a Sybil answering 20 self-signed records of identities that
carry nothing costs 20 failed dials (at most :data:`DIALS_AT_ONCE` at once), never the lookup.
The connection a confirmation opened is the one discovery then uses: it does not dial again.

A light node (``serve`` off) registers no handler, sends no addresses (so no server lists it
as a peer to ask) and refreshes no table: it only asks.

**Providing.** :meth:`DhtService.run` keeps the datasets ``provided()`` names (the ones this
node carries) announced: on each round, a dataset not yet stored at any peer, one due for
republish (the core's ``republish_ns``), or one whose record changed (new addresses) is
provided again: a ``FIND_NODE`` walk to the dataset's key, then ``ADD_PROVIDER`` to the closest
peers that answered. A round also refreshes the routing table (a walk to this node's own key)
when connected peers are not in it yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from coordinator.identity import DatasetId, PrivateKey
from p2p.core.protocol import take_token
from p2p.core.state import KeyBuckets
from p2p.dht import (
    Lookup,
    LookupConfig,
    LookupResult,
    ProviderStore,
    Query,
    RecordLimits,
    RoutingTable,
)
from p2p.dht.keys import DhtKey, dataset_key, peer_key
from p2p.dht.records import due_for_republish
from p2p.dht.routing import K
from p2p.dht.stats import DhtStats
from p2p.dht.wire import (
    MAX_ADDRS,
    MAX_PEERS,
    MAX_PROVIDERS,
    PROTOCOL,
    DhtOp,
    DhtRequest,
    DhtResponse,
    PeerInfo,
    SignedProviderRecord,
    Status,
    decode_record,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from p2p.discovery import PeerRecord
from p2p.errors import NetworkNotIsolated, P2PError, WireDecodeError
from p2p.netguard import assert_loopback_multiaddr
from p2p.transport import RequestTransport, TransportError, peer_id_of_node

log = logging.getLogger(__name__)

_MS = 1_000_000
_S = 1_000_000_000
NOT_A_SEED_NS = 600 * _S
"""How long a connected peer whose query failed, and that is not in the routing table, is
not asked again as a seed (a light node or one without the DHT would fail every lookup)."""
ASK_AT_ONCE = 8
"""Datasets one :meth:`DhtService.find_peer_records` call looks up."""
DIALS_AT_ONCE = 8
"""Providers one lookup dials at once to confirm them (the others wait their turn)."""


@dataclass(frozen=True)
class DhtConfig:
    """The driver's settings (``[dht]`` in the node's configuration)."""

    serve: bool = True
    """Answer other nodes' requests (a light node does not)."""
    k: int = K
    """Bucket size, closest peers a lookup keeps, peers a record is stored at."""
    interval_s: float = 30.0
    """How often a round runs (providing, republishing, refreshing the table) when nothing
    triggers one sooner."""
    query_timeout_s: float = 5.0
    slow_after_s: float = 1.0
    lookup_timeout_s: float = 30.0
    want_providers: int = 4
    """A provider lookup stops once it has confirmed this many (see the module docstring)."""
    rate_per_s: float = 20.0
    rate_burst: float = 100.0
    max_senders: int = 4096
    """Token buckets kept (the least recently used go first)."""
    max_addr_book: int = 4096
    records: RecordLimits = field(default_factory=RecordLimits)
    loopback_only: bool = True


class DhtRateLimited(P2PError):
    """A peer asked this node not to query it before a time (it answered ``RATE_LIMITED``)."""


class DhtRefused(P2PError):
    """A peer answered a DHT request with ``INVALID`` (or an answer that was not one)."""


@dataclass(frozen=True)
class ProvideReport:
    """What one provide did: peers that stored the record, refused it, limited us, failed."""

    did: DatasetId
    stored: tuple[str, ...]
    refused: tuple[str, ...]
    rate_limited: tuple[str, ...]
    failed: tuple[str, ...]


@dataclass(frozen=True)
class ProviderLookup:
    """What a provider lookup found: the checked records (one per provider, newest) of the
    confirmed providers (when none was, of those whose dial had not ended when the lookup did),
    and the walk's figures (``walk.confirmed``: the providers a dial authenticated)."""

    did: DatasetId
    records: tuple[SignedProviderRecord, ...]
    walk: LookupResult
    elapsed_s: float


class DhtService:
    """The DHT of one node (see the module docstring)."""

    def __init__(
        self,
        transport: RequestTransport,
        *,
        node_key: PrivateKey,
        self_addrs: Callable[[], tuple[tuple[str, ...], tuple[str, ...], str]],
        provided: Callable[[], Awaitable[Sequence[DatasetId]]],
        config: DhtConfig | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // _MS,
    ) -> None:
        """``self_addrs`` gives this node's (gossip, IPFS, HTTP) addresses for its records;
        ``provided`` the datasets it carries (owned, or followed and verified)."""
        self._t = transport
        self._key = node_key
        self._self_addrs = self_addrs
        self._provided = provided
        self.config = config or DhtConfig()
        self._now = clock_ns
        self._wall_ms = wall_ms
        self._me = transport.peer_id
        self.table = RoutingTable(peer_key(self._me), k=self.config.k)
        self.store = ProviderStore(self.config.records)
        self.stats = DhtStats()
        self._addrs: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._buckets: KeyBuckets[str] = KeyBuckets(self.config.max_senders)
        self._retry_at: dict[str, int] = {}
        # Connected peers that failed a query while not in the table (light nodes, nodes
        # without the DHT): not taken as seeds again before the time kept here.
        self._not_seeds: OrderedDict[str, int] = OrderedDict()
        # dataset -> (its record as last provided, when, how many peers stored it)
        self._own: dict[DatasetId, tuple[SignedProviderRecord, int, int]] = {}
        self._bootstrapped: set[str] = set()
        self._wake = asyncio.Event()

    # ---- serving

    def trigger(self) -> None:
        """Run a round now (a new connection or a new dataset carried)."""
        self._wake.set()

    async def serve(self, peer: str, data: bytes) -> bytes:
        """Answer one request from ``peer`` (the stream authenticated it)."""
        now = self._now()
        wait_ms = self._spend_token(peer, now)
        if wait_ms:
            self.stats.served_rate_limited += 1
            return encode_response(DhtResponse(Status.RATE_LIMITED, wait_ms))
        try:
            req = decode_request(data)
        except WireDecodeError:
            self.stats.served_invalid += 1
            return encode_response(DhtResponse(Status.INVALID))
        self.stats.served += 1
        if req.addrs:
            addrs = self._allowed(req.addrs)
            if addrs:
                self._remember(peer, addrs)
                self.table.seen(peer, peer_key(peer), now)
        closer = self._closer(req.key, exclude=peer)
        if req.op is DhtOp.FIND_NODE:
            return encode_response(DhtResponse(closer=closer))
        if req.op is DhtOp.GET_PROVIDERS:
            return encode_response(
                DhtResponse(closer=closer, providers=self._providers_of(req.key))
            )
        return encode_response(self._add_provider(peer, req, now))

    def _add_provider(self, peer: str, req: DhtRequest, now: int) -> DhtResponse:
        try:
            rec = decode_record(req.record)
        except WireDecodeError:
            self.stats.served_invalid += 1
            return DhtResponse(Status.INVALID)
        if dataset_key(rec.did) != req.key or peer_id_of_node(rec.node) != peer:
            # Only a carrier's own record, and only under its dataset's key.
            self.stats.served_invalid += 1
            return DhtResponse(Status.INVALID)
        if not self.store.add(req.key, peer, rec.encoded, now):
            self.stats.records_refused += 1
            return DhtResponse(Status.REFUSED)
        self.stats.records_stored += 1
        return DhtResponse()

    def _providers_of(self, key: DhtKey) -> tuple[bytes, ...]:
        now = self._now()
        self.store.expire(now)
        out = [r.peer_record for r in self.store.providers(key, now, MAX_PROVIDERS)]
        for did, (rec, _, _) in self._own.items():
            if dataset_key(did) == key:
                out.insert(0, rec.encoded)
        return tuple(out[:MAX_PROVIDERS])

    def _closer(self, key: DhtKey, exclude: str = "") -> tuple[PeerInfo, ...]:
        out = []
        for p, _ in self.table.closest(key, self.config.k + 1):
            addrs = self._addrs.get(p)
            if p != exclude and addrs:
                out.append(PeerInfo(p, addrs))
        return tuple(out[:MAX_PEERS])

    def _spend_token(self, peer: str, now: int) -> int:
        """0 when ``peer`` may be served now (a token spent), else the ms until it may."""
        cfg = self.config
        b = self._buckets.bucket(peer, now, cfg.rate_burst)
        if take_token(b, now, cfg.rate_per_s, cfg.rate_burst):
            return 0
        return max(1, math.ceil((1.0 - b.tokens) / cfg.rate_per_s * 1000))

    # ---- addresses

    def _allowed(self, addrs: Sequence[str]) -> tuple[str, ...]:
        if not self.config.loopback_only:
            return tuple(addrs[:MAX_ADDRS])
        out = []
        for a in addrs[:MAX_ADDRS]:
            try:
                assert_loopback_multiaddr(a)
            except (NetworkNotIsolated, P2PError):
                continue
            out.append(a)
        return tuple(out)

    def _remember(self, peer: str, addrs: tuple[str, ...]) -> None:
        if peer == self._me or not addrs:
            return
        self._addrs[peer] = addrs
        self._addrs.move_to_end(peer)
        while len(self._addrs) > self.config.max_addr_book:
            self._addrs.popitem(last=False)

    # ---- querying

    async def query(self, peer: str, req: DhtRequest) -> DhtResponse:
        """Send ``req`` to ``peer`` (dialling it first if it is not connected).

        Raises:
            DhtRateLimited: the peer limited us (now, or its ``retry_after`` has not passed).
            DhtRefused: it answered ``INVALID``.
            TransportError: it could not be reached or did not answer in time.
            WireDecodeError: its answer was not a DHT response.
        """
        now = self._now()
        if self._retry_at.get(peer, 0) > now:
            self.stats.held_back += 1
            raise DhtRateLimited(f"{peer} asked not to be queried for a while")
        self._retry_at.pop(peer, None)
        if len(self._retry_at) > self.config.max_senders:
            self._retry_at = {p: t for p, t in self._retry_at.items() if t > now}
        timeout = self.config.query_timeout_s
        if peer not in self._t.connected_peers():
            await self._dial(peer, timeout)
        self.stats.queries += 1
        raw = await self._t.request(peer, PROTOCOL, encode_request(req), timeout)
        resp = decode_response(raw)
        if resp.status is Status.RATE_LIMITED:
            self.stats.rate_limited_by_peers += 1
            self._retry_at[peer] = self._now() + max(1, resp.retry_after_ms) * _MS
            raise DhtRateLimited(f"{peer} is rate limiting us for {resp.retry_after_ms} ms")
        if resp.status is Status.INVALID:
            raise DhtRefused(f"{peer} refused a {req.op.name} request as invalid")
        return resp

    async def _dial(self, peer: str, timeout: float) -> None:
        addrs = self._addrs.get(peer, ())
        errors = []
        for addr in addrs:
            full = addr if addr.endswith(f"/p2p/{peer}") else f"{addr}/p2p/{peer}"
            try:
                await asyncio.wait_for(self._t.connect(full), timeout)
                return
            except (TransportError, P2PError, TimeoutError) as e:
                errors.append(f"{full}: {e}")
        raise TransportError(f"cannot reach DHT peer {peer}: {'; '.join(errors) or 'no address'}")

    def _request(self, op: DhtOp, key: DhtKey, record: bytes = b"") -> DhtRequest:
        addrs = self._allowed(self._self_addrs()[0]) if self.config.serve else ()
        return DhtRequest(op, key, addrs, record)

    async def lookup(
        self,
        key: DhtKey,
        op: DhtOp = DhtOp.FIND_NODE,
        want_providers: int = 0,
        stored: dict[str, SignedProviderRecord] | None = None,
    ) -> tuple[LookupResult, dict[str, SignedProviderRecord]]:
        """One iterative lookup of ``key`` over real streams; the walk's result and, for
        ``GET_PROVIDERS``, the checked provider records by provider peer id (failed ones
        dropped). With ``want_providers``, every provider named (and each of ``stored``, the
        records this node stores) is dialled to confirm it, and the walk ends at
        ``want_providers`` confirmed ones."""
        cfg = self.config
        self.stats.lookups += 1
        seeds = self.table.closest(key)
        if len(seeds) < cfg.k:
            # Connected peers not (yet) in the table may serve the DHT: asking costs a query.
            known = {p for p, _ in seeds}
            now = self._now()
            seeds += [
                (p, peer_key(p))
                for p in self._t.connected_peers()
                if p not in known and self._not_seeds.get(p, 0) <= now
            ][: cfg.k - len(seeds)]
        walk = Lookup(
            key,
            seeds,
            LookupConfig(
                k=cfg.k,
                want_providers=want_providers,
                slow_after_ns=int(cfg.slow_after_s * _S),
                query_timeout_ns=int(cfg.query_timeout_s * _S),
            ),
        )
        records: dict[str, SignedProviderRecord] = dict(stored or {})
        pending: dict[asyncio.Task[DhtResponse], str] = {}
        dials: dict[asyncio.Task[None], str] = {}
        # Providers waiting for a dial slot, by the peer that named them (``""``: stored here),
        # taken in turn from each: a Sybil's 20 fakes do not queue ahead of an honest answer.
        to_dial: OrderedDict[str, list[str]] = OrderedDict()
        dialled: set[str] = set()
        confirming = op is DhtOp.GET_PROVIDERS and want_providers > 0
        req = self._request(op, key)

        def send(queries: Sequence[Query]) -> None:
            for q in queries:
                pending[asyncio.ensure_future(self.query(q.peer, req))] = q.peer

        def dial_named(namer: str, names: Sequence[str]) -> None:
            if not confirming:
                return
            for pid in names:
                if pid not in dialled and pid in records:
                    dialled.add(pid)
                    to_dial.setdefault(namer, []).append(pid)
            while to_dial and len(dials) < DIALS_AT_ONCE:
                first, queue = next(iter(to_dial.items()))
                pid = queue.pop(0)
                if queue:
                    to_dial.move_to_end(first)
                else:
                    del to_dial[first]
                dials[asyncio.ensure_future(self._confirm(pid, records[pid]))] = pid

        started = self._now()
        deadline = started + int(cfg.lookup_timeout_s * _S)
        send(walk.start(started))
        dial_named("", list(records))
        try:
            while (pending or dials) and not walk.done:
                now = self._now()
                if now >= deadline:
                    break
                wake = walk.next_deadline(now)
                timeout = (min(wake if wake is not None else deadline, deadline) - now) / _S
                await asyncio.wait(
                    [*pending, *dials], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                now = self._now()
                for dial in [t for t in dials if t.done()]:
                    send(self._on_dialled(walk, dials.pop(dial), dial, records, now))
                for task in [t for t in pending if t.done()]:
                    peer = pending.pop(task)
                    send(self._on_answer(walk, peer, task, key, records, now))
                    dial_named(peer, walk.awaiting_confirmation)
                dial_named("", ())
                # Overdue queries fail in the walk (a late answer is ignored) and slow ones
                # stop counting against alpha: the next peers are asked now.
                send(walk.poll(self._now()))
        finally:
            for t in [*pending, *dials]:
                t.cancel()
            for t in [*pending, *dials]:
                with contextlib.suppress(BaseException):
                    await t
        return walk.result(), records

    async def _confirm(self, pid: str, rec: SignedProviderRecord) -> None:
        """Dial provider ``pid`` at its record's gossip addresses until one authenticates it.

        Raises:
            TransportError: no address reached ``pid`` (or one reached another peer).
        """
        if pid in self._t.connected_peers():
            return  # an open connection authenticated it already
        errors = []
        for addr in self._allowed(rec.gossip):
            full = addr if addr.endswith(f"/p2p/{pid}") else f"{addr}/p2p/{pid}"
            try:
                got = await asyncio.wait_for(self._t.connect(full), self.config.query_timeout_s)
            except (TransportError, P2PError, TimeoutError) as e:
                errors.append(f"{full}: {e}")
                continue
            if got == pid:
                return
            errors.append(f"{full}: reached {got}")
        raise TransportError(f"provider {pid} not reached: {'; '.join(errors) or 'no address'}")

    def _on_dialled(
        self,
        walk: Lookup,
        pid: str,
        task: asyncio.Task[None],
        records: dict[str, SignedProviderRecord],
        now: int,
    ) -> list[Query]:
        exc = task.exception()
        if exc is None:
            self.stats.providers_confirmed += 1
            log.debug("DHT: provider %s confirmed", pid)
            return list(walk.on_provider_confirmed(pid, now))
        self.stats.providers_failed += 1
        records.pop(pid, None)
        log.info("DHT: provider %s failed its dial: %s", pid, exc)
        return list(walk.on_provider_failed(pid, now))

    def _on_answer(
        self,
        walk: Lookup,
        peer: str,
        task: asyncio.Task[DhtResponse],
        key: DhtKey,
        records: dict[str, SignedProviderRecord],
        now: int,
    ) -> list[Query]:
        exc = task.exception()
        if exc is not None:
            if not isinstance(exc, DhtRateLimited):
                self.stats.query_failures += 1
                if peer in self.table:
                    self.table.failed(peer, peer_key(peer))
                else:
                    self._not_seeds[peer] = now + NOT_A_SEED_NS
                    self._not_seeds.move_to_end(peer)
                    while len(self._not_seeds) > self.config.max_addr_book:
                        self._not_seeds.popitem(last=False)
            log.debug("DHT query to %s failed: %s", peer, exc)
            return list(walk.on_failure(peer, now))
        resp = task.result()
        self.table.seen(peer, peer_key(peer), now)
        closer = []
        for info in resp.closer:
            if info.peer_id == self._me:
                continue
            # Addresses from an answer are hints: the dial authenticates the peer id.
            self._remember(info.peer_id, self._allowed(info.addrs))
            closer.append((info.peer_id, peer_key(info.peer_id)))
        providers = []
        for raw in resp.providers:
            try:
                rec = decode_record(raw)
            except WireDecodeError:
                self.stats.bad_records += 1
                continue
            if dataset_key(rec.did) != key:
                self.stats.bad_records += 1
                continue
            pid = peer_id_of_node(rec.node)
            if pid == self._me:
                continue
            old = records.get(pid)
            if old is None:
                self.stats.providers_found += 1
            if old is None or rec.issued_ms > old.issued_ms:
                records[pid] = rec
            providers.append(pid)
        return list(walk.on_response(peer, closer, providers, now))

    async def find_providers(self, did: DatasetId) -> ProviderLookup:
        """Who carries ``did``: a ``GET_PROVIDERS`` lookup (stops at ``want_providers``)."""
        t0 = self._now()
        key = dataset_key(did)
        # The records this node stores are dialled first (go-libp2p-kad-dht counts them
        # first too); like any other they end the walk only once confirmed, so one stale local
        # record never hides the other carriers.
        local: dict[str, SignedProviderRecord] = {}
        for stored in self.store.providers(key, t0):
            with contextlib.suppress(WireDecodeError):
                rec = decode_record(stored.peer_record)
                if rec.did == did and peer_id_of_node(rec.node) == stored.provider:
                    local[stored.provider] = rec
        walk, records = await self.lookup(
            key, DhtOp.GET_PROVIDERS, self.config.want_providers, stored=local
        )
        # The confirmed providers' records; only when none was confirmed (the lookup ran out
        # of time with dials still under way), the others' as hints for discovery to dial.
        confirmed = set(walk.confirmed)
        found = tuple(
            r
            for r in records.values()
            if r.did == did and (not confirmed or peer_id_of_node(r.node) in confirmed)
        )
        return ProviderLookup(did, found, walk, (self._now() - t0) / _S)

    async def find_peer_records(self, dids: Sequence[DatasetId]) -> list[PeerRecord]:
        """Discovery's records of the carriers of ``dids`` (at most :data:`ASK_AT_ONCE`
        datasets, looked up at once): what discovery dials, as if a neighbour had named them."""
        found = await asyncio.gather(*(self.find_providers(d) for d in dids[:ASK_AT_ONCE]))
        out = []
        for f in found:
            log.info(
                "DHT: %d provider(s) of %s in %.2f s (%d confirmed, %d failed their dial; "
                "%d queried, %d failed)",
                len(f.records),
                f.did.as_did_str(),
                f.elapsed_s,
                len(f.walk.confirmed),
                f.walk.failed_providers,
                f.walk.queried,
                f.walk.failed,
            )
            out += [
                PeerRecord(
                    peer_id=peer_id_of_node(r.node),
                    gossip=r.gossip,
                    ipfs=r.ipfs,
                    http=r.http,
                    carries=(f.did.as_did_str(),),
                )
                for r in f.records
            ]
        return out

    async def provide(self, did: DatasetId) -> ProvideReport:
        """Announce that this node carries ``did`` to the peers closest to its key."""
        self.stats.provides += 1
        gossip, ipfs, http = self._self_addrs()
        rec = SignedProviderRecord.sign(
            self._key,
            did,
            self._wall_ms(),
            gossip=self._allowed(gossip),
            ipfs=tuple(ipfs[:MAX_ADDRS]),
            http=http,
        )
        key = dataset_key(did)
        walk, _ = await self.lookup(key)
        req = self._request(DhtOp.ADD_PROVIDER, key, rec.encoded)
        targets = list(walk.closest)
        outcomes = await asyncio.gather(
            *(self.query(p, req) for p in targets), return_exceptions=True
        )
        stored, refused, limited, failed = [], [], [], []
        for peer, out in zip(targets, outcomes, strict=True):
            if isinstance(out, DhtResponse) and out.status is Status.OK:
                stored.append(peer)
            elif isinstance(out, DhtResponse) and out.status is Status.REFUSED:
                refused.append(peer)
            elif isinstance(out, DhtRateLimited):
                limited.append(peer)
            else:
                failed.append(peer)
                log.info("DHT: provide of %s to %s failed: %s", did.as_did_str(), peer, out)
        self._own[did] = (rec, self._now(), len(stored))
        report = ProvideReport(did, tuple(stored), tuple(refused), tuple(limited), tuple(failed))
        log.info(
            "DHT: provided %s: stored at %d peer(s), refused by %d, rate limited by %d, %d failed",
            did.as_did_str(),
            len(stored),
            len(refused),
            len(limited),
            len(failed),
        )
        return report

    # ---- the loop

    async def run_once(self) -> list[ProvideReport]:
        """One round: refresh the table if new peers came, then provide what is due."""
        connected = set(self._t.connected_peers())
        fresh = connected - self._bootstrapped
        if fresh and self.config.serve:
            # A serving node makes itself known to the peers closest to it, and learns them
            # (a light node keeps no table up: its lookups start from its connections).
            self._bootstrapped |= fresh
            await self.lookup(peer_key(self._me))
        self._bootstrapped &= connected
        now = self._now()
        self.store.expire(now)
        reports = []
        gossip, ipfs, http = self._self_addrs()
        carried = list(dict.fromkeys(await self._provided()))
        for did in list(self._own):
            if did not in carried:
                del self._own[did]  # no longer carried: its records expire where they are
        for did in carried:
            own = self._own.get(did)
            if own is not None:
                rec, at, stored = own
                now_at = (self._allowed(gossip), tuple(ipfs[:MAX_ADDRS]), http)
                moved = (rec.gossip, rec.ipfs, rec.http) != now_at
                if stored and not moved and not due_for_republish(at, now, self.store.limits):
                    continue
                if not stored and not fresh and now - at < self.config.interval_s * _S:
                    continue  # stored nowhere: tried again on new peers or next interval
            reports.append(await self.provide(did))
        return reports

    async def run(self) -> None:
        """Rounds forever (cancel the task to stop)."""
        while True:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception as e:  # a round must never end the loop
                log.warning("DHT round failed: %s", e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.interval_s)


__all__ = [
    "PROTOCOL",
    "DhtConfig",
    "DhtRateLimited",
    "DhtRefused",
    "DhtService",
    "DhtStats",
    "ProvideReport",
    "ProviderLookup",
]
