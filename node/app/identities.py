"""Node identities across key rotations and revocations (docs/operations.md, "Node key rotation").

A node key may be succeeded by another (a :class:`p2p.wire.KeyRotation` record, signed by both)
and may be revoked (a :class:`p2p.wire.KeyRevocation`, signed by the key itself). This module
keeps what the node knows of both and answers two questions for the trust driver and the
queries:

* :meth:`NodeIdentities.canonical`: the newest key of a node, following its rotations, so that
  attestations signed by an old key count as (and are shown as) the node's current identity,
  and a ``[trust] trusted_attesters`` entry naming an old key follows the rotation;
* :meth:`NodeIdentities.counts`: whether a message signed by a key at a given time still
  counts: not once the key is revoked (from its revocation's ``issued_at_ns`` on).

Pure (no I/O): the effects and the daemon load it from the state and feed it new records.
"""

from __future__ import annotations

from coordinator.identity import DatasetId

MAX_CHAIN = 64
"""Rotations followed from one key at most (a chain is one per rotation of one node)."""


class NodeIdentities:
    """Rotation chains and revocations; see the module docstring."""

    def __init__(self) -> None:
        self._next: dict[DatasetId, DatasetId] = {}
        self._revoked: dict[DatasetId, int] = {}

    def add_rotation(self, old: DatasetId, new: DatasetId) -> bool:
        """Record ``old`` -> ``new``; False (ignored) if ``old`` already rotated, or if the
        record would close a cycle (a chain never leads back to a key it left)."""
        if old == new or old in self._next or self.canonical(new) == old:
            return False
        self._next[old] = new
        return True

    def add_revocation(self, node: DatasetId, revoked_ns: int) -> bool:
        """Record that ``node`` no longer counts from ``revoked_ns`` on (the earliest wins)."""
        known = self._revoked.get(node)
        if known is not None and known <= revoked_ns:
            return False
        self._revoked[node] = revoked_ns
        return True

    def canonical(self, node: DatasetId) -> DatasetId:
        """The newest key of ``node``'s rotation chain (``node`` itself if it never rotated)."""
        seen = 0
        while node in self._next and seen < MAX_CHAIN:
            node = self._next[node]
            seen += 1
        return node

    def aliases(self, node: DatasetId) -> set[DatasetId]:
        """Every key known to be ``node``'s (its canonical key and all keys leading to it)."""
        target = self.canonical(node)
        return {k for k in (*self._next, target) if self.canonical(k) == target}

    def revoked_at(self, node: DatasetId) -> int | None:
        """When ``node`` was revoked (ns), or None."""
        return self._revoked.get(node)

    def counts(self, signer: DatasetId, issued_at_ns: int | None) -> bool:
        """Whether a message signed by ``signer`` at ``issued_at_ns`` still counts (an unknown
        time counts as now: not once the key is revoked)."""
        revoked = self._revoked.get(signer)
        if revoked is None:
            return True
        return issued_at_ns is not None and issued_at_ns < revoked

    @property
    def empty(self) -> bool:
        """Whether no record is known (every key is its own node and counts)."""
        return not self._next and not self._revoked


__all__ = ["NodeIdentities"]
