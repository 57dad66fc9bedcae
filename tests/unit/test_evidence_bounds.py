"""Strangers' evidence costs bounded space and is forwarded within a budget per signing key
(issue 39, defect 5: 20,000 disputes from one key took 28.4 MB of ``state.db`` and reached every
peer). Trusted evidence and the node's own are never evicted. Injected clocks, no sleeps."""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from coordinator.identity import DatasetId, PrivateKey, generate_private_key
from coordinator.multiformats import Multihash
from node.adapters.state import InlineState
from node.app.effects import NodeEffects
from node.app.events import EventBus
from node.app.identities import NodeIdentities
from node.app.metrics import NodeMetrics
from node.app.ports import StatePort
from node.app.rows import EvidenceCaps
from node.app.trust import TrustDriver
from node.app.verify import VerifyPipeline
from node.state.migrations import migrate
from node.state.store import NodeState
from p2p.core import NS_PER_S, Accept, CoreConfig, Forward, Ignore, MessageReceived, ProtocolCore
from p2p.wire import (
    Attestation,
    Checks,
    Dispute,
    DisputeKind,
    Evidence,
    FetchLocations,
    KeyRotation,
    SignedMessage,
    Verdict,
    next_key_digest,
    sign_message,
)

T0 = 1_800_000_000 * NS_PER_S
OWNER = generate_private_key(b"\x31" * 32)
DID = OWNER.dataset_id()
OTHER = generate_private_key(b"\x32" * 32).dataset_id()
MALLORY = generate_private_key(b"\x33" * 32)
TRUSTED = generate_private_key(b"\x34" * 32)
_NONCE = itertools.count(1)
_SEEDS = itertools.count(1_000)


def fresh_key() -> PrivateKey:
    return generate_private_key(next(_SEEDS).to_bytes(32, "big"))


def h(label: str) -> Multihash:
    return Multihash.sha3_256(label.encode())


def dispute(key: PrivateKey, block: str = "b", dataset: DatasetId = DID) -> SignedMessage:
    return sign_message(
        Dispute(
            node=key.dataset_id(),
            dataset=dataset,
            block=h(block),
            kind=DisputeKind.REPLAY_MISMATCH,
            expected=Evidence(logical_hash=h("x")),
            computed=Evidence(logical_hash=h("y")),
            detail="replay differs",
            issued_at_ns=T0,
            nonce=next(_NONCE).to_bytes(16, "big"),
        ),
        key,
    )


def attestation(key: PrivateKey, dataset: DatasetId = DID) -> SignedMessage:
    return sign_message(
        Attestation(
            node=key.dataset_id(),
            dataset=dataset,
            head=h("head"),
            verdict=Verdict.INTEGRITY_ONLY,
            engine_name="none",
            engine_version="0",
            checks=Checks.METADATA_INTEGRITY,
            locations=FetchLocations(),
            issued_at_ns=T0,
            nonce=next(_NONCE).to_bytes(16, "big"),
        ),
        key,
    )


def store(
    st: NodeState,
    sm: SignedMessage,
    caps: EvidenceCaps | None,
    trusted: tuple[str, ...] = (),
    own: bool = False,
) -> bool:
    msg = sm.message
    assert isinstance(msg, Dispute)
    return st.add_dispute(
        msg.dataset.as_did_str(),
        msg.block.to_multibase(),
        "replay_mismatch",
        msg.node.as_did_key(),
        sm.envelope,
        own,
        trusted=trusted,
        caps=caps,
    )


def signers(st: NodeState) -> list[str]:
    return [r[0] for r in st.conn.execute("SELECT signer FROM disputes ORDER BY id")]


# ---------------------------------------------------------------- the protocol core


def test_one_keys_flood_through_many_peers_is_forwarded_only_within_its_budget() -> None:
    """Before: every peer had its own rate, so one key reached everyone through ten peers."""
    core = ProtocolCore(
        CoreConfig(signer_rate_burst=10.0, signer_rate_per_s=1.0), random.Random(1), [DID]
    )
    forwarded = ignored = 0
    for i in range(100):
        out = core.handle(MessageReceived(f"peer-{i % 10}", dispute(MALLORY).envelope, T0))
        forwarded += sum(isinstance(d, Forward) for d in out)
        ignored += sum(isinstance(d, Ignore) and d.reason == "signer-rate-limited" for d in out)
        assert not any(isinstance(d, Accept) for d in out[1:])  # at most one per message
    assert (forwarded, ignored) == (10, 90)
    # The relaying peers are not blamed, and another key is not slowed by Mallory's flood.
    assert all(core.peer_score(f"peer-{i}", T0) >= 0 for i in range(10))
    out = core.handle(MessageReceived("peer-0", dispute(TRUSTED).envelope, T0))
    assert any(isinstance(d, Forward) for d in out)
    # The budget refills with time: 5 s later, 5 more of Mallory's.
    later = T0 + 5 * NS_PER_S
    outs = [
        core.handle(MessageReceived("peer-1", dispute(MALLORY).envelope, later)) for _ in range(8)
    ]
    assert sum(any(isinstance(d, Forward) for d in out) for out in outs) == 5


def test_key_rotations_spend_the_old_keys_budget_and_buckets_are_bounded() -> None:
    """Each rotation is signed by a new key (free to make): the rotating old key pays."""
    core = ProtocolCore(
        CoreConfig(signer_rate_burst=2.0, signer_rate_per_s=0.001, max_signers=8),
        random.Random(1),
        [DID],
    )
    accepted = 0
    for _ in range(5):
        rot = KeyRotation.make(
            MALLORY,
            fresh_key(),
            T0,
            next(_NONCE).to_bytes(16, "big"),
            next_key_digest(fresh_key().dataset_id()),
        )
        out = core.handle(MessageReceived("p", rot.envelope, T0))
        accepted += sum(isinstance(d, Accept) for d in out)
    assert accepted == 2
    for _ in range(20):
        core.handle(MessageReceived("p", dispute(fresh_key()).envelope, T0))
    assert core.signer_count() == 8


def test_signer_budget_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="signer_rate_burst"):
        CoreConfig(signer_rate_per_s=0)


# ---------------------------------------------------------------- the state


def test_one_key_is_held_to_its_cap_and_fresh_keys_to_the_datasets() -> None:
    """Before: ``add_dispute`` stored all 20,000 of one key (no caps)."""
    st = NodeState.in_memory(lambda: T0)
    caps = EvidenceCaps(per_signer=5, per_dataset=8, total=12)
    kept = [store(st, dispute(MALLORY, f"b{i}"), caps) for i in range(20)]
    assert kept == [True] * 20  # the new one stays, the oldest goes
    assert (
        len(signers(st)) == 5
        and st.evidence_count("disputes", MALLORY.dataset_id().as_did_key()) == 5
    )
    for _ in range(10):
        store(st, dispute(fresh_key()), caps)
    assert len(signers(st)) == 8 == st.evidence_count("disputes", DID.as_did_str())
    # Another dataset: the total cap evicts the oldest strangers' rows of the first.
    for _ in range(6):
        store(st, dispute(fresh_key(), dataset=OTHER), caps)
    assert st.evidence_count("disputes") == 12 == len(signers(st))
    assert st.evidence_count("disputes", OTHER.as_did_str()) == 6


def test_trusted_and_own_evidence_is_never_evicted_nor_counted() -> None:
    st = NodeState.in_memory(lambda: T0)
    caps = EvidenceCaps(per_signer=2, per_dataset=3, total=3)
    trusted = (TRUSTED.dataset_id().as_did_key(),)
    first = dispute(TRUSTED, "forged")
    assert store(st, first, caps, trusted)
    assert store(st, dispute(OWNER, "own"), caps, own=True)
    for _ in range(50):
        store(st, dispute(fresh_key()), caps, trusted)
    for _ in range(5):  # past the trusted key's own per-signer cap: kept all the same
        store(st, dispute(TRUSTED), caps, trusted)
    rows = signers(st)
    assert rows.count(TRUSTED.dataset_id().as_did_key()) == 6
    assert OWNER.dataset_id().as_did_key() in rows and len(rows) == 6 + 1 + 3
    assert st.evidence_count("disputes") == 3
    assert st.disputes_of_block(DID.as_did_str(), h("forged").to_multibase(), trusted, 0)


def test_a_key_trusted_since_it_was_stored_is_kept_before_any_eviction() -> None:
    """The operator trusts a key after its dispute was stored: the next insert of the dataset
    marks it kept before evicting anything."""
    st = NodeState.in_memory(lambda: T0)
    caps = EvidenceCaps(per_signer=5, per_dataset=2, total=100)
    store(st, dispute(TRUSTED, "forged"), caps)  # a stranger then
    trusted = (TRUSTED.dataset_id().as_did_key(),)
    for _ in range(10):
        store(st, dispute(fresh_key()), caps, trusted)
    assert TRUSTED.dataset_id().as_did_key() in signers(st)
    assert st.evidence_count("disputes", DID.as_did_str()) == 2


def test_attestations_are_bounded_alike() -> None:
    st = NodeState.in_memory(lambda: T0)
    caps = EvidenceCaps(per_signer=3, per_dataset=100, total=100)
    for _ in range(10):
        sm = attestation(MALLORY)
        st.add_attestation(
            DID.as_did_str(),
            h("head").to_multibase(),
            "integrity_only",
            MALLORY.dataset_id().as_did_key(),
            sm.envelope,
            False,
            caps=caps,
        )
    assert len(st.attestations(DID.as_did_str())) == 3 == st.evidence_count("attestations")


def test_strangers_key_records_are_capped_and_the_nodes_own_kept() -> None:
    st = NodeState.in_memory(lambda: T0)
    own = [fresh_key().dataset_id().as_did_key() for _ in range(3)]
    st.add_key_rotation(own[0], own[1], T0, b"own")  # the CLI's: no cap, kept
    st.add_key_revocation(own[2], T0, b"own-revocation")
    for i in range(20):
        old, new = (fresh_key().dataset_id().as_did_key() for _ in range(2))
        st.add_key_rotation(old, new, T0 + i, f"r{i}".encode(), cap=4)
        st.add_key_revocation(old, T0, f"v{i}".encode(), cap=4)
    kept_new = fresh_key().dataset_id().as_did_key()
    st.add_key_rotation(kept_new, own[0], T0, b"trusted", kept=True, cap=4)
    rotations = {r.old_id for r in st.key_rotations()}
    assert own[0] in rotations and kept_new in rotations and len(rotations) == 4 + 2
    revoked = {r.node_id for r in st.key_revocations()}
    assert own[2] in revoked and len(revoked) == 4 + 1
    assert st.evidence_count("key_rotations") == 4 == st.evidence_count("key_revocations")


def test_migration_counts_the_stored_strangers_evidence(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "state.db")
    migrate(conn, target=10)
    for i, (signer, own) in enumerate((("did:key:a", 0), ("did:key:a", 0), ("did:key:b", 1))):
        conn.execute(
            "INSERT INTO disputes (content_id, did, head, kind, signer, envelope, own, detail,"
            " received_ns) VALUES (?, ?, 'f1620aa', 'k', ?, x'00', ?, '', 0)",
            (f"c{i}", DID.as_did_str(), signer, own),
        )
    conn.execute("INSERT INTO key_rotations VALUES ('did:key:o', 'did:key:n', 0, x'00', 0)")
    conn.commit()
    migrate(conn)
    conn.close()
    with NodeState.open(tmp_path / "state.db", lambda: T0) as st:
        assert st.evidence_count("disputes") == 2 == st.evidence_count("disputes", "did:key:a")
        assert st.evidence_count("disputes", DID.as_did_str()) == 2
        # A key record stored before may be the node's own: kept.
        assert st.evidence_count("key_rotations") == 0
        st.add_key_rotation("did:key:x", "did:key:y", 1, b"r", cap=1)
        assert {r.old_id for r in st.key_rotations()} == {"did:key:o", "did:key:x"}


# ---------------------------------------------------------------- the node's effects


@dataclass
class _Config:
    trusted_attesters: tuple[DatasetId, ...]


@dataclass
class _Trust:
    """The two things the effects ask the trust driver for, and what they feed it."""

    trusted: tuple[DatasetId, ...]
    identities: NodeIdentities = field(default_factory=NodeIdentities)
    fed: list[str] = field(default_factory=list)

    def config_for(self, _did: DatasetId) -> _Config:
        return _Config(self.trusted)

    async def dispute(self, *args: Any) -> None:
        self.fed.append("dispute")

    async def attestation(self, *args: Any) -> None:
        self.fed.append("attestation")


def test_gossiped_evidence_is_stored_within_the_caps_and_trusted_kept() -> None:
    async def scenario() -> None:
        sync = NodeState.in_memory(lambda: T0)
        state = cast(StatePort, InlineState(sync))
        tasks: set[asyncio.Task[Any]] = set()
        trust = _Trust((TRUSTED.dataset_id(),))
        effects = NodeEffects(
            state,
            cast(VerifyPipeline, None),
            EventBus(),
            NodeMetrics(),
            lambda coro: tasks.add(asyncio.ensure_future(coro)),  # type: ignore[func-returns-value]
            lambda did: False,
            lambda: None,
            cast(TrustDriver, trust),
            caps=EvidenceCaps(per_signer=4, per_dataset=6, total=6),
        )
        effects.accepted(Accept("p", dispute(TRUSTED, "forged")))
        for _ in range(30):
            effects.accepted(Accept("p", dispute(MALLORY)))
            effects.accepted(Accept("p", dispute(fresh_key())))
        for _ in range(10):
            effects.accepted(Accept("p", attestation(MALLORY)))
        await effects.flush()
        rows = signers(sync)
        assert rows[0] == TRUSTED.dataset_id().as_did_key() and len(rows) == 1 + 6
        assert rows.count(MALLORY.dataset_id().as_did_key()) <= 4
        assert len(sync.attestations()) == 4
        assert trust.fed.count("dispute") == 61  # the policy still hears each (its own caps)
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())


# ---------------------------------------------------------------- by default (the API before)


def test_by_default_the_core_forwards_one_keys_flood_only_within_its_budget() -> None:
    """Before: all 1,000 disputes of one key, brought by 50 peers, were forwarded."""
    core = ProtocolCore(CoreConfig(), random.Random(1), [DID])
    forwarded = 0
    for i in range(1000):
        t = T0 + i * NS_PER_S // 100  # 100 a second: 10 s in all
        out = core.handle(MessageReceived(f"peer-{i % 50}", dispute(MALLORY).envelope, t))
        forwarded += sum(isinstance(d, Forward) for d in out)
    cfg = CoreConfig()
    assert forwarded <= cfg.signer_rate_burst + cfg.signer_rate_per_s * 10 < 1000


def test_by_default_the_effects_store_one_keys_flood_within_its_cap() -> None:
    """Before: the effects stored every one of a key's disputes (20,000 took 28.4 MB)."""

    async def scenario() -> None:
        sync = NodeState.in_memory(lambda: T0)
        tasks: set[asyncio.Task[Any]] = set()
        effects = NodeEffects(
            cast(StatePort, InlineState(sync)),
            cast(VerifyPipeline, None),
            EventBus(),
            NodeMetrics(),
            lambda coro: tasks.add(asyncio.ensure_future(coro)),  # type: ignore[func-returns-value]
            lambda did: False,
            lambda: None,
        )
        for i in range(300):
            effects.accepted(Accept("p", dispute(MALLORY, f"b{i}")))
        await effects.flush()
        assert len(signers(sync)) == EvidenceCaps().per_signer
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())


def test_the_settings_load_from_the_config_and_are_checked() -> None:
    from node.config import ConfigError, load_config

    cfg = load_config(environ={"ODF_NODE_STORAGE_EVIDENCE_PER_SIGNER": "7"})
    assert cfg.storage.evidence_caps() == EvidenceCaps(per_signer=7)
    assert (cfg.p2p.signer_rate_burst, cfg.p2p.signer_rate_per_s) == (
        CoreConfig().signer_rate_burst,
        CoreConfig().signer_rate_per_s,
    )
    with pytest.raises(ConfigError, match="evidence_total"):
        load_config(environ={}, overrides={"storage": {"evidence_total": 0}})
    with pytest.raises(ConfigError, match="signer_rate_per_s"):
        load_config(environ={}, overrides={"p2p": {"signer_rate_per_s": 0.0}})


def test_keep_trusted_protects_a_newly_trusted_keys_evidence_from_other_datasets_floods() -> None:
    """A key trusted since its dispute of one dataset was stored, and a flood of another
    dataset past the total cap: without the sweep (start-up, trust change) it was evicted."""

    async def scenario(sweep: bool) -> bool:
        sync = NodeState.in_memory(lambda: T0)
        tasks: set[asyncio.Task[Any]] = set()
        trust = _Trust(())
        effects = NodeEffects(
            cast(StatePort, InlineState(sync)),
            cast(VerifyPipeline, None),
            EventBus(),
            NodeMetrics(),
            lambda coro: tasks.add(asyncio.ensure_future(coro)),  # type: ignore[func-returns-value]
            lambda did: False,
            lambda: None,
            cast(TrustDriver, trust),
            caps=EvidenceCaps(per_signer=100, per_dataset=100, total=5),
        )
        effects.accepted(Accept("p", dispute(TRUSTED, "forged")))  # a stranger's then
        await effects.flush()
        trust.trusted = (TRUSTED.dataset_id(),)  # the operator trusts it now
        if sweep:
            await effects.keep_trusted([DID])
        for _ in range(10):
            effects.accepted(Accept("p", dispute(fresh_key(), dataset=OTHER)))
        await effects.flush()
        for t in tasks:
            t.cancel()
        return TRUSTED.dataset_id().as_did_key() in signers(sync)

    assert asyncio.run(scenario(sweep=True))
    assert not asyncio.run(scenario(sweep=False))
