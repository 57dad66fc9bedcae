"""The protocol core's per-peer and per-dataset state, and its seen-cache.

Plain mutable records owned by one :class:`~p2p.core.protocol.ProtocolCore`; nothing here
decides anything.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from coordinator.multiformats import Multihash
from p2p.core.decisions import Decision, Ignore
from p2p.wire import EquivocationProof, HeadAnnouncement, SignedMessage, decode_unverified


@dataclass(slots=True)
class Delayed:
    data: bytes
    received_ns: int
    order: tuple[int, int]


@dataclass(slots=True)
class PeerState:
    tokens: float
    refilled_ns: int
    score: float = 0.0
    scored_ns: int = 0
    connected: bool = False
    graylisted: bool = False
    # Messages that arrived with the token bucket empty, oldest first. Keyed by dataset for
    # announcements (a newer head replaces an older one of the same dataset) and by content id
    # for everything else.
    backlog: OrderedDict[bytes, Delayed] = field(default_factory=OrderedDict)
    backlog_bytes: int = 0


K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class KeyBucket:
    """One key's token bucket: a signing key's (rule 4a: forwarding per signer), a DHT
    sender's (``p2p/dht_service.py``)."""

    tokens: float
    refilled_ns: int


class KeyBuckets(Generic[K]):
    """Token buckets by key, each created full; past ``max_kept`` keys the least recently used
    is forgotten (it starts full again, as a fresh key would)."""

    __slots__ = ("_buckets", "max_kept")

    def __init__(self, max_kept: int) -> None:
        self._buckets: OrderedDict[K, KeyBucket] = OrderedDict()
        self.max_kept = max_kept

    def __len__(self) -> int:
        return len(self._buckets)

    def bucket(self, key: K, now_ns: int, burst: float) -> KeyBucket:
        """``key``'s bucket, now the most recently used (made with ``burst`` tokens if new)."""
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = KeyBucket(burst, now_ns)
            while len(self._buckets) > self.max_kept:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return b


@dataclass(slots=True)
class FetchState:
    announcement: SignedMessage
    started_ns: int


@dataclass(slots=True)
class DatasetState:
    accepted: SignedMessage | None = None
    inflight: FetchState | None = None
    queued: SignedMessage | None = None
    # The announcements remembered per slot ``(epoch, sequence)``, as their envelopes (decoded
    # again by :func:`kept` when one is looked at, which is rare: a repeated slot, anti-entropy,
    # a late fetch). A decoded announcement holds ~1.3 KB of Python objects against the
    # envelope's ~0.35 KB, and a node following 1,000 datasets keeps 16,000 of them: the core
    # then held 20.8 MB decoded, 6.8 MB as envelopes, its seen-cache included
    # (tests/unit/test_follow_memory.py; docs/operations.md, "Following 1,000 datasets").
    history: OrderedDict[tuple[int, int], bytes] = field(default_factory=OrderedDict)
    rejected: OrderedDict[bytes, None] = field(default_factory=OrderedDict)
    proof: EquivocationProof | None = None
    proved_slots: OrderedDict[tuple[int, int], None] = field(default_factory=OrderedDict)
    # A head whose fetch failed or was abandoned, to fetch again at ``retry_at_ns``.
    retry: SignedMessage | None = None
    retry_at_ns: int = 0
    attempts: int = 0
    # Sources this node follows the dataset from (URL subscriptions, ``docs/follow.md``): each
    # with the newest head accepted from it (None until the first poll brought one).
    sources: dict[str, Multihash | None] = field(default_factory=dict)


def supersede(out: list[Decision]) -> None:
    """A candidate head leaves the fetch queue without a fetch of its own: a newer head of its
    dataset replaced it (or was accepted first). Its outcome, so none ends without one."""
    out.append(Ignore("", "superseded"))


def announcement_of(sm: SignedMessage) -> HeadAnnouncement:
    msg = sm.message
    assert isinstance(msg, HeadAnnouncement)
    return msg


def kept(envelope: bytes) -> SignedMessage:
    """A remembered announcement decoded again from its envelope (checked when it arrived: its
    signature is not checked again)."""
    sm = decode_unverified(envelope)
    assert isinstance(sm, SignedMessage)
    return sm


def order_of(sm: SignedMessage) -> tuple[int, int]:
    a = announcement_of(sm)
    return (a.epoch, a.sequence)


class SeenCache:
    """Content ids seen recently, with expiry and a hard capacity (oldest evicted first).

    Each entry remembers whether the message was bad (``reason``) so a re-sent bad message can
    be penalised again without re-checking it.
    """

    def __init__(self, ttl_ns: int, capacity: int) -> None:
        """Entries live ``ttl_ns``; at most ``capacity`` entries are kept."""
        self._ttl = ttl_ns
        self._cap = capacity
        self._entries: OrderedDict[bytes, tuple[int, str | None]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, cid: bytes, now_ns: int) -> tuple[bool, str | None]:
        """``(seen, bad_reason)`` for ``cid``."""
        entry = self._entries.get(cid)
        if entry is None or entry[0] <= now_ns:
            return (False, None)
        return (True, entry[1])

    def add(self, cid: bytes, now_ns: int, bad_reason: str | None = None) -> None:
        """Remember ``cid`` until ``now_ns + ttl``."""
        self._entries.pop(cid, None)
        self._entries[cid] = (now_ns + self._ttl, bad_reason)
        while len(self._entries) > self._cap:
            self._entries.popitem(last=False)

    def expire(self, now_ns: int) -> None:
        """Drop expired entries (insertion order is expiry order for a monotonic clock)."""
        while self._entries:
            cid, (expiry, _) = next(iter(self._entries.items()))
            if expiry > now_ns:
                break
            del self._entries[cid]
