"""Pre-rotation: a thief holding only the current node key cannot keep the identity.

Issue 39, defect 4: a thief who stole node key T signed a rotation T -> A of its own; it
counted, the owner's later rotation T -> T' was refused, and the owner's revocation of T did
not undo A. With pre-rotation (docs/operations.md, "What a stolen node key can and cannot
do"), each rotation commits to the digest of the key after its new key; a rotation must reveal
the committed key, and a revocation signed by the committed next key is accepted.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import cast

import pytest

from coordinator.identity import PrivateKey, generate_private_key, load_private_key
from node.adapters.state import InlineState
from node.app.events import EventBus
from node.app.identities import NodeIdentities, load_records
from node.app.keys import NodeKeyRecords
from node.app.node_keys import KeyCommandError
from node.app.ports import StatePort
from node.app.trust import TrustDriver
from node.compose import committed_key_path, own_records
from node.compose import revoke_key as revoke
from node.compose import rotate_key as rotate
from node.home import NodeHome
from node.state import NodeState
from p2p.trust import TrustConfig
from p2p.wire import (
    KeyRevocation,
    KeyRotation,
    SignedMessage,
    decode,
    next_key_digest,
    sign_message,
)

S, T, N, N2, A, A2, E = (generate_private_key(bytes([i]) * 32) for i in range(0x21, 0x28))


def _rot(old: PrivateKey, new: PrivateKey, after: PrivateKey | None, at: int) -> SignedMessage:
    digest = next_key_digest(after.dataset_id()) if after is not None else None
    return KeyRotation.make(old, new, at, at.to_bytes(16, "big"), digest)


def _rev(node: PrivateKey, signer: PrivateKey, at: int) -> SignedMessage:
    by = None if signer is node else signer.dataset_id()
    return sign_message(KeyRevocation(node.dataset_id(), at, at.to_bytes(16, "big"), by=by), signer)


def _peer() -> tuple[NodeState, NodeKeyRecords]:
    st = NodeState.in_memory(lambda: 1_000)
    state = cast(StatePort, InlineState(st))
    return st, NodeKeyRecords(state, NodeIdentities(), EventBus())


def _reloaded(st: NodeState) -> NodeIdentities:
    ids = NodeIdentities()
    load_records(ids, st.key_rotations(), st.key_revocations())
    return ids


def test_thief_rotation_is_refused_and_the_owners_rotation_and_revocation_count() -> None:
    """The owner's S -> T committed to N. The thief, holding T, rotates T -> A: refused. The
    owner's T -> N counts, and its revocation of T signed by N counts."""

    async def go() -> None:
        st, keys = _peer()
        assert await keys.received(_rot(S, T, N, 100))
        assert not await keys.received(_rot(T, A, A2, 200))  # the thief's
        assert keys.identities.canonical(S.dataset_id()) == T.dataset_id()
        assert await keys.received(_rot(T, N, N2, 300))  # the owner's
        assert keys.identities.canonical(S.dataset_id()) == N.dataset_id()
        # The thief's record was never stored; the owner's was.
        assert [(r.old_id, r.new_id) for r in st.key_rotations()] == [
            (S.dataset_id().as_did_key(), T.dataset_id().as_did_key()),
            (T.dataset_id().as_did_key(), N.dataset_id().as_did_key()),
        ]
        # A revocation of T signed by a key T did not commit to is refused; by N it counts.
        assert not await keys.received(_rev(T, A, 400))
        assert await keys.received(_rev(T, N, 400))
        assert not keys.identities.counts(T.dataset_id(), 500)
        assert keys.identities.counts(T.dataset_id(), 399)
        # After a restart, the same outcome from the stored records.
        ids = _reloaded(st)
        assert ids.canonical(T.dataset_id()) == N.dataset_id()
        assert ids.revoked_at(T.dataset_id()) == 400

    asyncio.run(go())


def test_a_thief_rotation_seen_before_the_commitment_is_voided_by_it() -> None:
    """A peer hears the thief's T -> A before the owner's S -> T (which commits T to N): A
    counts until the commitment arrives, then no longer; the owner's T -> N replaces it, and
    the outcome survives a restart whatever order the records were stored in."""

    async def go() -> None:
        st, keys = _peer()
        assert await keys.received(_rot(T, A, A2, 200))  # no commitment of T known yet
        assert keys.identities.canonical(T.dataset_id()) == A.dataset_id()
        assert await keys.received(_rot(S, T, N, 100))
        assert keys.identities.canonical(S.dataset_id()) == T.dataset_id()
        assert await keys.received(_rot(T, N, N2, 300))
        assert keys.identities.canonical(S.dataset_id()) == N.dataset_id()
        assert {r.new_id for r in st.key_rotations()} == {
            T.dataset_id().as_did_key(),
            N.dataset_id().as_did_key(),
        }
        assert _reloaded(st).canonical(S.dataset_id()) == N.dataset_id()

    asyncio.run(go())


class _RecordingTrust:
    """The trust driver's side NodeKeyRecords uses: what it was told, and no trusted node."""

    def __init__(self) -> None:
        self.named: list[set[object]] = []
        self.default = TrustConfig.from_settings({}, can_replay=False)

    async def identities_changed(self, *named: object) -> None:
        self.named.append(set(named))


def test_a_voided_rotation_re_evaluates_the_thiefs_key_too() -> None:
    """When the commitment voids the thief's T -> A, the trust driver is told about A as well
    (A's evidence no longer counts as the node's)."""

    async def go() -> None:
        st = NodeState.in_memory(lambda: 1_000)
        trust = _RecordingTrust()
        keys = NodeKeyRecords(
            cast(StatePort, InlineState(st)),
            NodeIdentities(),
            EventBus(),
            trust=cast(TrustDriver, trust),
        )
        assert await keys.received(_rot(T, A, A2, 200))
        assert await keys.received(_rot(S, T, N, 100))
        assert A.dataset_id() in trust.named[-1]
        assert await keys.received(_rot(T, N, N2, 300))
        assert {T.dataset_id(), N.dataset_id()} <= trust.named[-1]

    asyncio.run(go())


def test_identities_refuse_aliases_and_revocations_by_uncommitted_keys() -> None:
    ids = NodeIdentities()
    s, t, n = S.dataset_id(), T.dataset_id(), N.dataset_id()
    assert ids.add_rotation(s, t, next_key_digest(n))
    # The thief cannot enter T from a key of its own (to give T a commitment of its choosing,
    # or to make its key an alias of the identity).
    assert not ids.add_rotation(E.dataset_id(), t, next_key_digest(A.dataset_id()))
    assert ids.canonical(E.dataset_id()) == E.dataset_id()
    # A revocation by another key of a key whose commitment is unknown is refused.
    assert not ids.add_revocation(s, 10, by=t)
    assert not ids.add_revocation(t, 10, by=A.dataset_id())
    assert ids.add_revocation(t, 10, by=n) and ids.revoked_at(t) == 10


def test_records_without_a_commitment_keep_the_first_rotation() -> None:
    """Migration: a key introduced by a version 1 record (or a node's first key) has no
    commitment; its first rotation stays (the thief can still win there) and establishes the
    commitment of the key after it."""
    ids = NodeIdentities()
    s, t, a = S.dataset_id(), T.dataset_id(), A.dataset_id()
    assert ids.add_rotation(s, t)  # version 1: no commitment
    assert ids.add_rotation(t, a, next_key_digest(A2.dataset_id()))
    assert not ids.add_rotation(t, N.dataset_id(), next_key_digest(N2.dataset_id()))
    assert ids.commitment(a) == next_key_digest(A2.dataset_id())
    assert not ids.add_rotation(a, N.dataset_id()) and ids.add_rotation(a, A2.dataset_id())


def test_version_1_records_still_decode_and_load() -> None:
    v1 = _rot(S, T, None, 100)
    msg = decode(v1.envelope)
    assert isinstance(msg, SignedMessage) and isinstance(msg.message, KeyRotation)
    assert msg.message.version == 1 and msg.message.next_digest is None
    st, keys = _peer()
    assert asyncio.run(keys.received(v1))
    assert _reloaded(st).canonical(S.dataset_id()) == T.dataset_id()


def test_rotate_commits_to_a_stored_next_key_and_reveals_it_next_time(tmp_path: Path) -> None:
    home = NodeHome(tmp_path / "h")
    home.init()
    first = home.node_key()
    rotate(home)  # the first rotation (no commitment to honour) establishes one
    second = home.node_key()
    committed = load_private_key(committed_key_path(home))
    assert committed_key_path(home).stat().st_mode & 0o077 == 0
    (record,) = [decode(e).message for e in own_records(home)]  # type: ignore[union-attr]
    assert isinstance(record, KeyRotation)
    assert record.next_digest == next_key_digest(committed.dataset_id())
    # The next rotation hands over to exactly that key, and commits to a fresh one.
    r2 = rotate(home)
    assert home.node_key().dataset_id() == committed.dataset_id()
    assert r2.new_id == committed.dataset_id().as_did_key()
    assert load_private_key(committed_key_path(home)).dataset_id() != committed.dataset_id()
    # Revoking the second key: signed by the key it committed to (the current one).
    v = revoke(home, second.dataset_id().as_did_key())
    (rev,) = [
        m
        for m in (decode(e).message for e in own_records(home))  # type: ignore[union-attr]
        if isinstance(m, KeyRevocation)
    ]
    assert v.node_id == second.dataset_id().as_did_key() and rev.by == committed.dataset_id()
    # The first key made no commitment: it revokes itself.
    revoke(home, first.dataset_id().as_did_key())
    by = {
        m.node: m.by
        for m in (decode(e).message for e in own_records(home))  # type: ignore[union-attr]
        if isinstance(m, KeyRevocation)
    }
    assert by[first.dataset_id()] is None


def test_rotate_refuses_without_the_committed_key(tmp_path: Path) -> None:
    home = NodeHome(tmp_path / "h")
    home.init()
    rotate(home)
    offline = tmp_path / "offline-next.key"
    shutil.move(committed_key_path(home), offline)
    with pytest.raises(KeyCommandError, match="does not exist"):
        rotate(home)
    wrong = tmp_path / "wrong.key"
    from coordinator.identity import save_private_key

    save_private_key(wrong, generate_private_key())
    with pytest.raises(KeyCommandError, match="not the key"):
        rotate(home, next_key=wrong)
    committed = load_private_key(offline)
    rotate(home, next_key=offline)  # kept offline, passed by path
    assert home.node_key().dataset_id() == committed.dataset_id()


def test_stolen_key_of_a_home_cannot_take_the_identity(tmp_path: Path) -> None:
    """End to end with a real home: the thief copies ``keys/node.key`` (not ``next.key``) and
    rotates to a key of its own; a peer holding the owner's records refuses it, then accepts
    the owner's rotation and revocation of the stolen key."""
    home = NodeHome(tmp_path / "owner")
    home.init()
    rotate(home)
    stolen = home.node_key()

    async def go() -> None:
        st, peer = _peer()
        for envelope in own_records(home):
            msg = decode(envelope)
            assert isinstance(msg, SignedMessage) and await peer.received(msg)
        assert not await peer.received(_rot(stolen, A, A2, 10**18))
        rotate(home)
        revoke(home, stolen.dataset_id().as_did_key())
        for envelope in own_records(home):
            msg = decode(envelope)
            assert isinstance(msg, SignedMessage)
            await peer.received(msg)
        owner_now = home.node_key().dataset_id()
        assert peer.identities.canonical(stolen.dataset_id()) == owner_now
        assert peer.identities.revoked_at(stolen.dataset_id()) is not None
        assert _reloaded(st).canonical(stolen.dataset_id()) == owner_now

    asyncio.run(go())


def test_once_the_owners_record_is_known_no_order_of_the_thiefs_records_wins() -> None:
    """Every order of the thief's records (T -> A, E -> T, a revocation of T by A) and the
    owner's (T -> N, a revocation of T by N), after the owner's S -> T: the identity ends at
    N, T is revoked, and a restart from the stored records agrees."""
    import itertools

    later = [
        _rot(T, A, A2, 200),
        _rot(E, T, A, 210),
        _rev(T, A, 220),
        _rot(T, N, N2, 300),
        _rev(T, N, 400),
    ]

    async def go(order: tuple[SignedMessage, ...]) -> None:
        st, keys = _peer()
        await keys.received(_rot(S, T, N, 100))
        for sm in order:
            await keys.received(sm)
        for ids in (keys.identities, _reloaded(st)):
            assert ids.canonical(S.dataset_id()) == N.dataset_id()
            assert ids.canonical(E.dataset_id()) == E.dataset_id()
            assert ids.canonical(A.dataset_id()) == A.dataset_id()
            assert ids.revoked_at(T.dataset_id()) == 400

    for order in itertools.permutations(later):
        asyncio.run(go(order))


def test_key_record_fields_match_their_version() -> None:
    from p2p.errors import WireEncodeError

    nonce = b"\x07" * 16
    with pytest.raises(WireEncodeError):  # version 2 needs a commitment
        sign_message(KeyRotation(S.dataset_id(), T.dataset_id(), 1, nonce, bytes(64)), T)
    with pytest.raises(WireEncodeError):  # version 1 has none
        sign_message(
            KeyRotation(S.dataset_id(), T.dataset_id(), 1, nonce, bytes(64), bytes(32), 1), T
        )
    with pytest.raises(WireEncodeError):  # only version 2 names another signer
        sign_message(KeyRevocation(T.dataset_id(), 1, nonce, 1, by=N.dataset_id()), N)
    with pytest.raises(WireEncodeError):  # and never the revoked key itself
        sign_message(KeyRevocation(T.dataset_id(), 1, nonce, by=T.dataset_id()), T)
    v1 = decode(sign_message(KeyRevocation(T.dataset_id(), 1, nonce, 1), T).envelope)
    assert isinstance(v1, SignedMessage) and isinstance(v1.message, KeyRevocation)
    assert v1.message.by is None and v1.message.version == 1
    v2 = decode(_rev(T, N, 5).envelope)
    assert isinstance(v2, SignedMessage) and v2.signer() == N.dataset_id()
