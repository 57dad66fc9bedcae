"""Key inception: a node's first key commits to its next key, and bounded key records in memory.

Issue 39 (item 3): pre-rotation protected only keys a version 2 rotation introduced; a node's
first key (and one a version 1 record introduced) had no commitment, so a thief who stole it
before the owner ever rotated could rotate it to a key of its own and keep the identity. A
:class:`p2p.wire.KeyInception` (kind 8), signed by the key, gives it the commitment
(docs/operations.md, "What a stolen node key can and cannot do"). And the identities held every
stranger's rotation in memory until a restart: they are capped like the stored ones.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import cast

import pytest
from typer.testing import CliRunner

from coordinator.identity import DatasetId, PrivateKey, generate_private_key, load_private_key
from node.adapters.state import InlineState
from node.app.events import EventBus
from node.app.identities import NodeIdentities, load_records
from node.app.keys import NodeKeyRecords
from node.app.ports import StatePort
from node.cli import app
from node.compose import committed_key_path, ensure_inception, own_records
from node.compose import revoke_key as revoke
from node.compose import rotate_key as rotate
from node.home import NodeHome
from node.state import NodeState
from p2p.wire import (
    KeyInception,
    KeyRevocation,
    KeyRotation,
    SignedMessage,
    decode,
    next_key_digest,
    sign_message,
)

S, T, N, N2, A, A2, X = (generate_private_key(bytes([i]) * 32) for i in range(0x41, 0x48))


def _inc(node: PrivateKey, after: PrivateKey, at: int) -> SignedMessage:
    msg = KeyInception(
        node.dataset_id(), next_key_digest(after.dataset_id()), at, at.to_bytes(16, "big")
    )
    return sign_message(msg, node)


def _rot(old: PrivateKey, new: PrivateKey, after: PrivateKey | None, at: int) -> SignedMessage:
    digest = next_key_digest(after.dataset_id()) if after is not None else None
    return KeyRotation.make(old, new, at, at.to_bytes(16, "big"), digest)


def _rev(node: PrivateKey, signer: PrivateKey, at: int) -> SignedMessage:
    by = None if signer is node else signer.dataset_id()
    return sign_message(KeyRevocation(node.dataset_id(), at, at.to_bytes(16, "big"), by=by), signer)


def _peer(cap: int | None = None) -> tuple[NodeState, NodeKeyRecords]:
    st = NodeState.in_memory(time.time_ns)
    state = cast(StatePort, InlineState(st))
    keys = NodeKeyRecords(state, NodeIdentities(cap=cap), EventBus(), cap=cap or 4096)
    return st, keys


def _reloaded(st: NodeState, cap: int | None = None) -> NodeIdentities:
    ids = NodeIdentities(cap=cap)
    load_records(ids, st.key_rotations(), st.key_revocations(), st.key_inceptions())
    return ids


def test_a_thiefs_rotation_of_a_never_rotated_key_is_refused_after_the_owners_inception() -> None:
    """The owner's first key T committed to N by its inception. The thief, holding T, rotates
    T -> A: refused (before inceptions it counted, and the owner's own rotation was then
    refused). The owner's T -> N counts, and so does its revocation of T signed by N."""

    async def go() -> None:
        st, keys = _peer()
        assert await keys.received(_inc(T, N, 100))
        assert not await keys.received(_rot(T, A, A2, 200))  # the thief's
        assert keys.identities.canonical(T.dataset_id()) == T.dataset_id()
        assert not await keys.received(_rev(T, A, 210))  # signed by a key T did not commit to
        assert await keys.received(_rot(T, N, N2, 300))  # the owner's
        assert keys.identities.canonical(T.dataset_id()) == N.dataset_id()
        assert await keys.received(_rev(T, N, 400))
        assert keys.identities.revoked_at(T.dataset_id()) == 400
        assert [(r.old_id, r.new_id) for r in st.key_rotations()] == [
            (T.dataset_id().as_did_key(), N.dataset_id().as_did_key())
        ]
        again = _reloaded(st)
        assert again.canonical(T.dataset_id()) == N.dataset_id()
        assert again.revoked_at(T.dataset_id()) == 400
        assert again.commitment(N.dataset_id()) == next_key_digest(N2.dataset_id())

    asyncio.run(go())


def test_a_second_different_inception_is_refused_and_logged() -> None:
    async def go() -> None:
        st, keys = _peer()
        assert await keys.received(_inc(T, N, 100))
        assert not await keys.received(_inc(T, N, 150))  # the same commitment again: no news
        assert not await keys.received(_inc(T, A, 200))  # a thief's: refused
        assert keys.identities.commitment(T.dataset_id()) == next_key_digest(N.dataset_id())
        (conflict,) = st.recent_events(kind_prefix="node.key_inception_conflict")
        assert conflict.data is not None and conflict.data["node"] == T.dataset_id().as_did_key()
        assert [r.node_id for r in st.key_inceptions()] == [T.dataset_id().as_did_key()]
        assert not await keys.received(_rot(T, A, A2, 300))
        assert await keys.received(_rot(T, N, N2, 400))

    asyncio.run(go())


def test_first_seen_wins_when_the_thief_is_heard_first() -> None:
    """What inception cannot fix: a peer that heard the thief's inception (or its rotation of
    the never-committed key) before the owner's inception keeps the thief's."""

    async def go() -> None:
        _, keys = _peer()
        assert await keys.received(_inc(T, A, 100))  # the thief's, first
        assert not await keys.received(_inc(T, N, 200))
        assert not await keys.received(_rot(T, N, N2, 300))
        _, other = _peer()
        assert await other.received(_rot(T, A, A2, 100))  # the thief rotated first
        assert not await other.received(_inc(T, N, 200))  # "rotated": the first rotation stays

    asyncio.run(go())


def test_inceptions_and_rotation_commitments() -> None:
    ids = NodeIdentities()
    s, t, n, a = (k.dataset_id() for k in (S, T, N, A))
    digest = next_key_digest
    # A version 2 rotation into t commits it: an inception of t is refused.
    assert ids.add_rotation(s, t, digest(n))
    assert ids.add_inception(t, digest(a)) == "committed"
    assert ids.commitment(t) == digest(n)
    # A version 1 rotation gives no commitment: the key may then have an inception.
    v1 = NodeIdentities()
    assert v1.add_rotation(s, t, None)
    assert v1.add_inception(t, digest(n)) == "accepted"
    assert v1.add_inception(s, digest(a)) == "rotated"  # s already rotated: first stays
    assert not v1.add_rotation(t, a, None)
    # A version 2 rotation heard after an inception of its new key sets the commitment (signed
    # by the previous key too), and a successor the inception allowed is dropped.
    late = NodeIdentities()
    assert late.add_inception(t, digest(a)) == "accepted"
    assert late.add_rotation(t, a, None)
    assert late.add_rotation(s, t, digest(n))
    assert late.commitment(t) == digest(n) and late.successor(t) is None
    assert late.add_inception(t, digest(a)) == "committed"


def test_ensure_inception_on_a_home_then_rotate_hands_over_to_next_key(tmp_path: Path) -> None:
    home = NodeHome(tmp_path / "h")
    home.init()  # a home made before inceptions: no next.key, no record
    first = home.node_key()
    made = ensure_inception(home)
    assert made is not None and made.created
    assert made.node_id == first.dataset_id().as_did_key()
    committed = load_private_key(committed_key_path(home))
    assert committed_key_path(home).stat().st_mode & 0o077 == 0
    assert ensure_inception(home) is None  # committed already
    (record,) = [decode(e).message for e in own_records(home)]  # type: ignore[union-attr]
    assert isinstance(record, KeyInception) and record.node == first.dataset_id()
    assert record.next_digest == next_key_digest(committed.dataset_id())
    with NodeState.open(home.path / "state.db", time.time_ns) as st:
        (event,) = st.recent_events(kind_prefix="node.key_incepted")
        assert event.data is not None and "keys/next.key" in event.data["action"]
    # The first rotation now hands over to the committed key, and a peer fed the records
    # accepts it and refuses a thief's.
    rotate(home)
    assert home.node_key().dataset_id() == committed.dataset_id()
    revoke(home, first.dataset_id().as_did_key())
    kinds = [type(decode(e).message) for e in own_records(home)]  # type: ignore[union-attr]
    assert kinds == [KeyInception, KeyRotation, KeyRevocation]

    async def go() -> None:
        _, peer = _peer()
        assert await peer.received(cast(SignedMessage, decode(own_records(home)[0])))
        assert not await peer.received(_rot(first, A, A2, 10**18))  # a thief of the first key
        for envelope in own_records(home)[1:]:
            assert await peer.received(cast(SignedMessage, decode(envelope)))
        assert peer.identities.canonical(first.dataset_id()) == committed.dataset_id()
        rev = peer.identities.revoked_at(first.dataset_id())
        assert rev is not None

    asyncio.run(go())


def test_ensure_inception_uses_an_existing_next_key_and_skips_a_committed_one(
    tmp_path: Path,
) -> None:
    """A home whose key a version 1 rotation introduced gets an inception; one whose key a
    version 2 rotation committed does not; an existing keys/next.key is the one committed."""
    home = NodeHome(tmp_path / "h")
    home.init()
    current = home.node_key()
    from coordinator.identity import save_private_key

    save_private_key(committed_key_path(home), N)
    with NodeState.open(home.path / "state.db", time.time_ns) as st:
        v1 = _rot(S, current, None, 100)
        st.add_key_rotation(
            S.dataset_id().as_did_key(), current.dataset_id().as_did_key(), 100, v1.envelope
        )
        made = ensure_inception(home, st)
    assert made is not None and not made.created
    assert load_private_key(committed_key_path(home)).dataset_id() == N.dataset_id()

    other = NodeHome(tmp_path / "o")
    other.init()
    with NodeState.open(other.path / "state.db", time.time_ns) as st:
        me = other.node_key()
        v2 = _rot(S, me, N, 100)
        st.add_key_rotation(
            S.dataset_id().as_did_key(), me.dataset_id().as_did_key(), 100, v2.envelope
        )
        assert ensure_inception(other, st) is None
    assert not committed_key_path(other).exists()


def test_init_writes_next_key_and_the_inception(tmp_path: Path) -> None:
    home = tmp_path / "h"
    result = CliRunner().invoke(app, ["init", "--home", str(home), "--json"])
    assert result.exit_code == 0, result.output
    h = NodeHome(home)
    assert committed_key_path(h).is_file()
    (record,) = [decode(e).message for e in own_records(h)]  # type: ignore[union-attr]
    assert isinstance(record, KeyInception) and record.node == h.node_key().dataset_id()
    again = CliRunner().invoke(app, ["init", "--home", str(home), "--json"])
    assert again.exit_code == 0 and len(own_records(h)) == 1


def _fresh(i: int) -> PrivateKey:
    return generate_private_key(i.to_bytes(4, "big") * 8)


def test_identities_hold_strangers_records_within_the_cap_and_trusted_chains_always() -> None:
    cap = 50
    ids = NodeIdentities(cap=cap)
    trusted = [_fresh(10_000 + i).dataset_id() for i in range(5)]
    ids.add_inception(trusted[0], next_key_digest(trusted[1]), kept=True)
    for i in range(3):
        assert ids.add_rotation(
            trusted[i], trusted[i + 1], next_key_digest(trusted[i + 2]), kept=True
        )
    trusted = trusted[:4]
    strangers = [_fresh(i).dataset_id() for i in range(2_001)]
    for i in range(0, 2_000, 2):
        o, n = strangers[i], strangers[i + 1]
        assert ids.add_inception(o, next_key_digest(n), kept=False) == "accepted"
        assert ids.add_rotation(o, n, next_key_digest(strangers[i + 2]), kept=False)
        assert ids.add_revocation(n, i, kept=False)
    held = ids.held()
    assert held["rotations"] == cap + 3 and held["revocations"] == cap
    assert held["commitments"] <= 2 * cap + 4
    # The newest strangers' records are held, the oldest evicted; the trusted chain is whole.
    assert ids.canonical(strangers[1998]) == strangers[1999]
    assert ids.canonical(strangers[0]) == strangers[0]
    assert ids.aliases(trusted[0]) == set(trusted)
    assert ids.canonical(trusted[0]) == trusted[-1]


def test_memory_and_state_hold_the_same_records_under_a_flood() -> None:
    cap = 20

    async def go() -> None:
        st, keys = _peer(cap)
        keys_ = [_fresh(i) for i in range(121)]
        for i in range(0, 120, 2):
            await keys.received(_inc(keys_[i], keys_[i + 1], i))
            await keys.received(_rot(keys_[i], keys_[i + 1], keys_[i + 2], i + 1))
        assert len(st.key_rotations()) == cap and len(st.key_inceptions()) == cap
        stored = {DatasetId.parse(r.old_id) for r in st.key_rotations()}
        held = {k.dataset_id() for k in keys_ if keys.identities.successor(k.dataset_id())}
        assert held == stored
        again = _reloaded(st, cap)
        for k in keys_:
            d = k.dataset_id()
            assert again.canonical(d) == keys.identities.canonical(d)

    asyncio.run(go())


def test_aliases_walk_one_chain_not_every_record() -> None:
    """``aliases`` used to test every known rotation (a stranger can add thousands, and the
    trust driver asks on every rebuild): it now walks the one chain."""
    ids = NodeIdentities()
    chain = [_fresh(50_000 + i).dataset_id() for i in range(3)]
    ids.add_rotation(chain[0], chain[1])
    ids.add_rotation(chain[1], chain[2])
    many = [_fresh(i).dataset_id() for i in range(20_001)]
    for i in range(0, 20_000, 2):
        ids.add_rotation(many[i], many[i + 1])
    t0 = time.perf_counter()
    for _ in range(1_000):
        assert ids.aliases(chain[0]) == set(chain)
    per_call = (time.perf_counter() - t0) / 1_000
    assert per_call < 1e-4, f"aliases took {per_call * 1e6:.0f} µs with 10,000 rotations known"


@pytest.mark.parametrize("bad", ["truncated", "unknown-version"])
def test_inception_decoding_is_strict(bad: str) -> None:
    from p2p.errors import WireDecodeError

    env = _inc(T, N, 1).envelope
    data = env[:-65] + env[-64:] if bad == "truncated" else env[:6] + b"\x02" + env[7:]
    with pytest.raises(WireDecodeError) as ei:
        decode(data)
    assert ei.value.reason == bad


def test_a_trusted_nodes_records_survive_a_flood_in_memory_and_in_the_state() -> None:
    async def go() -> None:
        st = NodeState.in_memory(time.time_ns)
        state = cast(StatePort, InlineState(st))
        keys = NodeKeyRecords(
            state, NodeIdentities(cap=5), EventBus(), cap=5, trusted_nodes=lambda: [T.dataset_id()]
        )
        assert await keys.received(_inc(T, N, 1))
        assert await keys.received(_rot(T, N, N2, 2))
        flood = [_fresh(70_000 + i) for i in range(61)]
        for i in range(0, 60, 2):
            await keys.received(_inc(flood[i], flood[i + 1], 10 + i))
            await keys.received(_rot(flood[i], flood[i + 1], flood[i + 2], 11 + i))
        for ids in (keys.identities, _reloaded(st, 5)):
            assert ids.canonical(T.dataset_id()) == N.dataset_id()
            assert ids.commitment(N.dataset_id()) == next_key_digest(N2.dataset_id())
            assert ids.held()["rotations"] == 5 + 1
        assert len(st.key_rotations()) == 6 and len(st.key_inceptions()) == 6
        # The trusted node's first key is still committed: a thief's rotation stays refused.
        assert not await keys.received(_rot(T, A, A2, 100))

    asyncio.run(go())
