"""Finding the peers that carry a dataset: the ``/odf/providers/1.0.0`` request protocol.

A node that knows only a bootstrap peer must find the owner (or any peer) carrying the datasets
it follows, connect its gossip host to them and connect its IPFS node to theirs, because
the embedded IPFS node has no routing and fetches blocks only from peers it is connected to.

**Why a request protocol first, and the odf DHT beyond it.** Gossipsub
already tells every node which of its *connected* peers joined which topic; what a newcomer
lacks is the addresses of peers it is not connected to, and the IPFS addresses of all of them.
Gossipsub's PX (peer exchange on PRUNE) hands out signed peer records only when a mesh is
over-full, so a subscriber connected to one bootstrap node would never learn the owner's
address; py-libp2p 0.8.1's Kademlia DHT needs provider records re-published by every carrier
and several round trips through peers that may carry nothing, and still says nothing of IPFS
or HTTP addresses. Asking the connected peers directly ("who carries these datasets?") costs
one request per peer, answers with exactly the addresses a subscriber needs (gossip, IPFS,
HTTP), and reuses the length-framed request/response streams the anti-entropy protocol runs on.
It reaches neighbours and some of theirs, which is not enough in a large network: a followed
dataset that one hop did not resolve is looked up in the odf DHT (``p2p/dht_service.py``, the
``find_providers`` hook), whose signed provider records carry the same addresses.

**The exchange.** Request: JSON ``{"dids": [did, ...]}`` (at most 256, may be empty). Response:
JSON ``{"records": [record, ...]}`` (at most 32): the responder's own record first, then the
records of its connected peers that joined the topic of any requested dataset (as gossipsub
reports it), each with ``carries`` = the requested DIDs it carries. A record is ``{"peer_id",
"gossip": [multiaddr...], "ipfs": [multiaddr...], "http": url or "", "carries": [did...]}``
with at most 4 addresses of each kind, and optionally ``"ipfs_withheld"``: IPFS addresses the
peer listens on but cannot offer (loopback, in open mode), never dialled, named only when a
pull explains why its IPFS source got nothing. A node learns its peers' own records by asking
each new peer with an empty list. Records are hints: a gossip or IPFS dial authenticates the peer id
(noise), so a lying record costs one failed dial.

**The loop** (:class:`Discovery`): on each round it asks every newly connected peer for its
record; for followed datasets that have no connected peer on their topic it asks up to three
connected peers who carries them and dials the providers it hears of (and, after a partition,
the providers it knew); and it connects the IPFS node to the providers of every followed
dataset. A round runs at once on a new connection or a new subscription, otherwise after
``interval_s``, doubling (up to 16x) while rounds find nothing new and no known provider is
waiting to be redialled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from coordinator.identity import DatasetId
from p2p.dht.wire import MAX_ADDR_LEN, MAX_ADDRS, MAX_URL_LEN
from p2p.errors import NetworkNotIsolated, P2PError, WireDecodeError
from p2p.netguard import assert_loopback_multiaddr
from p2p.transport import RequestTransport, TransportError, dataset_topic

log = logging.getLogger(__name__)

PROVIDERS_PROTOCOL: Final = "/odf/providers/1.0.0"
MAX_DIDS: Final = 256
MAX_RECORDS: Final = 32
# A record's addresses and HTTP URL are capped by MAX_ADDRS, MAX_ADDR_LEN and MAX_URL_LEN of the
# DHT's provider records (p2p.dht.wire), which carry the same addresses (p2p/dht_service.py
# turns one into the other).
MAX_BODY: Final = 256 * 1024
_ASK_PEERS_PER_ROUND: Final = 3
_IPFS_CONNECTS_PER_ROUND: Final = 8
_MAX_BACKOFF: Final = 16


@dataclass(frozen=True, slots=True)
class PeerRecord:
    """Where a peer can be reached: gossip and IPFS multiaddrs, HTTP base URL, what it carries."""

    peer_id: str
    gossip: tuple[str, ...] = ()
    ipfs: tuple[str, ...] = ()
    http: str = ""
    carries: tuple[str, ...] = ()
    ipfs_withheld: tuple[str, ...] = ()
    """IPFS addresses the peer listens on but cannot offer (loopback in open mode): never
    dialled, only named when a pull says why its IPFS source got nothing."""

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object (``ipfs_withheld`` only when there are some)."""
        out: dict[str, Any] = {
            "peer_id": self.peer_id,
            "gossip": list(self.gossip[:MAX_ADDRS]),
            "ipfs": list(self.ipfs[:MAX_ADDRS]),
            "http": self.http,
            "carries": list(self.carries),
        }
        if self.ipfs_withheld:
            out["ipfs_withheld"] = list(self.ipfs_withheld[:MAX_ADDRS])
        return out


def _str(value: Any, limit: int, what: str) -> str:
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        raise WireDecodeError("bad-record", f"{what}: expected a printable string <= {limit}")
    return value


def _str_list(value: Any, limit_n: int, limit_len: int, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > limit_n:
        raise WireDecodeError("bad-record", f"{what}: expected a list of <= {limit_n} strings")
    return tuple(_str(v, limit_len, what) for v in value)


def _load(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_BODY:
        raise WireDecodeError("too-large", f"{len(data)} bytes")
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise WireDecodeError("bad-json", str(e)[:200]) from None
    if not isinstance(obj, dict):
        raise WireDecodeError("bad-json", "expected an object")
    return obj


def encode_providers_request(dids: Sequence[DatasetId]) -> bytes:
    """``{"dids": [...]}`` (at most :data:`MAX_DIDS`)."""
    if len(dids) > MAX_DIDS:
        raise ValueError(f"at most {MAX_DIDS} datasets per request")
    return json.dumps({"dids": [d.as_did_str() for d in dids]}).encode()


def decode_providers_request(data: bytes) -> list[DatasetId]:
    """Strict inverse of :func:`encode_providers_request`.

    Raises:
        WireDecodeError: not a valid request.
    """
    obj = _load(data)
    raw = _str_list(obj.get("dids"), MAX_DIDS, 128, "dids")
    try:
        return [DatasetId.parse(d) for d in raw]
    except Exception as e:
        raise WireDecodeError("bad-did", str(e)[:200]) from None


def encode_providers_response(records: Sequence[PeerRecord]) -> bytes:
    """``{"records": [...]}`` (at most :data:`MAX_RECORDS`)."""
    return json.dumps({"records": [r.to_json() for r in records[:MAX_RECORDS]]}).encode()


def decode_providers_response(data: bytes) -> list[PeerRecord]:
    """Strict inverse of :func:`encode_providers_response`.

    Raises:
        WireDecodeError: not a valid response.
    """
    obj = _load(data)
    raw = obj.get("records")
    if not isinstance(raw, list) or len(raw) > MAX_RECORDS:
        raise WireDecodeError("bad-record", f"records: expected a list of <= {MAX_RECORDS}")
    out = []
    for r in raw:
        if not isinstance(r, dict):
            raise WireDecodeError("bad-record", "record: expected an object")
        http = _str(r.get("http", ""), MAX_URL_LEN, "http")
        if http and not http.startswith(("http://", "https://")):
            raise WireDecodeError("bad-record", "http: expected an http(s) URL")
        out.append(
            PeerRecord(
                peer_id=_str(r.get("peer_id"), 128, "peer_id"),
                gossip=_str_list(r.get("gossip", []), MAX_ADDRS, MAX_ADDR_LEN, "gossip"),
                ipfs=_str_list(r.get("ipfs", []), MAX_ADDRS, MAX_ADDR_LEN, "ipfs"),
                http=http,
                carries=_str_list(r.get("carries", []), MAX_DIDS, 128, "carries"),
                ipfs_withheld=_str_list(
                    r.get("ipfs_withheld", []), MAX_ADDRS, MAX_ADDR_LEN, "ipfs_withheld"
                ),
            )
        )
    return out


class DiscoveryTransport(RequestTransport, Protocol):
    """What discovery needs of the gossip transport: what the DHT needs, and who joined which
    topic."""

    async def topic_peers(self) -> dict[str, set[str]]:
        """Every topic's peers known to have joined it."""
        ...


@dataclass(slots=True)
class RoundReport:
    """What one discovery round did (for logs and tests)."""

    asked: int = 0
    learned: int = 0
    dialled: list[str] = field(default_factory=list)
    ipfs_connected: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    """Known providers of a dataset with no connected carrier that could not be dialled."""
    from_dht: int = 0
    """Provider records the DHT gave (datasets no neighbour carried)."""
    request_s: list[float] = field(default_factory=list)
    """How long each answered providers request took (the round's own clock): an operator
    sees in the log what one exchange with a neighbour costs (the calibration bench reads it)."""


def _median_ms(durations: Sequence[float]) -> str:
    """The log's account of a round's requests: ``"median 12 ms"``, ``"no answer"``."""
    if not durations:
        return "no answer"
    return f"median {statistics.median(durations) * 1e3:.0f} ms"


class Discovery:
    """Serves ``/odf/providers/1.0.0`` and runs the discovery loop; see the module docstring."""

    def __init__(
        self,
        transport: DiscoveryTransport,
        *,
        self_record: Callable[[], PeerRecord],
        carries: Callable[[DatasetId], bool],
        followed: Callable[[], Sequence[DatasetId]],
        connect_ipfs: Callable[[str], Awaitable[None]] | None,
        rng: random.Random,
        interval_s: float = 10.0,
        request_timeout_s: float = 5.0,
        loopback_only: bool = True,
        on_record: Callable[[PeerRecord], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        record_ttl_s: float | None = None,
        find_providers: Callable[[Sequence[DatasetId]], Awaitable[list[PeerRecord]]] | None = None,
        ask_dht_after_s: float = 30.0,
    ) -> None:
        """``followed`` lists the datasets this node follows; ``carries`` says whether this
        node carries one (owns or follows it); ``connect_ipfs`` connects its IPFS node.
        ``loopback_only``: dial no address that is not ``/ip4/127.x`` (gossip or IPFS), whatever
        a record says. ``on_record`` receives each connected peer's own record (the node
        remembers its addresses, to redial it after a restart). Each connected peer's own
        record is asked for again after ``record_ttl_s`` (default ``4 * interval_s``).
        ``find_providers`` asks the DHT (``p2p/dht_service.py``) who carries datasets no
        connected peer carries and no neighbour named, each at most every
        ``ask_dht_after_s``."""
        self._loopback_only = loopback_only
        self._on_record = on_record
        self._t = transport
        self._self_record = self_record
        self._carries = carries
        self._followed = followed
        self._connect_ipfs = connect_ipfs
        self._rng = rng
        self.interval_s = interval_s
        self._timeout_s = request_timeout_s
        self._first_hand: dict[str, PeerRecord] = {}
        self._providers: dict[str, PeerRecord] = {}
        # peer -> when its own record was last asked for (monotonic s); asked again after
        # record_ttl_s: a peer's addresses change while connected (a relay slot reserved
        # behind NAT), and the records this node hands out must follow.
        self._asked: dict[str, float] = {}
        self._clock = clock
        self.record_ttl_s = record_ttl_s if record_ttl_s is not None else 4 * interval_s
        # peer id -> {IPFS multiaddr: why the last connect to it failed}; cleared on success.
        self._ipfs_failed: dict[str, dict[str, str]] = {}
        self._wake = asyncio.Event()
        self._idle = 0
        self.rounds = 0
        self._find_providers = find_providers
        self._ask_dht_after_s = ask_dht_after_s
        self._dht_asked: dict[str, float] = {}

    def trigger(self) -> None:
        """Run a round now (a new connection or a new subscription)."""
        self._idle = 0
        self._wake.set()

    def providers(self) -> list[PeerRecord]:
        """Records of peers known to carry something this node asked about."""
        return list(self._providers.values())

    def ipfs_problems(self, did: DatasetId) -> tuple[list[tuple[str, str]], list[str]]:
        """Why this node's IPFS may get nothing of ``did``: ``(multiaddr, error)`` of every IPFS
        address of a provider whose last connect failed, and the IPFS addresses providers
        withheld (loopback) while offering none."""
        d = did.as_did_str()
        failed: list[tuple[str, str]] = []
        withheld: list[str] = []
        for pid, rec in self._providers.items():
            if d not in rec.carries:
                continue
            failed += sorted(self._ipfs_failed.get(pid, {}).items())
            if not rec.ipfs:
                withheld += rec.ipfs_withheld
        return failed, withheld

    # ---- serving

    async def serve(self, peer: str, data: bytes) -> bytes:
        """Answer a request: our own record, then connected peers on the requested topics."""
        try:
            dids = decode_providers_request(data)
        except WireDecodeError:
            return encode_providers_response([])
        me = self._self_record()
        out = [replace(me, carries=tuple(d.as_did_str() for d in dids if self._carries(d)))]
        if dids:
            connected = set(self._t.connected_peers())
            try:
                topics = await self._t.topic_peers()
            except (TransportError, P2PError):
                topics = {}
            for pid, rec in self._first_hand.items():
                if pid == peer or pid not in connected:
                    continue
                carries = tuple(
                    d.as_did_str()
                    for d in dids
                    if pid in topics.get(dataset_topic(d.as_multibase()), ())
                )
                if carries:
                    out.append(replace(rec, carries=carries))
        return encode_providers_response(out)

    # ---- the loop

    async def run(self) -> None:
        """Run rounds forever (cancel the task to stop)."""
        while True:
            try:
                report = await self.run_once()
                # No backing off while a known provider is unreachable (a partition): the
                # first round after it heals reconnects.
                busy = report.learned or report.dialled or report.unreachable
                self._idle = 0 if busy else min(self._idle + 1, 4)
            except Exception as e:  # a round must never end the loop
                log.warning("discovery round failed: %s", e)
            self._wake.clear()
            delay = self.interval_s * (2**self._idle if self._idle else 1)
            delay = min(delay, self.interval_s * _MAX_BACKOFF) * self._rng.uniform(0.8, 1.2)
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    async def _ask(
        self, peer: str, dids: Sequence[DatasetId], report: RoundReport
    ) -> list[PeerRecord]:
        start = self._clock()
        raw = await self._t.request(
            peer, PROVIDERS_PROTOCOL, encode_providers_request(dids), self._timeout_s
        )
        records = decode_providers_response(raw)
        report.request_s.append(self._clock() - start)
        return records

    def _allowed(self, addr: str) -> bool:
        if not self._loopback_only:
            return True
        try:
            assert_loopback_multiaddr(addr)
        except NetworkNotIsolated:
            log.warning("discovery: refusing non-loopback address %r (loopback-only)", addr)
            return False
        return True

    def _learn(self, peer: str, records: Sequence[PeerRecord], report: RoundReport) -> None:
        me = self._t.peer_id
        for raw in records:
            rec = replace(
                raw,
                gossip=tuple(a for a in raw.gossip if self._allowed(a)),
                ipfs=tuple(a for a in raw.ipfs if self._allowed(a)),
            )
            if rec.peer_id == me:
                continue
            if rec.peer_id == peer:
                self._first_hand[peer] = replace(rec, carries=())
                if self._on_record is not None and rec.gossip:
                    self._on_record(rec)
            if rec.carries:
                old = self._providers.get(rec.peer_id)
                carries = tuple(dict.fromkeys([*(old.carries if old else ()), *rec.carries]))
                if old is None or set(carries) != set(old.carries) or old.gossip != rec.gossip:
                    report.learned += 1
                self._providers[rec.peer_id] = replace(rec, carries=carries)

    async def run_once(self) -> RoundReport:
        """One round (see the module docstring)."""
        self.rounds += 1
        report = RoundReport()
        connected = set(self._t.connected_peers())
        now = self._clock()
        # A peer that reconnects is asked again (it may have moved), and one whose record is
        # older than record_ttl_s.
        self._asked = {
            p: t for p, t in self._asked.items() if p in connected and now - t < self.record_ttl_s
        }
        followed = list(self._followed())
        # 1. Each new peer's own record (what it carries among ours, and its addresses).
        await self._ask_new_peers(connected, followed, now, report)
        if not followed:
            return report
        try:
            topics = await self._t.topic_peers()
        except (TransportError, P2PError):
            topics = {}
        # 2. Followed datasets with no connected peer on their topic: ask around, dial.
        lacking = [
            d
            for d in followed
            if not (topics.get(dataset_topic(d.as_multibase()), set()) & connected)
        ]
        if lacking:
            await self._ask_around(lacking, connected, report)
            await self._ask_dht(lacking, connected, now, report)
            await self._dial_providers(lacking, connected, report)
        # 3. The IPFS node connects to the providers of what we follow (bitswap needs it).
        if self._connect_ipfs is not None:
            for rec in self._ipfs_targets(followed, connected, topics)[:_IPFS_CONNECTS_PER_ROUND]:
                await self._connect_ipfs_to(self._connect_ipfs, rec, report)
        if report.dialled or report.learned:
            log.info(
                "discovery: asked %d (%s), learned %d provider record(s) (%d from the DHT), "
                "dialled %s",
                report.asked,
                _median_ms(report.request_s),
                report.learned,
                report.from_dht,
                report.dialled,
            )
        return report

    async def _ask_new_peers(
        self, connected: set[str], followed: list[DatasetId], now: float, report: RoundReport
    ) -> None:
        """Ask each connected peer not asked within the TTL for its own record."""
        for peer in sorted(connected - self._asked.keys()):
            # Asked once per connection and TTL, answered or not: a peer that does not speak
            # the protocol (an older node) is not asked again every round.
            self._asked[peer] = now
            try:
                records = await self._ask(peer, followed[:MAX_DIDS], report)
            except (TransportError, WireDecodeError, P2PError) as e:
                log.debug("providers request to %s failed: %s", peer, e)
                continue
            report.asked += 1
            self._learn(peer, records, report)

    async def _ask_around(
        self, lacking: list[DatasetId], connected: set[str], report: RoundReport
    ) -> None:
        """Ask a few random connected peers who carries the ``lacking`` datasets."""
        candidates = sorted(connected)
        self._rng.shuffle(candidates)
        for peer in candidates[:_ASK_PEERS_PER_ROUND]:
            for i in range(0, len(lacking), MAX_DIDS):
                try:
                    records = await self._ask(peer, lacking[i : i + MAX_DIDS], report)
                except (TransportError, WireDecodeError, P2PError):
                    break
                report.asked += 1
                self._learn(peer, records, report)

    async def _ask_dht(
        self, lacking: list[DatasetId], connected: set[str], now: float, report: RoundReport
    ) -> None:
        """Ask the DHT who carries the ``lacking`` datasets for which no known provider is
        connected (one hop found none, or none that answers), each at most every
        ``ask_dht_after_s``."""
        if self._find_providers is None:
            return
        ask = []
        for d in lacking:
            did = d.as_did_str()
            known = any(
                did in rec.carries and pid in connected for pid, rec in self._providers.items()
            )
            if known or now - self._dht_asked.get(did, -1e18) < self._ask_dht_after_s:
                continue
            self._dht_asked[did] = now
            ask.append(d)
        if not ask:
            return
        try:
            records = await self._find_providers(ask)
        except (TransportError, WireDecodeError, P2PError) as e:
            log.info("discovery: the DHT lookup failed: %s", e)
            return
        report.from_dht += len(records)
        self._learn("", records, report)

    async def _dial_providers(
        self, lacking: list[DatasetId], connected: set[str], report: RoundReport
    ) -> None:
        """Dial each known, unconnected provider of a ``lacking`` dataset (its first gossip
        address that answers); ``connected`` gains the peers dialled."""
        wanted = {d.as_did_str() for d in lacking}
        for pid, rec in list(self._providers.items()):
            if pid in connected or not wanted.intersection(rec.carries):
                continue
            for addr in rec.gossip:
                try:
                    await self._t.connect(addr)
                except (TransportError, P2PError) as e:
                    log.info("could not dial provider %s at %s: %s", pid, addr, e)
                    continue
                report.dialled.append(pid)
                connected.add(pid)
                break
            else:
                if rec.gossip:
                    report.unreachable.append(pid)

    def _ipfs_targets(
        self, followed: list[DatasetId], connected: set[str], topics: dict[str, set[str]]
    ) -> list[PeerRecord]:
        """The records whose IPFS node ours should connect to: providers of what we follow,
        then connected peers on a followed topic that are not known providers."""
        wanted_all = {d.as_did_str() for d in followed}
        targets = [
            rec
            for pid, rec in self._providers.items()
            if wanted_all.intersection(rec.carries) and rec.ipfs
        ]
        for pid in connected:
            own = self._first_hand.get(pid)
            if own is not None and own.ipfs and pid not in self._providers:
                on_topic = any(
                    pid in topics.get(dataset_topic(d.as_multibase()), ()) for d in followed
                )
                if on_topic:
                    targets.append(own)
        return targets

    async def _connect_ipfs_to(
        self, connect: Callable[[str], Awaitable[None]], rec: PeerRecord, report: RoundReport
    ) -> None:
        """Connect our IPFS node to ``rec``'s first IPFS address that answers; remember why
        each failed when none did."""
        failed: dict[str, str] = {}
        for addr in rec.ipfs:
            try:
                await connect(addr)
            except Exception as e:  # a provider's IPFS node being down is normal
                if addr not in self._ipfs_failed.get(rec.peer_id, {}):
                    log.info("IPFS connect to %s failed: %s", addr, e)
                failed[addr] = str(e) or type(e).__name__
                continue
            report.ipfs_connected.append(rec.peer_id)
            self._ipfs_failed.pop(rec.peer_id, None)
            break
        else:
            if failed:
                self._ipfs_failed[rec.peer_id] = failed


__all__ = [
    "MAX_DIDS",
    "MAX_RECORDS",
    "PROVIDERS_PROTOCOL",
    "Discovery",
    "DiscoveryTransport",
    "PeerRecord",
    "RoundReport",
    "decode_providers_request",
    "decode_providers_response",
    "encode_providers_request",
    "encode_providers_response",
]
