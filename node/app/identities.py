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
is the only one who ever held that key) and voids any other rotation of the revoked key. A node's
first key gets its commitment from a :class:`p2p.wire.KeyInception` (signed by that key; a key a
version 1 rotation introduced gets one the same way): the first inception known for a key stays,
a different one (a thief's) is refused, and an inception for a key that already rotated, or whose
commitment a version 2 rotation set, is refused (a version 2 rotation's commitment, signed by the
previous key too, replaces an inception's). A key without a known commitment keeps the old rule:
the first rotation accepted stays. A key enters an identity once: a rotation into a
key that already has a predecessor is refused, so a thief cannot make its own key an alias of
the identity (or give a stolen key a commitment of its choosing) after the fact.

Bounded (issue 39): a record that names no trusted node's key (``kept`` false: a stranger's)
is held within ``cap`` records of its kind, the oldest accepted evicted first, as the state holds
them (``[storage] key_records_max``); a kept record is never evicted. Lookups walk one chain
(``canonical``, ``aliases``: O(chain length), never every record known).

Pure (no I/O): the effects and the daemon load it from the state and feed it new records.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Literal, TypeVar

from coordinator.identity import DatasetId
from node.app.rows import KeyInceptionRecord, KeyRevocationRecord, KeyRotationRecord
from p2p.errors import WireDecodeError
from p2p.wire import (
    KeyInception,
    KeyRevocation,
    KeyRotation,
    decode_unverified,
    next_key_digest,
)

MAX_CHAIN = 64
"""Rotations followed from one key at most (a chain is one per rotation of one node)."""

_M = TypeVar("_M", KeyRotation, KeyRevocation, KeyInception)

RecordKind = Literal["rotation", "revocation", "inception"]

InceptionOutcome = Literal["accepted", "known", "conflict", "rotated", "committed"]
"""What :meth:`NodeIdentities.add_inception` did: ``accepted`` (the key's commitment now),
``known`` (the same commitment was known: nothing changed), ``conflict`` (another inception of
the key is known: a thief's or the owner's, whichever came first stays), ``rotated`` (the key
already rotated: its first rotation stays) or ``committed`` (a version 2 rotation into the key
set its commitment)."""


class NodeIdentities:
    """Rotation chains, pre-rotation commitments and revocations; see the module docstring."""

    def __init__(self, cap: int | None = None) -> None:
        """``cap``: strangers' records held per kind (None: unbounded, the CLI's view)."""
        self._next: dict[DatasetId, DatasetId] = {}
        self._prev: dict[DatasetId, DatasetId] = {}
        self._commit: dict[DatasetId, bytes] = {}
        self._incepted: set[DatasetId] = set()
        """Keys whose commitment came from an inception (a version 2 rotation's replaces it)."""
        self._revoked: dict[DatasetId, int] = {}
        self._cap = cap
        # Strangers' records per kind, oldest accepted first, keyed by the key they are about
        # (a rotation's old key): what eviction drops. Kept records are not in them.
        self._strangers: dict[RecordKind, OrderedDict[DatasetId, None]] = {
            "rotation": OrderedDict(),
            "revocation": OrderedDict(),
            "inception": OrderedDict(),
        }

    def _held(self, kind: RecordKind, key: DatasetId, kept: bool) -> None:
        """Account for an accepted record of ``kind`` about ``key``; evict the oldest strangers'
        records of that kind beyond the cap."""
        order = self._strangers[kind]
        if kept:
            order.pop(key, None)
            return
        order[key] = None
        order.move_to_end(key)
        while self._cap is not None and len(order) > self._cap:
            oldest, _ = order.popitem(last=False)
            self._evict(kind, oldest)

    def _evict(self, kind: RecordKind, key: DatasetId) -> None:
        if kind == "rotation":
            new = self._next.get(key)
            self._drop_successor(key)
            if new is not None and new not in self._incepted:
                self._commit.pop(new, None)  # learnt from the evicted record only
        elif kind == "revocation":
            self._revoked.pop(key, None)
        elif key in self._incepted:
            self._incepted.discard(key)
            self._commit.pop(key, None)

    def add_inception(
        self, node: DatasetId, digest: bytes, *, kept: bool = True
    ) -> InceptionOutcome:
        """``node`` commits to the key whose digest is ``digest`` (a :class:`KeyInception`);
        see :data:`InceptionOutcome`. ``kept``: never evicted (else a stranger's record,
        within the cap)."""
        known = self._commit.get(node)
        if known is not None:
            if known == digest:
                if node in self._incepted:
                    self._held("inception", node, kept)
                return "known"
            return "conflict" if node in self._incepted else "committed"
        if node in self._next:
            return "rotated"  # its first rotation stays (it had no commitment then)
        self._commit[node] = digest
        self._incepted.add(node)
        self._held("inception", node, kept)
        return "accepted"

    def add_rotation(
        self,
        old: DatasetId,
        new: DatasetId,
        next_digest: bytes | None = None,
        *,
        kept: bool = True,
    ) -> bool:
        """Record ``old`` -> ``new`` (committing ``new`` to ``next_digest`` when given); whether
        it changed anything.

        Refused (False): ``old`` has a known commitment that ``new`` does not match; ``old``
        has no commitment and already rotated (the first record stays); ``new`` already
        entered from another key; the record would close a cycle. A successor of ``old``
        accepted before ``old``'s commitment was known, and not matching it, is replaced.
        ``kept``: never evicted (else a stranger's record, within the cap).
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
            learnt = self._learn_commitment(new, next_digest)
            if learnt:
                self._held("rotation", old, kept)
            return learnt
        if current is not None:
            if committed is None:
                return False  # no commitment known: the first rotation stays
            self._drop_successor(old)  # accepted before the commitment was known
        self._next[old] = new
        self._prev[new] = old
        self._learn_commitment(new, next_digest)
        self._held("rotation", old, kept)
        return True

    def add_revocation(
        self,
        node: DatasetId,
        revoked_ns: int,
        by: DatasetId | None = None,
        *,
        kept: bool = True,
    ) -> bool:
        """Record that ``node`` no longer counts from ``revoked_ns`` on (the earliest wins);
        whether it changed anything.

        ``by``: the key that signed the revocation when it is not ``node`` itself; accepted
        only if it is the key ``node`` committed to. Such a revocation beats any rotation
        ``node`` signed: with the commitment known, a rotation of ``node`` to another key is
        refused, and one accepted before was dropped when the commitment became known.
        ``kept`` as for :meth:`add_rotation`.
        """
        if by is not None:
            committed = self._commit.get(node)
            if committed is None or next_key_digest(by) != committed:
                return False
        known = self._revoked.get(node)
        if known is not None and known <= revoked_ns:
            return False
        self._revoked[node] = revoked_ns
        self._held("revocation", node, kept)
        return True

    def _learn_commitment(self, key: DatasetId, digest: bytes | None) -> bool:
        """``key`` commits to ``digest`` (the first one a rotation gave stays; it replaces an
        inception's, which only ``key`` signed); a successor of ``key`` that does not match it
        is dropped. Whether anything changed."""
        if digest is None or (key in self._commit and key not in self._incepted):
            return False
        if self._commit.get(key) == digest:
            # The same commitment: the rotation backs it now (signed by the previous key
            # too), so evicting the inception's record no longer drops it.
            self._incepted.discard(key)
            return False
        self._commit[key] = digest
        if key in self._incepted:
            self._incepted.discard(key)
            self._strangers["inception"].pop(key, None)
        successor = self._next.get(key)
        if successor is not None and next_key_digest(successor) != digest:
            self._drop_successor(key)
        return True

    def _drop_successor(self, key: DatasetId) -> None:
        successor = self._next.pop(key, None)
        self._strangers["rotation"].pop(key, None)
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
        """Every key known to be ``node``'s (its canonical key and all keys leading to it):
        one chain walked back from the canonical key (a key enters an identity once, so each
        has one predecessor), never every record known."""
        key: DatasetId | None = self.canonical(node)
        found: set[DatasetId] = set()
        while key is not None and key not in found and len(found) <= MAX_CHAIN:
            found.add(key)
            key = self._prev.get(key)
        return found

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

    def held(self) -> dict[str, int]:
        """How many records of each kind are held in memory (kept ones included)."""
        return {
            "rotations": len(self._next),
            "revocations": len(self._revoked),
            "commitments": len(self._commit),
            "strangers": sum(len(o) for o in self._strangers.values()),
        }

    @property
    def empty(self) -> bool:
        """Whether no record is known (every key is its own node and counts)."""
        return not self._next and not self._revoked


def stored_message(envelope: bytes, kind: type[_M]) -> _M | None:
    """The ``kind`` message (a rotation, revocation or inception) in a stored envelope,
    checked when it was received; None if it holds another or no longer decodes (a stored
    record the decoder no longer reads is ignored, not fatal)."""
    try:
        msg = decode_unverified(envelope)
    except WireDecodeError:
        return None
    inner = getattr(msg, "message", None)
    return inner if isinstance(inner, kind) else None


def load_records(
    identities: NodeIdentities,
    rotations: Iterable[KeyRotationRecord],
    revocations: Iterable[KeyRevocationRecord] = (),
    inceptions: Iterable[KeyInceptionRecord] = (),
) -> None:
    """Feed stored records to ``identities``, in the order they were received.

    Inceptions come first: an inception stored was accepted before any rotation of its key
    (one after is refused), and a rotation stored after it matched its commitment.

    Rotations are applied until nothing changes, so that the outcome does not depend on the
    order in which a commitment and a rotation it refuses arrived (a pass per link of a chain
    at most, and no more than ``MAX_CHAIN``: longer chains are not followed anyway).
    Revocations follow, once every commitment is known.
    """
    for i in inceptions:
        inc = stored_message(i.envelope, KeyInception)
        if inc is not None:
            identities.add_inception(inc.node, inc.next_digest, kept=i.kept)
    parsed: list[tuple[DatasetId, DatasetId, bytes | None, bool]] = []
    for r in rotations:
        msg = stored_message(r.envelope, KeyRotation)
        if msg is not None:
            parsed.append((msg.old, msg.new, msg.next_digest, r.kept))
        else:
            parsed.append((DatasetId.parse(r.old_id), DatasetId.parse(r.new_id), None, r.kept))
    for _ in range(min(len(parsed), MAX_CHAIN) + 1):
        if not any([identities.add_rotation(o, n, d, kept=k) for o, n, d, k in parsed]):
            break
    for x in revocations:
        rev = stored_message(x.envelope, KeyRevocation)
        by = rev.by if rev is not None else None
        identities.add_revocation(DatasetId.parse(x.node_id), x.revoked_ns, by, kept=x.kept)


__all__ = [
    "InceptionOutcome",
    "NodeIdentities",
    "load_records",
    "stored_message",
]
