"""NodeState API on real SQLite files: every table, idempotency, dedupe, the work queue."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.state import (
    InvalidStateValue,
    InvalidWorkTransition,
    NodeState,
    WorkItemNotFound,
    backoff_ns,
    content_id,
)

A = "did:odf:fed01" + "aa" * 32
B = "did:odf:fed01" + "bb" * 32
C = "did:odf:fed01" + "cc" * 32
H1 = "f1620" + "11" * 32
H2 = "f1620" + "22" * 32
SEC = 1_000_000_000


class FakeClock:
    """Injected clock: returns ``now`` (ns), moved only by the test."""

    def __init__(self, start: int = 1_700_000_000 * SEC) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> int:
        self.now += int(seconds * SEC)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(tmp_path: Path, clock: FakeClock) -> Iterator[NodeState]:
    s = NodeState.open(tmp_path / "node" / "state.db", clock)
    yield s
    s.close()


def test_connection_settings(state: NodeState) -> None:
    conn = state.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_connection_is_bound_to_its_thread(state: NodeState) -> None:
    """The documented contract: one connection, used only from the thread that opened it."""
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            state.subscriptions()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], sqlite3.ProgrammingError)


def test_second_connection_sees_committed_writes(tmp_path: Path, clock: FakeClock) -> None:
    """A second process/connection (e.g. a CLI status command) on the daemon's file."""
    path = tmp_path / "state.db"
    with NodeState.open(path, clock) as daemon:
        daemon.enqueue("fetch", A, H1, {})
        # Opening an up-to-date DB takes no write lock, even while another writer holds one.
        daemon.conn.execute("BEGIN IMMEDIATE")
        try:
            with NodeState.open(path, clock) as reader:
                assert reader.pending_count() == 1
        finally:
            daemon.conn.execute("ROLLBACK")


def test_data_survives_reopen(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "state.db"
    with NodeState.open(path, clock) as s:
        s.subscribe(A, "a", None)
        s.enqueue("fetch", A, H1, {"x": 1})
    with NodeState.open(path, clock) as s:
        assert [sub.did for sub in s.subscriptions()] == [A]
        assert s.pending_count() == 1


# -- subscriptions ---------------------------------------------------------------------------


def test_subscribe_is_idempotent_and_merges_hints(state: NodeState, clock: FakeClock) -> None:
    first = state.subscribe(A, "alias.a", None)
    assert (first.alias, first.source_hint, first.created_ns) == ("alias.a", None, clock.now)
    clock.advance(1)
    same = state.subscribe(A, None, None)
    assert same == first  # nothing changed, not even updated_ns
    clock.advance(1)
    merged = state.subscribe(A, None, "ipfs://bafy")
    assert (merged.alias, merged.source_hint) == ("alias.a", "ipfs://bafy")
    assert merged.created_ns == first.created_ns and merged.updated_ns == clock.now
    state.subscribe(B, None, None)
    assert [s.did for s in state.subscriptions()] == [A, B]
    assert state.subscription(C) is None
    assert state.unsubscribe(A) is True
    assert state.unsubscribe(A) is False
    assert [s.did for s in state.subscriptions()] == [B]


def test_subscription_count(state: NodeState) -> None:
    assert state.subscription_count() == 0
    state.subscribe(A, "a", None)
    state.subscribe(A, "a", None)
    state.subscribe(B, None, None)
    assert state.subscription_count() == 2 == len(state.subscriptions())


def test_malformed_did_is_refused(state: NodeState) -> None:
    for bad in ["", "did:odf:", "did:key:z6Mk", "fed01aa"]:
        with pytest.raises(InvalidStateValue):
            state.subscribe(bad, None, None)
    assert state.subscriptions() == []


# -- accepted heads --------------------------------------------------------------------------


def test_accepted_head_only_moves_forward(state: NodeState, clock: FakeClock) -> None:
    assert state.accepted_head(A) is None
    assert state.record_accepted_head(A, 0, 5, H1, "peerX", b"env1") is True
    assert state.record_accepted_head(A, 0, 4, H2, "peerY", b"env2") is False  # older
    assert state.record_accepted_head(A, 0, 5, H2, "peerY", b"env2") is False  # same position
    head = state.accepted_head(A)
    assert head is not None
    assert (head.sequence, head.head, head.source_peer, head.envelope) == (5, H1, "peerX", b"env1")
    clock.advance(3)
    assert state.record_accepted_head(A, 1, 0, H2, None, b"env3") is True  # new epoch wins
    head = state.accepted_head(A)
    assert head is not None
    assert (head.epoch, head.sequence, head.head, head.source_peer) == (1, 0, H2, None)
    assert head.accepted_ns == clock.now
    assert state.record_accepted_head(A, 0, 99, H1, None, b"env4") is False  # older epoch
    state.record_accepted_head(B, 0, 0, H1, None, b"b")
    assert [h.did for h in state.accepted_heads()] == [A, B]


def test_accepted_head_rejects_bad_positions(state: NodeState) -> None:
    with pytest.raises(InvalidStateValue):
        state.record_accepted_head(A, -1, 0, H1, None, b"")
    with pytest.raises(InvalidStateValue):
        state.record_accepted_head(A, 0, True, H1, None, b"")
    with pytest.raises(InvalidStateValue):
        state.record_accepted_head(A, 0, 0, "", None, b"")
    assert state.accepted_head(A) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), min_size=1, max_size=25))
def test_property_heads_only_move_forward(offers: list[tuple[int, int]]) -> None:
    with NodeState.in_memory(FakeClock()) as s:
        best: tuple[int, int] | None = None
        for n, (epoch, seq) in enumerate(offers):
            stored = s.record_accepted_head(A, epoch, seq, f"f1620{n:064x}", None, bytes([n]))
            assert stored == (best is None or (epoch, seq) > best)
            if stored:
                best = (epoch, seq)
            head = s.accepted_head(A)
            assert head is not None and (head.epoch, head.sequence) == best
        # The stored head is the first offer that reached the maximum position.
        final = s.accepted_head(A)
        assert final is not None
        assert final.envelope == bytes([offers.index(max(offers))])


# -- verifications ---------------------------------------------------------------------------


def test_verification_latest_record_wins(state: NodeState, clock: FakeClock) -> None:
    assert state.verification(A, H1) is None
    state.record_verification(A, H1, "error", "engine crashed", 0.5)
    clock.advance(10)
    v = state.record_verification(A, H1, "verified", "", 12.25)
    assert state.verification(A, H1) == v
    assert (v.outcome, v.engine_seconds, v.recorded_ns) == ("verified", 12.25, clock.now)
    state.record_verification(A, H2, "nondeterministic", "rand()", 1.0)
    got = state.verification(A, H2)
    assert got is not None and got.outcome == "nondeterministic"
    with pytest.raises(InvalidStateValue):
        state.record_verification(A, H1, "fraud", "", 0.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidStateValue):
        state.record_verification(A, H1, "failed", "", -1.0)


# -- attestations, disputes, proofs ----------------------------------------------------------


def test_attestations_dedupe_on_envelope_and_filter(state: NodeState) -> None:
    assert state.add_attestation(A, H1, "valid", "did:odf:signer1", b"att-1", own=True)
    assert not state.add_attestation(A, H1, "valid", "did:odf:signer1", b"att-1", own=True)
    assert state.add_attestation(A, H2, "invalid", "did:odf:signer2", b"att-2", own=False)
    assert state.add_attestation(B, H1, "valid", "did:odf:signer2", b"att-3", own=False)
    all_ = state.attestations()
    assert [a.envelope for a in all_] == [b"att-3", b"att-2", b"att-1"]  # newest first
    first = all_[-1]
    assert first.content_id == content_id(b"att-1") and first.own is True
    assert first.content_id.startswith("f1620") and len(first.content_id) == 5 + 64
    assert [a.envelope for a in state.attestations(did=A)] == [b"att-2", b"att-1"]
    assert [a.envelope for a in state.attestations(did=A, head=H1)] == [b"att-1"]
    assert [a.envelope for a in state.attestations(head=H1)] == [b"att-3", b"att-1"]
    assert len(state.attestations(limit=1)) == 1


def test_disputes_and_equivocation_proofs_dedupe(state: NodeState) -> None:
    assert state.add_dispute(A, H1, "replay-mismatch", "did:odf:s", b"d1", True, "offset 3")
    assert not state.add_dispute(A, H1, "replay-mismatch", "did:odf:s", b"d1", True, "offset 3")
    assert state.add_dispute(B, H2, "bad-hash", "did:odf:t", b"d2", False, "")
    [d] = state.disputes(did=A)
    assert (d.kind, d.detail, d.own, d.envelope) == ("replay-mismatch", "offset 3", True, b"d1")
    assert [x.envelope for x in state.disputes()] == [b"d2", b"d1"]
    assert state.add_equivocation_proof(A, b"proof")
    assert not state.add_equivocation_proof(A, b"proof")
    assert state.add_equivocation_proof(B, b"proof-b")
    assert [p.envelope for p in state.equivocation_proofs()] == [b"proof", b"proof-b"]
    assert [p.did for p in state.equivocation_proofs(did=B)] == [B]


# -- peers -----------------------------------------------------------------------------------


def test_peers_upsert_keeps_unspecified_fields(state: NodeState, clock: FakeClock) -> None:
    p = state.upsert_peer("12D3KooA", ["/ip4/127.0.0.1/tcp/4001"], None, True)
    assert (p.addrs, p.score, p.connected) == (("/ip4/127.0.0.1/tcp/4001",), 0.0, True)
    first_seen = clock.now
    clock.advance(5)
    p = state.upsert_peer("12D3KooA", None, -3.5, False)
    assert (p.addrs, p.score, p.connected) == (("/ip4/127.0.0.1/tcp/4001",), -3.5, False)
    assert (p.first_seen_ns, p.last_seen_ns) == (first_seen, clock.now)
    clock.advance(1)
    state.upsert_peer("12D3KooB", [], 1.0, True)
    assert [x.peer_id for x in state.peers()] == ["12D3KooB", "12D3KooA"]  # most recent first
    with pytest.raises(InvalidStateValue):
        state.upsert_peer("", None, None, False)


# -- events ----------------------------------------------------------------------------------


def test_event_log_pages_filters_and_prunes(state: NodeState, clock: FakeClock) -> None:
    ids = [state.log_event("head" if i % 2 else "peer", A, {"i": i}) for i in range(10)]
    assert ids == sorted(ids) and len(set(ids)) == 10
    page = state.events(limit=4)
    assert [e.data["i"] for e in page] == [0, 1, 2, 3]
    assert [e.data["i"] for e in state.events(after_id=page[-1].id, limit=2)] == [4, 5]
    assert [e.data["i"] for e in state.events(kind="head")] == [1, 3, 5, 7, 9]
    assert state.events()[0].ts_ns == clock.now and state.events()[0].did == A
    assert state.prune_events(keep_last=3) == 7
    assert [e.data["i"] for e in state.events()] == [7, 8, 9]
    assert state.prune_events(keep_last=3) == 0
    # Ids are never reused after pruning, so a reader's after_id cursor stays valid.
    new = state.log_event("boot", None, {})
    assert new > ids[-1]
    assert state.prune_events(keep_last=0) == 4
    assert state.events() == []
    assert state.log_event("again", None, {}) > new
    with pytest.raises(InvalidStateValue):
        state.log_event("x", None, {"bad": object()})
    with pytest.raises(InvalidStateValue):
        state.log_event("x", None, {"nan": float("nan")})


# -- work queue ------------------------------------------------------------------------------


def test_enqueue_dedupes_live_items_only(state: NodeState, clock: FakeClock) -> None:
    item = state.enqueue("fetch", A, H1, {"src": "peer1"})
    assert (item.state, item.attempts, item.not_before_ns) == ("pending", 0, clock.now)
    dup = state.enqueue("fetch", A, H1, {"src": "peer2"})
    assert dup == item  # unchanged: the first payload is kept
    assert state.enqueue("fetch", A, H2, {}).id != item.id  # other head
    assert state.enqueue("verify", A, H1, {}).id != item.id  # other kind
    none_head = state.enqueue("sync", A, None, {})
    assert state.enqueue("sync", A, None, {}).id == none_head.id  # NULL head dedupes too
    forced = state.enqueue("fetch", A, H1, {}, dedupe=False)
    assert forced.id != item.id
    assert state.pending_count() == 5 and state.pending_count("fetch") == 3
    assert state.pending_counts() == {"fetch": 3, "verify": 1, "sync": 1}
    assert state.status_counts() == (0, {"fetch": 3, "verify": 1, "sync": 1})

    claimed = state.claim(clock.now, kinds=["fetch"])
    assert claimed is not None and claimed.id == item.id
    assert state.enqueue("fetch", A, H1, {}).id == item.id  # claimed is still live
    state.complete(item.id)
    again = state.enqueue("fetch", A, H1, {})  # done: a new item may be queued
    assert again.id not in {item.id, forced.id}


def test_claim_serialises_per_did(state: NodeState, clock: FakeClock) -> None:
    a1 = state.enqueue("fetch", A, H1, {})
    a2 = state.enqueue("verify", A, H1, {})
    b1 = state.enqueue("fetch", B, H1, {})
    now = clock.now
    first = state.claim(now)
    assert first is not None and first.id == a1.id
    assert (first.state, first.attempts, first.claimed_ns) == ("claimed", 1, now)
    second = state.claim(now)  # A is busy: B's item although a2 is older
    assert second is not None and second.id == b1.id
    assert state.claim(now) is None
    state.complete(a1.id)
    third = state.claim(now)
    assert third is not None and third.id == a2.id


def test_claim_filters_kinds_and_excluded_dids(state: NodeState, clock: FakeClock) -> None:
    state.enqueue("fetch", A, H1, {})
    b = state.enqueue("verify", B, H1, {})
    c = state.enqueue("fetch", C, H1, {})
    assert state.claim(clock.now, kinds=[]) is None
    got = state.claim(clock.now, kinds={"verify"})
    assert got is not None and got.id == b.id
    got = state.claim(clock.now, kinds=["fetch"], exclude_dids={A})
    assert got is not None and got.id == c.id


def test_retry_honours_not_before(state: NodeState, clock: FakeClock) -> None:
    item = state.enqueue("fetch", A, H1, {})
    claimed = state.claim(clock.now)
    assert claimed is not None
    retry_at = clock.now + 30 * SEC
    failed = state.fail(item.id, "gateway timeout", retry_at)
    assert (failed.state, failed.last_error, failed.not_before_ns) == (
        "pending",
        "gateway timeout",
        retry_at,
    )
    assert state.claim(retry_at - 1) is None
    assert state.pending_count() == 1
    again = state.claim(retry_at)
    assert again is not None and again.id == item.id and again.attempts == 2
    gave_up = state.fail(item.id, "still down", None)
    assert gave_up.state == "failed" and gave_up.attempts == 2
    assert state.claim(retry_at + 10**12) is None
    assert state.pending_count() == 0
    assert [w.id for w in state.work(state="failed")] == [item.id]
    # A failed item does not block a fresh enqueue of the same work.
    assert state.enqueue("fetch", A, H1, {}).id != item.id


def test_future_enqueue_waits(state: NodeState, clock: FakeClock) -> None:
    later = clock.now + 5 * SEC
    item = state.enqueue("fetch", A, H1, {}, not_before_ns=later)
    assert state.claim(clock.now) is None
    got = state.claim(later)
    assert got is not None and got.id == item.id


def test_transitions_require_a_claim(state: NodeState, clock: FakeClock) -> None:
    item = state.enqueue("fetch", A, H1, {})
    with pytest.raises(InvalidWorkTransition) as info:
        state.complete(item.id)
    assert info.value.state == "pending"
    with pytest.raises(WorkItemNotFound):
        state.fail(9999, "x", None)
    state.claim(clock.now)
    done = state.complete(item.id)
    assert done.state == "done" and done.claimed_ns is None
    with pytest.raises(InvalidWorkTransition):
        state.complete(item.id)
    with pytest.raises(InvalidWorkTransition):
        state.fail(item.id, "late", None)


def test_release_claims_returns_items_to_pending(state: NodeState, clock: FakeClock) -> None:
    a = state.enqueue("fetch", A, H1, {"k": "v"})
    b = state.enqueue("fetch", B, H1, {})
    state.claim(clock.now)
    state.claim(clock.now)
    assert state.pending_count() == 0
    assert state.release_claims() == 2
    assert state.release_claims() == 0
    assert {w.id for w in state.work(state="pending")} == {a.id, b.id}
    again = state.claim(clock.now)
    assert again is not None and again.id == a.id and again.attempts == 2
    assert again.payload == {"k": "v"}


def test_work_listing_and_prune(state: NodeState, clock: FakeClock) -> None:
    a = state.enqueue("fetch", A, H1, {})
    b = state.enqueue("fetch", B, H1, {})
    state.claim(clock.now)
    state.complete(a.id)
    assert [w.id for w in state.work(did=A)] == [a.id]
    assert [w.id for w in state.work(state="pending", did=B)] == [b.id]
    assert state.work_item(a.id) is not None and state.work_item(12345) is None
    with pytest.raises(InvalidStateValue):
        state.work(state="running")  # type: ignore[arg-type]
    clock.advance(60)
    assert state.prune_work(clock.now) == 1
    assert [w.id for w in state.work()] == [b.id]
    with pytest.raises(InvalidStateValue):
        state.enqueue("fetch", A, H1, {"x": {1, 2}})


def test_failed_transaction_rolls_back(state: NodeState) -> None:
    """A write that fails mid-transaction leaves nothing behind and the connection usable."""
    state.enqueue("fetch", A, H1, {})
    with pytest.raises(sqlite3.IntegrityError), state._tx() as c:
        c.execute("INSERT INTO events (ts_ns, kind, did, data) VALUES (1, 'x', NULL, '{}')")
        c.execute("INSERT INTO work (kind) VALUES ('broken')")  # NOT NULL violations
    assert state.events() == []
    assert not state.conn.in_transaction
    assert state.pending_count() == 1


# -- backoff ---------------------------------------------------------------------------------


def test_backoff_full_jitter_bounds() -> None:
    assert backoff_ns(1, rand=lambda: 0.0) == 0
    assert backoff_ns(1, rand=lambda: 1.0) == 2 * SEC
    assert backoff_ns(3, rand=lambda: 0.5) == 4 * SEC  # ceiling 8 s
    assert backoff_ns(30, rand=lambda: 1.0) == 600 * SEC  # capped
    assert backoff_ns(10**6, base_s=1, cap_s=5, rand=lambda: 1.0) == 5 * SEC
    rng = random.Random(7)
    draws = [backoff_ns(4, rand=rng.random) for _ in range(200)]
    assert all(0 <= d <= 16 * SEC for d in draws)
    assert len(set(draws)) > 150  # jitter actually spreads retries
    with pytest.raises(ValueError):
        backoff_ns(0, rand=rng.random)
    with pytest.raises(ValueError):
        backoff_ns(1, rand=lambda: 1.5)


def test_daemon_prunes_finished_work_after_the_configured_days(
    state: NodeState, clock: FakeClock
) -> None:
    from node.adapters.state import InlineState
    from node.app.work import prune_finished_work

    def prune(keep_days: float) -> int:
        return asyncio.run(prune_finished_work(InlineState(state), clock.now, keep_days))

    old = state.enqueue("verify", A, H1, {})
    state.claim(clock.now)
    state.complete(old.id)
    clock.advance(3 * 86_400)
    recent = state.enqueue("verify", B, H1, {})
    state.claim(clock.now)
    state.complete(recent.id)
    pending = state.enqueue("verify", A, H1, {"later": True})
    clock.advance(86_400)
    assert prune(0) == 0  # 0 keeps everything
    assert prune(2) == 1  # finished 4 days ago
    assert {w.id for w in state.work()} == {recent.id, pending.id}
    clock.advance(30 * 86_400)
    assert prune(2) == 1  # never the pending item
    assert [w.id for w in state.work()] == [pending.id]
