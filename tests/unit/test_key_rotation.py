"""Node key rotation and revocation: the records, the identities they build, what they change
in trust and in the queries, and ``odf-node key rotate`` / ``key revoke`` on a home."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import cast

import pytest

from coordinator.errors import SignatureError
from coordinator.identity import generate_private_key
from coordinator.multiformats import Multihash
from node.adapters.state import InlineState
from node.app.events import EventBus
from node.app.identities import NodeIdentities
from node.app.keys import NodeKeyRecords
from node.app.node_keys import KeyCommandError
from node.app.ports import StatePort
from node.app.queries import NodeQueries
from node.app.trust import TrustDriver
from node.compose import own_records, retired_keys
from node.compose import revoke_key as revoke
from node.compose import rotate_key as rotate
from node.home import NodeHome
from node.state import NodeState
from p2p.core import CoreConfig, ProtocolCore
from p2p.trust import TrustConfig
from p2p.wire import (
    Attestation,
    Checks,
    FetchLocations,
    KeyRevocation,
    KeyRotation,
    Verdict,
    decode,
    next_key_digest,
    sign_message,
)

OLD, NEW, NEWER, DS = (generate_private_key(bytes([i]) * 32) for i in (0x11, 0x12, 0x13, 0x14))
HEAD = Multihash.sha3_256(b"head")


def test_rotation_record_needs_both_keys() -> None:
    sm = KeyRotation.make(OLD, NEW, 1, b"\x01" * 16, next_key_digest(NEWER.dataset_id()))
    msg = decode(sm.envelope)
    assert isinstance(msg.message, KeyRotation)  # type: ignore[union-attr]
    assert msg.message.old == OLD.dataset_id() and msg.signer() == NEW.dataset_id()  # type: ignore[union-attr]
    # The new key alone cannot claim the old identity.
    forged = KeyRotation(
        OLD.dataset_id(), NEW.dataset_id(), 1, b"\x01" * 16, b"\x00" * 64, b"\x00" * 32
    )
    with pytest.raises(SignatureError):
        decode(sign_message(forged, NEW).envelope)
    # Nor can the old key alone hand it over (the envelope must be signed by the new key).
    with pytest.raises(SignatureError):
        decode(sign_message(sm.message, OLD).envelope)


def test_identities_follow_chains_once_and_revocations() -> None:
    ids = NodeIdentities()
    a, b, c = OLD.dataset_id(), NEW.dataset_id(), NEWER.dataset_id()
    assert ids.canonical(a) == a and ids.empty
    assert ids.add_rotation(a, b) and ids.add_rotation(b, c)
    assert ids.canonical(a) == c and ids.canonical(b) == c
    assert ids.aliases(c) == {a, b, c}
    assert not ids.add_rotation(a, c)  # a key rotates once: the first record stays
    assert not ids.add_rotation(c, a)  # no cycle
    assert ids.counts(a, 10) and ids.add_revocation(a, 100)
    assert ids.counts(a, 99) and not ids.counts(a, 100) and not ids.counts(a, None)
    assert not ids.add_revocation(a, 200) and ids.revoked_at(a) == 100  # the earliest stays
    assert ids.add_revocation(a, 50) and ids.revoked_at(a) == 50


def _attestation(key: object, issued_at_ns: int) -> Attestation:
    return Attestation(
        node=key.dataset_id(),  # type: ignore[attr-defined]
        dataset=DS.dataset_id(),
        head=HEAD,
        verdict=Verdict.VERIFIED,
        engine_name="none",
        engine_version="",
        checks=Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY,
        locations=FetchLocations(),
        issued_at_ns=issued_at_ns,
        nonce=issued_at_ns.to_bytes(16, "big"),
    )


class _NoVerify:
    async def queue(self, *args: object, **kw: object) -> None:
        pass


def _driver(state: StatePort, events: EventBus, listed: list[object]) -> TrustDriver:
    config = TrustConfig.from_settings(
        {
            "policy": "quorum",
            "k": 1,
            "trusted_attesters": [k.dataset_id().as_did_key() for k in listed],  # type: ignore[attr-defined]
        },
        can_replay=False,
    )
    return TrustDriver(config, state, events, lambda: 1_000, random.Random(1), _NoVerify())


def test_listed_old_key_follows_the_rotation_and_revocation_stops_counting() -> None:
    """Trust (quorum k=1 naming the OLD key): the new key's attestation counts as the node's
    once the rotation is known, shown under the new id; a revoked key's later attestation
    does not count."""

    async def go() -> None:
        st = NodeState.in_memory(lambda: 1_000)
        state = cast(StatePort, InlineState(st))
        events = EventBus()
        did = DS.dataset_id()
        st.subscribe(did.as_did_str(), None, None)
        trust = _driver(state, events, [OLD])
        keys = NodeKeyRecords(state, trust.identities, events, trust=trust)
        await trust.restore()
        st.record_accepted_head(did.as_did_str(), 0, 1, HEAD.to_multibase(), "p", b"a1")
        await trust.head_accepted(did, HEAD, 1)
        # The new key attests before the rotation is known: not listed, not counted.
        att = sign_message(_attestation(NEW, 500), NEW)
        st.add_attestation(
            did.as_did_str(),
            HEAD.to_multibase(),
            "verified",
            NEW.dataset_id().as_did_key(),
            att.envelope,
            False,
        )
        await trust.attestation(did, HEAD, NEW.dataset_id(), Verdict.VERIFIED, 500)
        assert trust._policy(did).status(did, HEAD).state.value == "pending"
        # The rotation arrives: the stored attestation is re-counted under the new id.
        assert await keys.received(KeyRotation.make(OLD, NEW, 400, b"\x02" * 16, None))
        status = trust._policy(did).status(did, HEAD)
        assert status.state.value == "trusted" and status.attesters == (NEW.dataset_id(),)
        # Queries show the old key's attestations as the same node (the new id).
        old_att = sign_message(_attestation(OLD, 300), OLD)
        st.add_attestation(
            did.as_did_str(),
            HEAD.to_multibase(),
            "verified",
            OLD.dataset_id().as_did_key(),
            old_att.envelope,
            False,
        )
        rows = await NodeQueries(state).attestations(did.as_did_str())
        assert {r.signer for r in rows} == {
            OLD.dataset_id().as_did_key(),
            NEW.dataset_id().as_did_key(),
        }
        assert {r.node for r in rows} == {NEW.dataset_id().as_did_key()}
        assert [e for e in st.events(0, 100) if e.kind == "node.key_rotated"]
        # A duplicate record changes nothing.
        assert not await keys.received(KeyRotation.make(OLD, NEW, 400, b"\x02" * 16, None))

        # Revocation of NEW at 1,000: its attestation of a later head issued at 2,000 does not
        # count; one issued before the revocation does.
        head2 = Multihash.sha3_256(b"head2")
        st.record_accepted_head(did.as_did_str(), 0, 2, head2.to_multibase(), "p", b"a2")
        await trust.head_accepted(did, head2, 2)
        revocation = sign_message(KeyRevocation(NEW.dataset_id(), 1_000, b"\x03" * 16), NEW)
        assert await keys.received(revocation)
        await trust.attestation(did, head2, NEW.dataset_id(), Verdict.VERIFIED, 2_000)
        assert trust._policy(did).status(did, head2).state.value == "pending"
        await trust.attestation(did, head2, NEW.dataset_id(), Verdict.VERIFIED, 900)
        assert trust._policy(did).status(did, head2).state.value == "trusted"

    asyncio.run(go())


def test_core_moves_a_rotated_peers_score() -> None:
    core = ProtocolCore(CoreConfig(), random.Random(0))
    core._peer("old", 0).score = 7.0  # as earned by first deliveries
    assert core.move_peer_score("old", "new", 0) == 7.0
    assert core.peer_score("new", 0) == 7.0 and core.peer_score("old", 0) == 0.0
    core._peer("bad", 0).score = -50.0
    core._peer("fresh", 0).score = 3.0
    assert core.move_peer_score("bad", "fresh", 0) == -50.0  # no laundering of a bad record
    assert core.move_peer_score("unknown", "x", 0) is None


def test_rotate_and_revoke_a_home(tmp_path: Path) -> None:
    home = NodeHome(tmp_path / "h")
    home.init()
    old = home.node_key()
    with pytest.raises(KeyCommandError, match="no retired key"):
        revoke(home)
    r = rotate(home)
    new = home.node_key()
    assert r.old_id == old.dataset_id().as_did_key() and r.new_id == new.dataset_id().as_did_key()
    assert new.dataset_id() != old.dataset_id() and r.new_peer_id.startswith("12D3KooW")
    assert [k.dataset_id() for k in retired_keys(home)] == [old.dataset_id()]
    assert (home.path / "keys" / "retired").stat().st_mode & 0o077 == 0
    assert not (home.path / "keys" / "node.key.next").exists()
    records = own_records(home)
    assert len(records) == 1 and isinstance(decode(records[0]).message, KeyRotation)  # type: ignore[union-attr]
    # The current key cannot be revoked; a retired one can, and only once it is named right.
    with pytest.raises(KeyCommandError, match="not a retired key"):
        revoke(home, new.dataset_id().as_did_key())
    v = revoke(home, old.dataset_id().as_did_key(), clock_ns=time.time_ns())
    assert v.node_id == old.dataset_id().as_did_key()
    kinds = [type(decode(e).message) for e in own_records(home)]  # type: ignore[union-attr]
    assert kinds == [KeyRotation, KeyRevocation]
    # A second rotation chains on: old -> new -> newer.
    r2 = rotate(home)
    assert r2.old_id == r.new_id and len(retired_keys(home)) == 2


def test_rotation_interrupted_before_the_rename_completes_next_time(tmp_path: Path) -> None:
    home = NodeHome(tmp_path / "h")
    home.init()
    old = home.node_key()
    r = rotate(home)
    new = home.node_key()
    # Simulate a crash between the state record and the rename: node.key is the old key again,
    # node.key.next the new one.
    nxt = home.path / "keys" / "node.key.next"
    home.node_key_path.rename(nxt)
    from coordinator.identity import save_private_key

    save_private_key(home.node_key_path, old)
    again = rotate(home)
    assert (
        again.resumed
        and again.new_id == r.new_id
        and home.node_key().dataset_id() == new.dataset_id()
    )
    # A leftover next key whose record never reached the state is discarded.
    save_private_key(nxt, generate_private_key())
    r3 = rotate(home)
    assert not r3.resumed and r3.old_id == r.new_id and not nxt.exists()


def test_rotate_refuses_while_the_home_is_locked(tmp_path: Path) -> None:
    from node.home_lock import HomeLock, HomeLocked

    home = NodeHome(tmp_path / "h")
    home.init()
    with HomeLock(home.path), pytest.raises(HomeLocked):
        rotate(home)
