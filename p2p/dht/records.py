"""Provider records: which peers carry a dataset, kept for a while, within fixed bounds.

A record says "``provider`` carries the dataset whose key is ``key``" and holds the signed peer
record the provider gave (its gossip, IPFS, HTTP and relay addresses), so one lookup is enough to
dial and pull. Records expire after ``ttl_ns`` (go-libp2p-kad-dht: 48 h) unless the provider
provides again; a provider republishes every ``republish_ns`` (22 h), well inside the TTL.

Bounds, whatever a flood of fresh identities sends: ``per_key`` records per dataset (a new
provider of a full key replaces the record closest to expiry, never a fresher one), ``per_provider``
keys per provider, ``max_records`` in all (beyond it a new record is refused, and the store says
so: :meth:`ProviderStore.add` returns False, which the driver reports to the sender), and
``max_record_bytes`` per peer record.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from p2p.dht.keys import DhtKey

HOUR_NS = 3600 * 1_000_000_000


@dataclass(frozen=True)
class RecordLimits:
    """The store's bounds and lifetimes."""

    ttl_ns: int = 48 * HOUR_NS
    republish_ns: int = 22 * HOUR_NS
    per_key: int = 20
    per_provider: int = 4096
    max_records: int = 200_000
    max_record_bytes: int = 4096


@dataclass(frozen=True)
class ProviderRecord:
    """``provider`` carries the dataset of ``key`` until ``expires_ns``."""

    key: DhtKey
    provider: str
    peer_record: bytes
    expires_ns: int


@dataclass
class ProviderStore:
    """The provider records this node serves (bounded; see the module docstring)."""

    limits: RecordLimits = field(default_factory=RecordLimits)
    _by_key: dict[DhtKey, dict[str, ProviderRecord]] = field(
        default_factory=lambda: defaultdict(dict), repr=False
    )
    _keys_of: dict[str, set[DhtKey]] = field(default_factory=lambda: defaultdict(set), repr=False)
    _count: int = 0
    _expiries: list[tuple[int, DhtKey, str]] = field(default_factory=list, repr=False)
    """A min-heap of every record's expiry (a refreshed record leaves a stale entry behind,
    skipped when popped): expiring costs O(log n) per record, never a scan."""

    def __len__(self) -> int:
        return self._count

    def add(self, key: DhtKey, provider: str, peer_record: bytes, now_ns: int) -> bool:
        """Store (or refresh) a record; False when a bound refuses it."""
        lim = self.limits
        if len(peer_record) > lim.max_record_bytes:
            return False
        records = self._by_key[key]
        record = ProviderRecord(key, provider, peer_record, now_ns + lim.ttl_ns)
        if provider in records:
            records[provider] = record
            self._push(record)
            return True
        if len(self._keys_of[provider]) >= lim.per_provider:
            return False
        if len(records) >= lim.per_key:
            oldest = min(records.values(), key=lambda r: r.expires_ns)
            if oldest.expires_ns >= record.expires_ns:
                return False
            self._drop(oldest)
        elif self._count >= lim.max_records:
            self.expire(now_ns)
            if self._count >= lim.max_records:
                return False
        records[provider] = record
        self._keys_of[provider].add(key)
        self._count += 1
        self._push(record)
        return True

    def providers(self, key: DhtKey, now_ns: int, limit: int | None = None) -> list[ProviderRecord]:
        """The live records of ``key``, freshest first (at most ``limit``, default ``per_key``)."""
        live = [r for r in self._by_key.get(key, {}).values() if r.expires_ns > now_ns]
        live.sort(key=lambda r: -r.expires_ns)
        return live[: limit if limit is not None else self.limits.per_key]

    def expire(self, now_ns: int) -> int:
        """Drop every expired record; how many were dropped."""
        dropped = 0
        heap = self._expiries
        while heap and heap[0][0] <= now_ns:
            expires_ns, key, provider = heapq.heappop(heap)
            r = self._by_key.get(key, {}).get(provider)
            if r is not None and r.expires_ns == expires_ns:
                self._drop(r)
                dropped += 1
        return dropped

    def _push(self, r: ProviderRecord) -> None:
        heapq.heappush(self._expiries, (r.expires_ns, r.key, r.provider))
        if len(self._expiries) > 2 * self._count + 64:
            # Refreshes left stale entries: rebuild from the live records (amortised O(1)).
            self._expiries = [
                (x.expires_ns, x.key, x.provider)
                for recs in self._by_key.values()
                for x in recs.values()
            ]
            heapq.heapify(self._expiries)

    def _drop(self, r: ProviderRecord) -> None:
        records = self._by_key.get(r.key)
        if records is None or records.pop(r.provider, None) is None:
            return
        if not records:
            del self._by_key[r.key]
        keys = self._keys_of[r.provider]
        keys.discard(r.key)
        if not keys:
            del self._keys_of[r.provider]
        self._count -= 1


def due_for_republish(provided_at_ns: int, now_ns: int, limits: RecordLimits) -> bool:
    """Whether a provider that last provided at ``provided_at_ns`` should provide again."""
    return now_ns - provided_at_ns >= limits.republish_ns


__all__ = ["HOUR_NS", "ProviderRecord", "ProviderStore", "RecordLimits", "due_for_republish"]
