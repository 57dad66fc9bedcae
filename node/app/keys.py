"""Node key rotation, revocation and inception records, as the node receives them (gossip) or
makes them.

:class:`NodeKeyRecords` stores each new record (``key_rotations`` / ``key_revocations``, state
schema v8), feeds :class:`~node.app.identities.NodeIdentities`, moves the rotated node's peer
score to its new libp2p peer id (the host's identity is the node key), has the trust driver
rebuild its policies, and logs ``node.key_rotated`` / ``node.key_revoked``. An inception
(``key_inceptions``, state schema v12) gives a key its first commitment; a conflicting one (a
second, different inception of the same key: a thief's, or the owner's heard after a thief's) is
refused and logged (``node.key_inception_conflict``). The records'
signatures were checked by the protocol core (``p2p/wire.py``: a rotation is signed by the old
and the new key, a revocation by the revoked key or its committed next key); whether a record
counts (pre-rotation) is the identities' decision, and only records that count are stored.
docs/operations.md, "Node key rotation".

Strangers' records are bounded (issue 39): a record that names no key of a node the node's
``[trust]`` trusts is stored within ``cap`` records of its kind, the oldest evicted first; a
trusted node's are kept. (Records stored without a cap, the node's own, are kept.) The
identities hold the same records in memory under the same cap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass

from coordinator.identity import DatasetId
from node.app.identities import NodeIdentities, load_records
from node.app.ports import EventSink, StatePort
from node.app.rows import EvidenceCaps
from node.app.trust import TrustDriver, keys_named
from p2p.transport import peer_id_of_node
from p2p.wire import KeyInception, KeyRevocation, KeyRotation, SignedMessage

log = logging.getLogger("odf_node.keys")

MovePeerScore = Callable[[str, str], None]
"""Carries a peer's score from its old libp2p peer id over to its new one (the core's)."""


@dataclass(eq=False)
class NodeKeyRecords:
    """See the module docstring."""

    state: StatePort
    identities: NodeIdentities
    events: EventSink
    _: KW_ONLY
    trust: TrustDriver | None = None
    move_peer_score: MovePeerScore | None = None
    cap: int = EvidenceCaps().key_records
    trusted_nodes: Callable[[], Iterable[DatasetId]] = tuple

    async def load(self) -> None:
        """Feed the stored records to the identities (at start-up, before the trust driver
        restores its policies)."""
        load_records(
            self.identities,
            await self.state.key_rotations(),
            await self.state.key_revocations(),
            await self.state.key_inceptions(),
        )

    async def received(self, sm: SignedMessage) -> bool:
        """A checked record from gossip (or this node's own); whether it was new."""
        msg = sm.message
        voided: list[DatasetId] = []
        if isinstance(msg, KeyRotation):
            old, new = msg.old.as_did_key(), msg.new.as_did_key()
            before = [self.identities.successor(k) for k in (msg.old, msg.new)]
            # The identities decide (pre-rotation: only the committed next key can succeed a
            # key whose commitment is known); only an accepted record is stored, replacing a
            # rotation of the same key that the commitment has since voided.
            kept = self._kept(msg)
            if not self.identities.add_rotation(msg.old, msg.new, msg.next_digest, kept=kept):
                if self.identities.successor(msg.old) != msg.new:
                    log.warning("key rotation %s -> %s refused: %s", old, new, self._refusal(msg))
                return False
            await self.state.add_key_rotation(
                old,
                new,
                msg.issued_at_ns,
                sm.envelope,
                replace=True,
                kept=kept,
                cap=self.cap,
            )
            # Successors the record voided (a rotation accepted before the commitment was
            # known): their keys' evidence no longer counts as this node's.
            after = [self.identities.successor(k) for k in (msg.old, msg.new)]
            voided = [k for k, a in zip(before, after, strict=True) if k is not None and k != a]
            old_peer, new_peer = peer_id_of_node(msg.old), peer_id_of_node(msg.new)
            moved = await self._move_peer(old_peer, new_peer)
            await self.state.log_event(
                "node.key_rotated",
                None,
                {
                    "old": old,
                    "new": new,
                    "old_peer": old_peer,
                    "new_peer": new_peer,
                    "score_moved": moved,
                },
            )
            self.events.publish("node.key_rotated", {"old": old, "new": new})
        elif isinstance(msg, KeyRevocation):
            node = msg.node.as_did_key()
            kept = self._kept(msg)
            if not self.identities.add_revocation(msg.node, msg.issued_at_ns, msg.by, kept=kept):
                if msg.by is not None and self.identities.revoked_at(msg.node) is None:
                    log.warning(
                        "key revocation of %s by %s refused: not its committed next key",
                        node,
                        msg.by.as_did_key(),
                    )
                return False
            await self.state.add_key_revocation(
                node, msg.issued_at_ns, sm.envelope, kept=kept, cap=self.cap
            )
            await self.state.log_event(
                "node.key_revoked", None, {"node": node, "revoked_ns": msg.issued_at_ns}
            )
            self.events.publish("node.key_revoked", {"node": node})
        elif isinstance(msg, KeyInception):
            # A commitment changes no chain and no count: nothing for the trust driver.
            return await self._incepted(sm, msg)
        else:
            return False
        if self.trust is not None:
            await self.trust.identities_changed(*keys_named(msg), *voided)
        return True

    async def _incepted(self, sm: SignedMessage, msg: KeyInception) -> bool:
        """Store ``msg`` if the identities accept it; log a conflicting one."""
        node = msg.node.as_did_key()
        kept = self._kept(msg)
        outcome = self.identities.add_inception(msg.node, msg.next_digest, kept=kept)
        if outcome != "accepted":
            if outcome != "known":
                log.warning("key inception of %s refused: %s", node, _INCEPTION_REFUSALS[outcome])
            if outcome == "conflict":
                await self.state.log_event(
                    "node.key_inception_conflict",
                    None,
                    {"node": node, "record": sm.content_id.hex(), "reason": outcome},
                )
            return False
        await self.state.add_key_inception(
            node, msg.issued_at_ns, sm.envelope, kept=kept, cap=self.cap
        )
        await self.state.log_event("node.key_incepted", None, {"node": node})
        return True

    def _kept(self, msg: KeyRotation | KeyRevocation | KeyInception) -> bool:
        """Whether ``msg`` names a key of a trusted node (``trusted_nodes``: the ``[trust]``
        policy's attesters), kept, never evicted by strangers' records."""
        ids = self.identities
        roots = {ids.canonical(a) for a in self.trusted_nodes()}
        named = (msg.node,) if isinstance(msg, KeyInception) else keys_named(msg)
        return any(ids.canonical(k) in roots for k in named)

    def _refusal(self, msg: KeyRotation) -> str:
        """Why the identities refused ``msg`` (for the log)."""
        if self.identities.commitment(msg.old) is not None:
            return "its new key is not the one the old key committed to (pre-rotation)"
        if self.identities.successor(msg.old) is not None:
            return "the key already rotated (it has no commitment: the first rotation stays)"
        return "the new key already belongs to an identity"

    async def _move_peer(self, old_peer: str, new_peer: str) -> float | None:
        """The core's score of ``old_peer`` moves to ``new_peer``, and so does the stored one
        (``peers``: its addresses too, with the new peer id)."""
        if self.move_peer_score is not None:
            self.move_peer_score(old_peer, new_peer)
        stored = next((p for p in await self.state.peers() if p.peer_id == old_peer), None)
        if stored is None:
            return None
        addrs = [a.replace(f"/p2p/{old_peer}", f"/p2p/{new_peer}") for a in stored.addrs]
        await self.state.upsert_peer(new_peer, addrs, stored.score, False)
        await self.state.upsert_peer(old_peer, None, 0.0, False)
        return stored.score


_INCEPTION_REFUSALS = {
    "conflict": "another inception of this key is known (the first one heard stays)",
    "rotated": "the key already rotated (it had no commitment then: its first rotation stays)",
    "committed": "a version 2 rotation into this key set its commitment",
}


__all__ = ["NodeKeyRecords"]
