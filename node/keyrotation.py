"""``odf-node key rotate`` and ``odf-node key revoke``: the node key changes, its identity stays.

Rotation (docs/operations.md, "Node key rotation"): the node key hands over to the key it
committed to (pre-rotation: ``keys/next.key``, or a fresh key when the current key made no
commitment), a :class:`p2p.wire.KeyRotation` record signed by the old and the new key and
committing to a fresh key after the new one is stored in the state (``key_rotations``), the
fresh key becomes ``keys/next.key`` (mode 0600; the daemon never reads it, so a thief of the
running node's key does not get it), the old key is kept under ``keys/retired/<did>.key``
(mode 0600, so the node can later revoke it) and the new key becomes ``keys/node.key``. The
daemon gossips the node's own records on the node topic whenever a peer connects; peers move
the node's score to its new libp2p peer id and count the old key's attestations as the node's.

Revocation: a :class:`p2p.wire.KeyRevocation` record signed by the key the retired key committed
to (when it did: a revocation a thief of the retired key cannot make) or by the retired key
itself, stored in the state (``key_revocations``) and gossiped the same way; from its time on
the key's attestations and disputes no longer count toward trust.

Inception (issue 39): a node's first key (and one a version 1 rotation introduced) commits to its
next key too, by a :class:`p2p.wire.KeyInception` record it signs: :func:`ensure_inception`
writes ``keys/next.key`` and the record, stored in the state (``key_inceptions``). ``odf-node
init`` calls it, and so does the daemon at every start (an existing node gets its inception on
upgrade, without ``key rotate``); the daemon gossips it with the other records.

Rotation and revocation need the daemon stopped (they change the key it runs with and write the
state): they take the home's lock. Crash safety: the new key is written to
``keys/node.key.next`` and the key after it to ``keys/next.key.next`` first, then the old one to
``keys/retired/``, then the record to the state, and only then do the two renames make them
current (``next.key`` first). A rotation interrupted before the renames is completed by the next
``key rotate`` (when the state holds its record) or discarded (when it does not).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from coordinator.errors import INVALID_INPUT, OdfNodeError
from coordinator.identity import (
    DatasetId,
    PrivateKey,
    generate_private_key,
    load_private_key,
    save_private_key,
)
from node.app.identities import NodeIdentities, load_records
from node.home import NodeHome
from node.home_lock import HomeLock, HomeLocked
from node.state import NodeState
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
    """What :func:`ensure_inception` did."""

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


def retired_dir(home: NodeHome) -> Path:
    """``keys/retired/``: the node's former keys, one ``<did:odf multibase>.key`` each."""
    return home.path / "keys" / "retired"


def retired_keys(home: NodeHome) -> list[PrivateKey]:
    """The node's retired keys, oldest first (by file modification time)."""
    d = retired_dir(home)
    paths = sorted(d.glob("*.key"), key=lambda p: p.stat().st_mtime) if d.is_dir() else []
    return [load_private_key(p) for p in paths]


def _next_path(home: NodeHome) -> Path:
    """``keys/node.key.next``: the new node key of a rotation in progress."""
    return home.node_key_path.with_name("node.key.next")


def committed_key_path(home: NodeHome) -> Path:
    """``keys/next.key``: the key the current node key committed to (pre-rotation), written by
    ``key rotate`` and read only by ``key rotate`` and ``key revoke``, never by the daemon.
    Keep a copy of it offline (or move it there and pass ``--next-key``): a thief who steals
    ``node.key`` without it cannot take the identity over."""
    return home.path / "keys" / "next.key"


def _pending_committed_path(home: NodeHome) -> Path:
    """``keys/next.key.next``: the next key a rotation in progress commits to."""
    return committed_key_path(home).with_name("next.key.next")


def _identities(st: NodeState) -> NodeIdentities:
    ids = NodeIdentities()
    load_records(ids, st.key_rotations(), st.key_revocations(), st.key_inceptions())
    return ids


def ensure_inception(
    home: NodeHome, state: NodeState | None = None, *, clock_ns: int | None = None
) -> Incepted | None:
    """Commit the current node key to a next key if it has no commitment yet (a node's first
    key, or one a version 1 rotation introduced): the next key is ``keys/next.key`` (generated,
    mode 0600, unless it exists), the :class:`KeyInception` record signed by the node key is
    stored (kept: never evicted) and ``node.key_incepted`` logged. None when the key already
    has a commitment (nothing to do).

    Crash safety: ``keys/next.key`` is written before the record, so a run interrupted
    between the two commits to the same key the next time. Does not take the home's lock
    (the daemon calls it holding it; ``odf-node init`` takes it).
    """
    if state is None:
        with NodeState.open(home.path / "state.db", time.time_ns) as st:
            return ensure_inception(home, st, clock_ns=clock_ns)
    key = home.node_key()
    ids = _identities(state)
    if ids.commitment(key.dataset_id()) is not None:
        return None
    path = committed_key_path(home)
    created = not path.is_file()
    if created:
        save_private_key(path, generate_private_key())
    after = load_private_key(path)
    now = clock_ns if clock_ns is not None else time.time_ns()
    msg = KeyInception(key.dataset_id(), next_key_digest(after.dataset_id()), now, _nonce())
    signed = sign_message(msg, key)
    outcome = ids.add_inception(msg.node, msg.next_digest)
    if outcome != "accepted":  # the key already rotated: its first rotation stays
        if created:
            path.unlink()
        return None
    did = key.dataset_id().as_did_key()
    state.add_key_inception(did, now, signed.envelope)
    state.log_event(
        "node.key_incepted",
        None,
        {"node": did, "own": True, "next_key": "keys/next.key", "action": MOVE_NEXT_KEY_ADVICE},
    )
    return Incepted(did, str(path), created, content_id(signed.envelope).hex())


def init_inception(home: NodeHome) -> Incepted | None:
    """:func:`ensure_inception` for ``odf-node init``, under the home's lock; None when a
    daemon holds it (the daemon makes the record at its start)."""
    try:
        with HomeLock(home.path):
            return ensure_inception(home)
    except HomeLocked:
        return None


def _finish(home: NodeHome, pending: Path) -> None:
    """The last steps of a rotation whose record is stored: the new next key, then the new
    node key, each one rename."""
    pending_committed = _pending_committed_path(home)
    if pending_committed.exists():
        os.replace(pending_committed, committed_key_path(home))
    os.replace(pending, home.node_key_path)


def rotate(home: NodeHome, *, clock_ns: int | None = None, next_key: Path | None = None) -> Rotated:
    """Rotate the node key of ``home`` (the daemon must be stopped; see the module docstring).

    Pre-rotation: when the current key committed to a next key (it was itself introduced by
    a version 2 rotation), the new key is that committed key, read from ``next_key`` (default
    ``keys/next.key``); otherwise (a node's first key, or a key from before pre-rotation) a
    fresh key is generated. Either way a fresh key after it is generated, committed to by
    the record and written to ``keys/next.key``.

    Raises:
        KeyCommandError: the committed key is missing or is not the committed one.
        HomeLocked: a daemon (or another command) uses the home.
    """
    with HomeLock(home.path):
        old = home.node_key()
        pending = _next_path(home)
        with NodeState.open(home.path / "state.db", time.time_ns) as st:
            if pending.exists():
                new = load_private_key(pending)
                record = next(
                    (
                        r
                        for r in st.key_rotations()
                        if r.old_id == old.dataset_id().as_did_key()
                        and r.new_id == new.dataset_id().as_did_key()
                    ),
                    None,
                )
                if record is not None:  # stored: only the renames were missing
                    _finish(home, pending)
                    return _rotated(old, new, record.envelope, resumed=True)
                pending.unlink()  # never announced: start again
                _pending_committed_path(home).unlink(missing_ok=True)
            ids = _identities(st)
            new = _successor_key(home, ids, old, next_key)
            after = generate_private_key()
            save_private_key(pending, new)
            save_private_key(_pending_committed_path(home), after)
            save_private_key(retired_dir(home) / f"{old.dataset_id().as_multibase()}.key", old)
            os.chmod(retired_dir(home), 0o700)
            signed = KeyRotation.make(
                old,
                new,
                clock_ns if clock_ns is not None else time.time_ns(),
                _nonce(),
                next_key_digest(after.dataset_id()),
            )
            msg = signed.message
            assert isinstance(msg, KeyRotation)
            if not ids.add_rotation(msg.old, msg.new, msg.next_digest) or not (
                st.add_key_rotation(
                    msg.old.as_did_key(),
                    msg.new.as_did_key(),
                    msg.issued_at_ns,
                    signed.envelope,
                    replace=True,
                )
            ):
                pending.unlink()
                _pending_committed_path(home).unlink()
                raise KeyCommandError(f"node key {msg.old.as_did_key()} has already rotated")
            st.log_event(
                "node.key_rotated",
                None,
                {"old": msg.old.as_did_key(), "new": msg.new.as_did_key(), "own": True},
            )
        _finish(home, pending)
        return _rotated(old, new, signed.envelope)


def _successor_key(
    home: NodeHome, ids: NodeIdentities, old: PrivateKey, next_key: Path | None
) -> PrivateKey:
    """The key ``old`` hands over to: the one it committed to, or a fresh one if it made no
    commitment (a node's first key, or one from before pre-rotation)."""
    committed = ids.commitment(old.dataset_id())
    if committed is None:
        return generate_private_key()
    path = next_key if next_key is not None else committed_key_path(home)
    if not path.is_file():
        raise KeyCommandError(
            f"node key {old.dataset_id().as_did_key()} committed to a next key, and {path} "
            "does not exist: restore it from your copy (or pass its path with --next-key)"
        )
    key = load_private_key(path)
    if next_key_digest(key.dataset_id()) != committed:
        raise KeyCommandError(
            f"{path} holds {key.dataset_id().as_did_key()}, not the key node key "
            f"{old.dataset_id().as_did_key()} committed to"
        )
    return key


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


def revoke(home: NodeHome, node_id: str | None = None, *, clock_ns: int | None = None) -> Revoked:
    """Revoke one of the node's retired keys (default: the most recently retired).

    Raises:
        KeyCommandError: no retired key, or ``node_id`` is not one of them (the current key
            cannot be revoked: rotate first).
        HomeLocked: a daemon (or another command) uses the home.
    """
    with HomeLock(home.path):
        keys = retired_keys(home)
        if not keys:
            raise KeyCommandError("this node has no retired key to revoke (rotate first)")
        if node_id is None:
            key = keys[-1]
        else:
            wanted = DatasetId.parse(node_id)
            match = [k for k in keys if k.dataset_id() == wanted]
            if not match:
                raise KeyCommandError(
                    f"{node_id} is not a retired key of this node "
                    f"(retired: {', '.join(k.dataset_id().as_did_key() for k in keys)})"
                )
            key = match[0]
        now = clock_ns if clock_ns is not None else time.time_ns()
        did = key.dataset_id().as_did_key()
        with NodeState.open(home.path / "state.db", time.time_ns) as st:
            signer = _committed_successor(home, _identities(st), key)
            if signer is None:  # no commitment: the key revokes itself
                signed = sign_message(KeyRevocation(key.dataset_id(), now, _nonce()), key)
            else:
                msg = KeyRevocation(key.dataset_id(), now, _nonce(), by=signer.dataset_id())
                signed = sign_message(msg, signer)
            st.add_key_revocation(did, now, signed.envelope)
            stored = next(r for r in st.key_revocations() if r.node_id == did)
            st.log_event("node.key_revoked", None, {"node": did, "own": True})
        return Revoked(did, stored.revoked_ns, content_id(stored.envelope).hex())


def _committed_successor(home: NodeHome, ids: NodeIdentities, key: PrivateKey) -> PrivateKey | None:
    """The private key that ``key`` committed to and handed over to, if this node holds it (the
    current node key or a retired one): a revocation it signs beats any rotation by ``key``
    (docs/operations.md, "What a stolen node key can and cannot do")."""
    successor = ids.successor(key.dataset_id())
    committed = ids.commitment(key.dataset_id())
    if successor is None or committed is None or next_key_digest(successor) != committed:
        return None
    for candidate in (home.node_key(), *retired_keys(home)):
        if candidate.dataset_id() == successor:
            return candidate
    return None


def own_records(home: NodeHome, state: NodeState | None = None) -> list[bytes]:
    """The signed records this node made: the inceptions of its keys (current and retired),
    then the rotations of and revocations by its retired keys. Inceptions first, so that a
    peer knows a key's commitment before it hears the key rotate."""
    retired = {k.dataset_id().as_did_key() for k in retired_keys(home)}
    own = {home.node_key().dataset_id().as_did_key(), *retired}

    def read(st: NodeState) -> list[bytes]:
        inc = [r.envelope for r in st.key_inceptions() if r.node_id in own]
        rot = [r.envelope for r in st.key_rotations() if r.old_id in retired]
        rev = [r.envelope for r in st.key_revocations() if r.node_id in retired]
        return inc + rot + rev

    if state is not None:
        return read(state)
    with NodeState.open(home.path / "state.db", time.time_ns) as st:
        return read(st)


def _nonce() -> bytes:
    return secrets.token_bytes(16)


__all__ = [
    "MOVE_NEXT_KEY_ADVICE",
    "Incepted",
    "KeyCommandError",
    "Revoked",
    "Rotated",
    "committed_key_path",
    "ensure_inception",
    "init_inception",
    "own_records",
    "retired_keys",
    "revoke",
    "rotate",
]
