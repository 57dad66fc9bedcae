"""Strangers' observations of sources cost bounded space (issue 39, "bounded storage of
strangers' messages"): before, ``add_observation`` stored every peer's signed observation, so a
flood from fresh keys grew ``state.db`` without limit. They are now held within the evidence
caps (``[storage] evidence_*``) per signer, per dataset and in total; the node's own, a trusted
attester's and those a split view names are never evicted. Injected clocks, no sleeps."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from pathlib import Path
from typing import Any, cast

from coordinator.identity import DatasetId, PrivateKey, generate_private_key
from coordinator.multiformats import Multihash
from node.adapters.state import InlineState
from node.app.datasets import CommitLocks
from node.app.effects import NodeEffects
from node.app.events import EventBus
from node.app.follow import FollowSettings, SourceFollower
from node.app.metrics import NodeMetrics
from node.app.ports import StatePort
from node.app.rows import EvidenceCaps
from node.app.verify import VerifyPipeline
from node.state.migrations import migrate
from node.state.store import NodeState
from p2p.core import NS_PER_S, Accept
from p2p.wire import FetchLocations, Observation, SignedMessage, sign_message

T0 = 1_800_000_000 * NS_PER_S
OWNER = generate_private_key(b"\x41" * 32)
DID = OWNER.dataset_id()
OTHER = generate_private_key(b"\x42" * 32).dataset_id()
MALLORY = generate_private_key(b"\x43" * 32)
TRUSTED = generate_private_key(b"\x44" * 32)
ME = generate_private_key(b"\x45" * 32)
SOURCE = "https://example.org/cities"
_SEQ = itertools.count(1)
_SEEDS = itertools.count(5_000)


def fresh_key() -> PrivateKey:
    return generate_private_key(next(_SEEDS).to_bytes(32, "big"))


def observation(key: PrivateKey, dataset: DatasetId = DID) -> SignedMessage:
    n = next(_SEQ)
    return sign_message(
        Observation(
            node=key.dataset_id(),
            dataset=dataset,
            source=SOURCE,
            head=Multihash.sha3_256(f"head-{n}".encode()),
            sequence=n,
            locations=FetchLocations(),
            issued_at_ns=T0 + n,
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
    o = sm.message
    assert isinstance(o, Observation)
    return st.add_observation(
        o.dataset.as_did_str(),
        o.source,
        o.head.to_multibase(),
        o.sequence,
        o.node.as_did_key(),
        sm.envelope,
        own,
        o.issued_at_ns,
        trusted=trusted,
        caps=caps,
    )


def signers(st: NodeState) -> list[str]:
    return [r[0] for r in st.conn.execute("SELECT signer FROM observations ORDER BY id")]


def test_one_key_is_held_to_its_cap_and_fresh_keys_to_the_datasets_and_total() -> None:
    """Before: every observation was stored (no caps)."""
    st = NodeState.in_memory(lambda: T0)
    caps = EvidenceCaps(per_signer=5, per_dataset=8, total=12)
    assert all(store(st, observation(MALLORY), caps) for _ in range(20))
    assert signers(st) == [MALLORY.dataset_id().as_did_key()] * 5
    assert st.evidence_count("observations", MALLORY.dataset_id().as_did_key()) == 5
    for _ in range(10):
        store(st, observation(fresh_key()), caps)
    assert len(signers(st)) == 8 == st.evidence_count("observations", DID.as_did_str())
    for _ in range(6):
        store(st, observation(fresh_key(), OTHER), caps)
    assert st.evidence_count("observations") == 12 == len(signers(st))
    assert st.evidence_count("observations", OTHER.as_did_str()) == 6


def test_own_trusted_and_split_view_observations_are_never_evicted() -> None:
    st = NodeState.in_memory(lambda: T0)
    caps = EvidenceCaps(per_signer=2, per_dataset=3, total=3)
    trusted = (TRUSTED.dataset_id().as_did_key(),)
    ours, theirs = observation(ME), observation(MALLORY)
    assert store(st, ours, caps, own=True)
    assert store(st, theirs, caps)
    # A split view between ours and a stranger's: both observations are its evidence.
    first, second = [r[0] for r in st.conn.execute("SELECT content_id FROM observations")]
    assert st.add_split_view(DID.as_did_str(), SOURCE, first, second, "neither descends")
    for _ in range(4):  # past the trusted key's own per-signer cap: kept all the same
        assert store(st, observation(TRUSTED), caps, trusted)
    for _ in range(50):
        store(st, observation(fresh_key()), caps, trusted)
    rows = signers(st)
    assert rows.count(TRUSTED.dataset_id().as_did_key()) == 4
    assert ME.dataset_id().as_did_key() in rows
    assert MALLORY.dataset_id().as_did_key() in rows  # named by the split view
    assert len(rows) == 1 + 1 + 4 + 3 and st.evidence_count("observations") == 3
    (split,) = st.split_views()
    assert {split.first.signer, split.second.signer} == {
        ME.dataset_id().as_did_key(),
        MALLORY.dataset_id().as_did_key(),
    }


def test_state_db_growth_under_a_flood_stays_within_the_caps(tmp_path: Path) -> None:
    """2,000 observations from fresh keys, caps of 250 in total: the file stops growing once
    the cap is reached (SQLite reuses the evicted rows' pages). Before: 2,000 rows stored."""
    with NodeState.open(tmp_path / "state.db", lambda: T0) as st:
        caps = EvidenceCaps(per_signer=4, per_dataset=250, total=250)
        flood = [observation(fresh_key()) for _ in range(2_000)]
        for sm in flood[:250]:
            store(st, sm, caps)
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        at_cap = (tmp_path / "state.db").stat().st_size
        for sm in flood[250:]:
            store(st, sm, caps)
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        after = (tmp_path / "state.db").stat().st_size
        assert len(signers(st)) == 250 == st.evidence_count("observations")
        print(f"state.db at the cap {at_cap} B, after 8x the cap {after} B")
    # 8x the cap's worth of messages: the file grew by at most a fifth over the cap's size.
    assert after <= at_cap * 1.2, (at_cap, after)


def test_the_migration_counts_stored_strangers_and_keeps_split_view_evidence(
    tmp_path: Path,
) -> None:
    conn = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    migrate(conn, target=12)
    for i, (signer, own) in enumerate([("did:key:a", 1), ("did:key:b", 0), ("did:key:c", 0)]):
        conn.execute(
            "INSERT INTO observations (content_id, did, source, head, sequence, signer,"
            " envelope, own, observed_ns, received_ns) VALUES (?, ?, ?, ?, 1, ?, x'00', ?, 1, 1)",
            (f"c{i}", DID.as_did_str(), SOURCE, f"h{i}", signer, own),
        )
    conn.execute(
        "INSERT INTO split_views (did, source, first, second, detail, detected_ns, fork)"
        " VALUES (?, ?, 'c0', 'c1', 'x', 1, 'h0 h1')",
        (DID.as_did_str(), SOURCE),
    )
    migrate(conn)
    kept = dict(conn.execute("SELECT signer, kept FROM observations").fetchall())
    assert kept == {"did:key:a": 1, "did:key:b": 1, "did:key:c": 0}  # c0 and c1 named
    counts = dict(conn.execute("SELECT scope, n FROM evidence_counts WHERE tbl = 'observations'"))
    assert counts == {"*": 1, DID.as_did_str(): 1, "did:key:c": 1}
    conn.close()


def test_gossiped_observations_are_stored_within_the_default_caps() -> None:
    """Through the effects and the source follower (what the daemon wires): one key's flood is
    held to the default per-signer cap. Before: all 300 stored."""

    async def scenario() -> None:
        sync = NodeState.in_memory(lambda: T0)
        state = cast(StatePort, InlineState(sync))
        tasks: set[asyncio.Task[None]] = set()

        def spawn(coro: Any) -> asyncio.Task[None]:
            task: asyncio.Task[None] = asyncio.ensure_future(coro)
            tasks.add(task)
            return task

        effects = NodeEffects(
            state,
            cast(VerifyPipeline, None),
            EventBus(),
            NodeMetrics(),
            spawn,
            lambda did: False,
            lambda: None,
        )
        effects.witness = SourceFollower(
            cast(Any, None),
            state,
            cast(Any, None),
            cast(Any, None),
            cast(Any, None),
            CommitLocks(),
            NodeMetrics(),
            EventBus(),
            lambda: T0,
            ME,
            cast(Any, None),
            settings=FollowSettings(),
            rng=lambda: 0.5,
        )
        for _ in range(300):
            effects.accepted(Accept("p", observation(MALLORY)))
        await effects.flush()
        assert len(signers(sync)) == EvidenceCaps().per_signer
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())


def test_keep_evidence_marks_a_newly_trusted_keys_observations_kept() -> None:
    """A key trusted after its observations were stored (start-up, a changed policy): they are
    marked kept before another dataset's flood can evict them."""
    st = NodeState.in_memory(lambda: T0)
    caps = EvidenceCaps(per_signer=10, per_dataset=10, total=3)
    store(st, observation(TRUSTED), caps)  # a stranger's then
    st.keep_evidence(DID.as_did_str(), [TRUSTED.dataset_id().as_did_key()])
    for _ in range(10):
        store(st, observation(fresh_key(), OTHER), caps)
    assert TRUSTED.dataset_id().as_did_key() in signers(st)
    assert st.evidence_count("observations") == 3
