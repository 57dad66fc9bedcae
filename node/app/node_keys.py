"""Node key rotation, revocation and inception: the node key changes, its identity stays.

Rotation (docs/operations.md, "Node key rotation"): the node key hands over to the key it
committed to (pre-rotation: ``keys/next.key``, or a fresh key when the current key made no
commitment), a :class:`p2p.wire.KeyRotation` record signed by the old and the new key and
committing to a fresh key after the new one is stored in the state (``key_rotations``), the
fresh key becomes ``keys/next.key`` (the daemon never reads it, so a thief of the running
node's key does not get it), the old key is kept among the retired keys (so the node can later
revoke it) and the new key becomes the node key. The daemon gossips the node's own records on
the node topic whenever a peer connects; peers move the node's score to its new libp2p peer id
and count the old key's attestations as the node's.

Revocation: a :class:`p2p.wire.KeyRevocation` record signed by the key the retired key committed
to (when it did: a revocation a thief of the retired key cannot make) or by the retired key
itself, stored in the state (``key_revocations``) and gossiped the same way; from its time on
the key's attestations and disputes no longer count toward trust.

Inception (issue 39): a node's first key (and one a version 1 rotation introduced) commits to its
next key too, by a :class:`p2p.wire.KeyInception` record it signs: :meth:`NodeKeys.ensure_inception`
writes ``keys/next.key`` and the record (``key_inceptions``). ``odf-node init`` runs it, and so
does the daemon at every start (an existing node gets its inception on upgrade).

The keys on disk are behind :class:`~node.app.ports.NodeKeyStore` (``node/adapters/home_keys.py``),
the records behind the state port. Rotation and revocation need the daemon stopped (they change
the key it runs with): the composition root runs them under the home's lock
(``node/compose.py``). Crash safety: the rotation's keys are staged first, then the record is
stored, and only then are the staged keys made current; a rotation interrupted before that is
completed by the next ``key rotate`` (when the state holds its record) or discarded (when not).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.errors import INVALID_INPUT, OdfNodeError
from coordinator.identity import DatasetId, PrivateKey, generate_private_key
from node.app.identities import NodeIdentities, load_records
from node.app.ports import Clock, NodeKeyStore, StatePort
from p2p.transport import peer_id_of_node
from p2p.wire import (
    KeyInception,
    KeyRevocation,
    KeyRotation,
    content_id,
    next_key_digest,
    sign_message,
)


class KeyCommandError(OdfNodeError):
    """A key rotation or revocation cannot be made (no such retired key, ...)."""

    rpc_code = INVALID_INPUT


@dataclass(frozen=True)
class Rotated:
    """What ``key rotate`` did."""

    old_id: str
    new_id: str
    old_peer_id: str
    new_peer_id: str
    record: str
    """The record's content id (hex)."""
    resumed: bool = False
    """True when it completed a rotation an earlier run was interrupted in."""


@dataclass(frozen=True)
class Revoked:
    """What ``key revoke`` did."""

    node_id: str
    revoked_ns: int
    record: str


@dataclass(frozen=True)
class Incepted:
    """What :meth:`NodeKeys.ensure_inception` did."""

    node_id: str
    next_key: str
    """The path of the committed next key (``keys/next.key``)."""
    created: bool
    """Whether the next key was generated now (else an existing ``keys/next.key`` was used)."""
    record: str
    """The record's content id (hex)."""


MOVE_NEXT_KEY_ADVICE = (
    "move a copy of keys/next.key off this node (or the file itself, passing it back with "
    "`odf-node key rotate --next-key PATH`): a thief of keys/node.key without it cannot take "
    "the node's identity over"
)
"""What the operator is told to do once a node key commits to ``keys/next.key``."""


@dataclass(eq=False)
class NodeKeys:
    """Inception, rotation and revocation of the node key, and the records it made."""

    keys: NodeKeyStore
    state: StatePort
    clock: Clock
    nonce: Callable[[], bytes] = lambda: secrets.token_bytes(16)
    generate: Callable[[], PrivateKey] = generate_private_key

    async def _identities(self) -> NodeIdentities:
        ids = NodeIdentities()
        s = self.state
        load_records(
            ids, await s.key_rotations(), await s.key_revocations(), await s.key_inceptions()
        )
        return ids

    async def ensure_inception(self) -> Incepted | None:
        """Commit the node key to a next key if it has no commitment yet (a node's first key,
        or one a version 1 rotation introduced): the next key is ``keys/next.key`` (generated
        unless it exists), the :class:`KeyInception` record signed by the node key is stored
        (kept: never evicted) and ``node.key_incepted`` logged. None when the key already has a
        commitment. ``keys/next.key`` is written before the record, so a run interrupted
        between the two commits to the same key the next time."""
        key = self.keys.node_key()
        ids = await self._identities()
        if ids.commitment(key.dataset_id()) is not None:
            return None
        after = self.keys.read_committed()
        created = after is None
        if after is None:
            after = self.generate()
            self.keys.write_committed(after)
        now = self.clock()
        msg = KeyInception(key.dataset_id(), next_key_digest(after.dataset_id()), now, self.nonce())
        signed = sign_message(msg, key)
        if ids.add_inception(msg.node, msg.next_digest) != "accepted":
            # The key already rotated: its first rotation stays.
            if created:
                self.keys.remove_committed()
            return None
        did = key.dataset_id().as_did_key()
        await self.state.add_key_inception(did, now, signed.envelope)
        await self.state.log_event(
            "node.key_incepted",
            None,
            {"node": did, "own": True, "next_key": "keys/next.key", "action": MOVE_NEXT_KEY_ADVICE},
        )
        return Incepted(did, self.keys.committed_path(), created, content_id(signed.envelope).hex())

    async def rotate(self, next_key: str | None = None) -> Rotated:
        """Rotate the node key (see the module docstring). Pre-rotation: when the current key
        committed to a next key, the new key is that committed key, read from ``next_key``
        (default ``keys/next.key``); otherwise a fresh key is generated. Either way a fresh key
        after it is generated, committed to by the record and becomes ``keys/next.key``.

        Raises:
            KeyCommandError: the committed key is missing or is not the committed one, or the
                key has already rotated.
        """
        old = self.keys.node_key()
        resumed = await self._resume(old)
        if resumed is not None:
            return resumed
        ids = await self._identities()
        new = self._successor(ids, old, next_key)
        after = self.generate()
        self.keys.stage(old, new, after)
        signed = KeyRotation.make(
            old, new, self.clock(), self.nonce(), next_key_digest(after.dataset_id())
        )
        msg = signed.message
        assert isinstance(msg, KeyRotation)
        stored = ids.add_rotation(msg.old, msg.new, msg.next_digest) and (
            await self.state.add_key_rotation(
                msg.old.as_did_key(),
                msg.new.as_did_key(),
                msg.issued_at_ns,
                signed.envelope,
                replace=True,
            )
        )
        if not stored:
            self.keys.discard_staged()
            raise KeyCommandError(f"node key {msg.old.as_did_key()} has already rotated")
        await self.state.log_event(
            "node.key_rotated",
            None,
            {"old": msg.old.as_did_key(), "new": msg.new.as_did_key(), "own": True},
        )
        self.keys.finish()
        return _rotated(old, new, signed.envelope)

    async def _resume(self, old: PrivateKey) -> Rotated | None:
        """Complete a rotation an earlier run staged and stored (only the renames missing), or
        discard one it staged without storing its record."""
        new = self.keys.staged()
        if new is None:
            return None
        old_id, new_id = old.dataset_id().as_did_key(), new.dataset_id().as_did_key()
        for r in await self.state.key_rotations():
            if r.old_id == old_id and r.new_id == new_id:
                self.keys.finish()
                return _rotated(old, new, r.envelope, resumed=True)
        self.keys.discard_staged()  # never announced: start again
        return None

    def _successor(self, ids: NodeIdentities, old: PrivateKey, next_key: str | None) -> PrivateKey:
        """The key ``old`` hands over to: the one it committed to, or a fresh one if it made no
        commitment (a node's first key, or one from before pre-rotation)."""
        committed = ids.commitment(old.dataset_id())
        if committed is None:
            return self.generate()
        key = self.keys.read_committed(next_key)
        where = self.keys.committed_path(next_key)
        if key is None:
            raise KeyCommandError(
                f"node key {old.dataset_id().as_did_key()} committed to a next key, and {where} "
                "does not exist: restore it from your copy (or pass its path with --next-key)"
            )
        if next_key_digest(key.dataset_id()) != committed:
            raise KeyCommandError(
                f"{where} holds {key.dataset_id().as_did_key()}, not the key node key "
                f"{old.dataset_id().as_did_key()} committed to"
            )
        return key

    async def revoke(self, node_id: str | None = None) -> Revoked:
        """Revoke one of the node's retired keys (default: the most recently retired).

        Raises:
            KeyCommandError: no retired key, or ``node_id`` is not one of them (the current key
                cannot be revoked: rotate first).
        """
        key = self._retired_key(node_id)
        now = self.clock()
        did = key.dataset_id().as_did_key()
        signer = self._committed_successor(await self._identities(), key)
        if signer is None:  # no commitment: the key revokes itself
            signed = sign_message(KeyRevocation(key.dataset_id(), now, self.nonce()), key)
        else:
            msg = KeyRevocation(key.dataset_id(), now, self.nonce(), by=signer.dataset_id())
            signed = sign_message(msg, signer)
        await self.state.add_key_revocation(did, now, signed.envelope)
        stored = next(r for r in await self.state.key_revocations() if r.node_id == did)
        await self.state.log_event("node.key_revoked", None, {"node": did, "own": True})
        return Revoked(did, stored.revoked_ns, content_id(stored.envelope).hex())

    def _retired_key(self, node_id: str | None) -> PrivateKey:
        keys = self.keys.retired()
        if not keys:
            raise KeyCommandError("this node has no retired key to revoke (rotate first)")
        if node_id is None:
            return keys[-1]
        wanted = DatasetId.parse(node_id)
        match = [k for k in keys if k.dataset_id() == wanted]
        if not match:
            raise KeyCommandError(
                f"{node_id} is not a retired key of this node "
                f"(retired: {', '.join(k.dataset_id().as_did_key() for k in keys)})"
            )
        return match[0]

    def _committed_successor(self, ids: NodeIdentities, key: PrivateKey) -> PrivateKey | None:
        """The private key that ``key`` committed to and handed over to, if this node holds it
        (the current node key or a retired one): a revocation it signs beats any rotation by
        ``key`` (docs/operations.md, "What a stolen node key can and cannot do")."""
        successor = ids.successor(key.dataset_id())
        committed = ids.commitment(key.dataset_id())
        if successor is None or committed is None or next_key_digest(successor) != committed:
            return None
        for candidate in (self.keys.node_key(), *self.keys.retired()):
            if candidate.dataset_id() == successor:
                return candidate
        return None

    async def own_records(self) -> list[bytes]:
        """The signed records this node made: the inceptions of its keys (current and
        retired), then the rotations of and revocations by its retired keys. Inceptions first,
        so that a peer knows a key's commitment before it hears the key rotate."""
        retired = {k.dataset_id().as_did_key() for k in self.keys.retired()}
        own = {self.keys.node_key().dataset_id().as_did_key(), *retired}
        s = self.state
        inc = [r.envelope for r in await s.key_inceptions() if r.node_id in own]
        rot = [r.envelope for r in await s.key_rotations() if r.old_id in retired]
        rev = [r.envelope for r in await s.key_revocations() if r.node_id in retired]
        return inc + rot + rev


def _rotated(
    old: PrivateKey, new: PrivateKey, envelope: bytes, *, resumed: bool = False
) -> Rotated:
    return Rotated(
        old.dataset_id().as_did_key(),
        new.dataset_id().as_did_key(),
        peer_id_of_node(old.dataset_id()),
        peer_id_of_node(new.dataset_id()),
        content_id(envelope).hex(),
        resumed,
    )
