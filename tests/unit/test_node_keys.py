"""Node key inception, rotation and revocation as a use case (node/app/node_keys.py) over the
in-memory key store and an in-memory state: the decisions without a home on disk (the
home-level behaviour, files and crash recovery, is tested in test_key_rotation.py,
test_key_prerotation.py and test_key_inception.py)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.identity import generate_private_key
from node.adapters.home_keys import MemoryKeyStore
from node.adapters.state import InlineState
from node.app.node_keys import KeyCommandError, NodeKeys
from node.state import NodeState
from p2p.wire import KeyInception, KeyRevocation, KeyRotation, decode_unverified


def _keys(clock: list[int]) -> tuple[NodeKeys, MemoryKeyStore, NodeState]:
    st = NodeState.in_memory(lambda: clock[0])
    store = MemoryKeyStore(generate_private_key())
    nonces = iter(range(1, 1000))
    keys = NodeKeys(
        store, InlineState(st), lambda: clock[0], nonce=lambda: next(nonces).to_bytes(16, "big")
    )
    return keys, store, st


def test_inception_then_rotation_then_revocation() -> None:
    clock = [1_000]
    keys, store, _ = _keys(clock)
    first = store.current
    made = asyncio.run(keys.ensure_inception())
    assert made is not None and made.created and made.next_key == "keys/next.key"
    committed = store.files["keys/next.key"]
    assert asyncio.run(keys.ensure_inception()) is None  # committed already
    clock[0] = 2_000
    r = asyncio.run(keys.rotate())
    # Pre-rotation: the new node key is the one the first key committed to.
    assert store.current.dataset_id() == committed.dataset_id()
    assert r.old_id == first.dataset_id().as_did_key() and not r.resumed
    assert [k.dataset_id() for k in store.retired()] == [first.dataset_id()]
    assert store.files["keys/next.key"].dataset_id() != committed.dataset_id()
    v = asyncio.run(keys.revoke())
    assert v.node_id == first.dataset_id().as_did_key()
    kinds = [type(decode_unverified(e).message) for e in asyncio.run(keys.own_records())]
    assert kinds == [KeyInception, KeyRotation, KeyRevocation]
    # Signed by the successor the revoked key committed to, not by the revoked key.
    messages = [decode_unverified(e).message for e in asyncio.run(keys.own_records())]
    (rev,) = [m for m in messages if isinstance(m, KeyRevocation)]
    assert rev.by == committed.dataset_id()


def test_a_missing_or_wrong_committed_key_refuses_the_rotation() -> None:
    keys, store, _ = _keys([1])
    asyncio.run(keys.ensure_inception())
    committed = store.files.pop("keys/next.key")
    with pytest.raises(KeyCommandError, match="does not exist"):
        asyncio.run(keys.rotate())
    store.files["elsewhere"] = generate_private_key()
    with pytest.raises(KeyCommandError, match="not the key"):
        asyncio.run(keys.rotate("elsewhere"))
    store.files["offline"] = committed
    assert asyncio.run(keys.rotate("offline")).new_id == committed.dataset_id().as_did_key()


def test_revoke_names_the_retired_keys_it_knows() -> None:
    keys, _, _ = _keys([1])
    with pytest.raises(KeyCommandError, match="no retired key"):
        asyncio.run(keys.revoke())
    asyncio.run(keys.rotate())
    with pytest.raises(KeyCommandError, match="is not a retired key"):
        asyncio.run(keys.revoke(generate_private_key().dataset_id().as_did_key()))
