"""The routing table: up to ``k`` peers per bucket, a bucket per shared prefix length.

The rules are go-libp2p-kad-dht's (``kbucket/table.go``): a peer that answers is (re)added;
a full bucket takes a new peer only in place of one that has failed to answer
(``max_failures`` times in a row), never by evicting a peer that works. So a flood of fresh
identities cannot push out the peers the table already relies on: it only fills free places,
and at most ``k`` of them per bucket, whatever the number of identities.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from p2p.dht.keys import DhtKey, distance, shared_prefix_len

K = 20
"""Bucket size and the number of closest peers a lookup returns (go-libp2p-kad-dht)."""


@dataclass(slots=True)
class _Entry:
    key: DhtKey
    last_seen_ns: int
    failures: int = 0


@dataclass
class RoutingTable:
    """The peers this node knows, by the key of their peer id.

    Args:
        own: this node's key (never added).
        k: the bucket size.
        max_failures: failed queries in a row after which a peer may be replaced.
    """

    own: DhtKey
    k: int = K
    max_failures: int = 2
    _buckets: dict[int, OrderedDict[str, _Entry]] = field(default_factory=dict, repr=False)
    """Shared prefix length -> its bucket, made when its first peer comes (most of the 257
    possible buckets of a table stay empty)."""

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())

    def __contains__(self, peer: str) -> bool:
        return any(peer in b for b in self._buckets.values())

    def _bucket(self, key: DhtKey) -> OrderedDict[str, _Entry]:
        i = shared_prefix_len(self.own, key)
        bucket = self._buckets.get(i)
        if bucket is None:
            bucket = self._buckets[i] = OrderedDict()
        return bucket

    def seen(self, peer: str, key: DhtKey, now_ns: int) -> bool:
        """``peer`` answered (or connected): add or refresh it; False when its bucket is full
        of peers that work (the new one is not added)."""
        if key == self.own:
            return False
        bucket = self._bucket(key)
        entry = bucket.get(peer)
        if entry is not None:
            entry.last_seen_ns, entry.failures = now_ns, 0
            bucket.move_to_end(peer)
            return True
        if len(bucket) >= self.k:
            stale = next((p for p, e in bucket.items() if e.failures >= self.max_failures), None)
            if stale is None:
                return False
            del bucket[stale]
        bucket[peer] = _Entry(key, now_ns)
        return True

    def failed(self, peer: str, key: DhtKey) -> None:
        """A query to ``peer`` failed or timed out (it stays until a new peer needs its place)."""
        bucket = self._buckets.get(shared_prefix_len(self.own, key))
        entry = bucket.get(peer) if bucket is not None else None
        if entry is not None:
            entry.failures += 1

    def remove(self, peer: str, key: DhtKey) -> None:
        """Forget ``peer`` (it is not an odf peer, or it misbehaved)."""
        bucket = self._buckets.get(shared_prefix_len(self.own, key))
        if bucket is not None:
            bucket.pop(peer, None)

    def closest(self, target: DhtKey, n: int | None = None) -> list[tuple[str, DhtKey]]:
        """The ``n`` (default ``k``) known peers closest to ``target``, closest first; peers
        that failed their last queries come after the others."""
        entries = [(p, e) for b in self._buckets.values() for p, e in b.items()]
        entries.sort(
            key=lambda pe: (pe[1].failures >= self.max_failures, distance(pe[1].key, target))
        )
        return [(p, e.key) for p, e in entries[: n if n is not None else self.k]]

    def bucket_sizes(self) -> dict[int, int]:
        """Non-empty buckets: shared prefix length -> peers (for status and tests)."""
        return {i: len(b) for i, b in sorted(self._buckets.items()) if b}


__all__ = ["K", "RoutingTable"]
