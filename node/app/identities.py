"""Node identities across key rotations and revocations (docs/operations.md, "Node key rotation").

A node key may be succeeded by another (a :class:`p2p.wire.KeyRotation` record, signed by both)
and may be revoked (a :class:`p2p.wire.KeyRevocation`, signed by the key itself or by the key it
committed to as its next one). This module keeps what the node knows of both and answers two
questions for the trust driver and the queries:

* :meth:`NodeIdentities.canonical`: the newest key of a node, following its rotations, so that
  attestations signed by an old key count as (and are shown as) the node's current identity,
  and a ``[trust] trusted_attesters`` entry naming an old key follows the rotation;
* :meth:`NodeIdentities.counts`: whether a message signed by a key at a given time still
  counts: not once the key is revoked (from its revocation's ``issued_at_ns`` on).

Pre-rotation (KERI's answer to a stolen key): a version 2 rotation ``old -> new`` commits to the
digest of the key that will succeed ``new`` (:func:`p2p.wire.next_key_digest`). Once a key's
commitment is known, only a rotation to the committed key counts: a thief holding only the
current key cannot choose the next, and a rotation it made before the commitment was known is
dropped as soon as it is. A revocation signed by the committed next key is accepted (the owner
is the only one who ever held that key) and voids any other rotation of the revoked key. A key
without a known commitment (a node's first key; a key a version 1 record introduced) keeps the
old rule: the first rotation accepted stays. A key enters an identity once: a rotation into a
key that already has a predecessor is refused, so a thief cannot make its own key an alias of
the identity (or give a stolen key a commitment of its choosing) after the fact.

Pure (no I/O): the effects and the daemon load it from the state and feed it new records.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.identity import DatasetId
from node.app.rows import KeyRevocationRecord, KeyRotationRecord
from p2p.errors import WireDecodeError
from p2p.wire import KeyRevocation, KeyRotation, decode_unverified, next_key_digest

MAX_CHAIN = 64
"""Rotations followed from one key at most (a chain is one per rotation of one node)."""


class NodeIdentities:
    """Rotation chains, pre-rotation commitments and revocations; see the module docstring."""

    def __init__(self) -> None:
        self._next: dict[DatasetId, DatasetId] = {}
        self._prev: dict[DatasetId, DatasetId] = {}
        self._commit: dict[DatasetId, bytes] = {}
        self._revoked: dict[DatasetId, int] = {}

    def add_rotation(
        self, old: DatasetId, new: DatasetId, next_digest: bytes | None = None
    ) -> bool:
        """Record ``old`` -> ``new`` (committing ``new`` to ``next_digest`` when given); whether
        it changed anything.

        Refused (False): ``old`` has a known commitment that ``new`` does not match; ``old``
        has no commitment and already rotated (the first record stays); ``new`` already
        entered from another key; the record would close a cycle. A successor of ``old``
        accepted before ``old``'s commitment was known, and not matching it, is replaced.
        """
        if old == new or self.canonical(new) == old:
            return False
        committed = self._commit.get(old)
        if committed is not None and next_key_digest(new) != committed:
            return False  # not the key `old` committed to: whoever made it lacks the next key
        if self._prev.get(new, old) != old:
            return False  # `new` is already part of an identity
        current = self._next.get(old)
        if current == new:
            return self._learn_commitment(new, next_digest)
        if current is not None:
            if committed is None:
                return False  # no commitment known: the first rotation stays
            self._drop_successor(old)  # accepted before the commitment was known
        self._next[old] = new
        self._prev[new] = old
        self._learn_commitment(new, next_digest)
        return True

    def add_revocation(self, node: DatasetId, revoked_ns: int, by: DatasetId | None = None) -> bool:
        """Record that ``node`` no longer counts from ``revoked_ns`` on (the earliest wins);
        whether it changed anything.

        ``by``: the key that signed the revocation when it is not ``node`` itself; accepted
        only if it is the key ``node`` committed to. Such a revocation beats any rotation
        ``node`` signed: with the commitment known, a rotation of ``node`` to another key is
        refused, and one accepted before was dropped when the commitment became known.
        """
        if by is not None:
            committed = self._commit.get(node)
            if committed is None or next_key_digest(by) != committed:
                return False
        known = self._revoked.get(node)
        if known is not None and known <= revoked_ns:
            return False
        self._revoked[node] = revoked_ns
        return True

    def _learn_commitment(self, key: DatasetId, digest: bytes | None) -> bool:
        """``key`` commits to ``digest`` (first one known stays); a successor of ``key`` that
        does not match it is dropped. Whether anything changed."""
        if digest is None or key in self._commit:
            return False
        self._commit[key] = digest
        successor = self._next.get(key)
        if successor is not None and next_key_digest(successor) != digest:
            self._drop_successor(key)
        return True

    def _drop_successor(self, key: DatasetId) -> None:
        successor = self._next.pop(key, None)
        if successor is not None and self._prev.get(successor) == key:
            del self._prev[successor]

    def commitment(self, key: DatasetId) -> bytes | None:
        """The digest of the key ``key`` committed to as its successor, if known."""
        return self._commit.get(key)

    def successor(self, key: DatasetId) -> DatasetId | None:
        """The key that succeeded ``key`` (its accepted rotation), if any."""
        return self._next.get(key)

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


def rotation_of(envelope: bytes) -> KeyRotation | None:
    """The rotation in a stored envelope (checked when it was received), or None."""
    try:
        msg = decode_unverified(envelope)
    except WireDecodeError:  # a stored record the decoder no longer reads: ignored, not fatal
        return None
    inner = getattr(msg, "message", None)
    return inner if isinstance(inner, KeyRotation) else None


def revocation_of(envelope: bytes) -> KeyRevocation | None:
    """The revocation in a stored envelope (checked when it was received), or None."""
    try:
        msg = decode_unverified(envelope)
    except WireDecodeError:  # as in rotation_of
        return None
    inner = getattr(msg, "message", None)
    return inner if isinstance(inner, KeyRevocation) else None


def load_records(
    identities: NodeIdentities,
    rotations: Iterable[KeyRotationRecord],
    revocations: Iterable[KeyRevocationRecord] = (),
) -> None:
    """Feed stored records to ``identities``, in the order they were received.

    Rotations are applied until nothing changes, so that the outcome does not depend on the
    order in which a commitment and a rotation it refuses arrived (a pass per link of a chain
    at most, and no more than ``MAX_CHAIN``: longer chains are not followed anyway).
    Revocations follow, once every commitment is known.
    """
    parsed: list[tuple[DatasetId, DatasetId, bytes | None]] = []
    for r in rotations:
        msg = rotation_of(r.envelope)
        if msg is not None:
            parsed.append((msg.old, msg.new, msg.next_digest))
        else:
            parsed.append((DatasetId.parse(r.old_id), DatasetId.parse(r.new_id), None))
    for _ in range(min(len(parsed), MAX_CHAIN) + 1):
        if not any([identities.add_rotation(*p) for p in parsed]):
            break
    for x in revocations:
        rev = revocation_of(x.envelope)
        by = rev.by if rev is not None else None
        identities.add_revocation(DatasetId.parse(x.node_id), x.revoked_ns, by)


__all__ = ["NodeIdentities", "load_records", "revocation_of", "rotation_of"]
