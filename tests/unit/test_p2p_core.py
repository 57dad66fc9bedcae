"""Rules of the sans-IO gossip core, each with a hand-made bad message (injected clock and RNG)."""

from __future__ import annotations

import itertools
import random

import pytest

from coordinator.identity import DatasetId, PrivateKey, generate_private_key
from coordinator.multiformats import Multihash
from p2p.core import (
    NS_PER_S,
    AbandonFetch,
    Accept,
    AntiEntropyReceived,
    CoreConfig,
    Decision,
    DisconnectPeer,
    EmitEquivocationProof,
    FetchCompleted,
    FetchFailed,
    Forward,
    HeadAccepted,
    Ignore,
    MessageReceived,
    PeerConnected,
    PeerDisconnected,
    Penalise,
    ProtocolCore,
    PublishAttestation,
    PublishDispute,
    RejectHead,
    RequestAntiEntropy,
    RequestFetch,
    SeenCache,
    Tick,
    VerificationCompleted,
)
from p2p.wire import (
    Attestation,
    Checks,
    EquivocationProof,
    FetchLocations,
    HeadAnnouncement,
    SignedMessage,
    Verdict,
    sign_message,
    verify_equivocation_proof,
)

T0 = 1_800_000_000 * NS_PER_S
OWNER = generate_private_key(b"\x01" * 32)
NODE = generate_private_key(b"\x02" * 32)
MALLORY = generate_private_key(b"\x03" * 32)
DID = OWNER.dataset_id()


def h(label: str) -> Multihash:
    return Multihash.sha3_256(label.encode())


_NONCE = itertools.count(1)


def ann(
    seq: int,
    head: str | None = None,
    *,
    epoch: int = 0,
    key: PrivateKey = OWNER,
    dataset: DatasetId = DID,
    issued: int = T0,
) -> SignedMessage:
    msg = HeadAnnouncement(
        dataset=dataset,
        head=h(head or f"head-{seq}"),
        sequence=seq,
        prev_head=None,
        epoch=epoch,
        locations=FetchLocations(ipfs_cids=("bafyexample",)),
        issued_at_ns=issued,
        nonce=next(_NONCE).to_bytes(16, "big"),
    )
    return sign_message(msg, key)


def core(**cfg: int | float) -> ProtocolCore:
    return ProtocolCore(CoreConfig(**cfg), random.Random(7), [DID])  # type: ignore[arg-type]


def recv(
    c: ProtocolCore, sm: SignedMessage | bytes, peer: str = "p1", t: int = T0
) -> list[Decision]:
    data = sm if isinstance(sm, bytes) else sm.envelope
    return c.handle(MessageReceived(peer, data, t))


def of(ds: list[Decision], cls: type) -> list[Decision]:
    return [d for d in ds if isinstance(d, cls)]


def reasons(ds: list[Decision]) -> list[str]:
    return [d.reason for d in ds if isinstance(d, Ignore)]


def accept_head(c: ProtocolCore, sm: SignedMessage, t: int = T0) -> None:
    out = recv(c, sm, t=t)
    assert of(out, RequestFetch), out
    msg = sm.message
    assert isinstance(msg, HeadAnnouncement)
    done = c.handle(FetchCompleted(DID, msg.head, True, t))
    assert of(done, HeadAccepted)


# ---- happy path


def test_valid_announcement_is_forwarded_fetched_then_accepted() -> None:
    c = core()
    sm = ann(5)
    out = recv(c, sm)
    assert [type(d) for d in out] == [Accept, Forward, RequestFetch]
    fetch = of(out, RequestFetch)[0]
    assert isinstance(fetch, RequestFetch)
    assert (fetch.dataset, fetch.head, fetch.sequence, fetch.base) == (DID, h("head-5"), 5, None)
    assert c.accepted(DID) is None  # not accepted before the fetch
    done = c.handle(FetchCompleted(DID, h("head-5"), True, T0 + 1))
    assert done == [HeadAccepted(DID, h("head-5"), 5, 0, sm)]
    assert c.accepted(DID) == sm
    assert c.peer_score("p1", T0) > 0


def test_next_head_fetch_is_based_on_last_accepted_head() -> None:
    c = core()
    accept_head(c, ann(5))
    fetch = of(recv(c, ann(6)), RequestFetch)[0]
    assert isinstance(fetch, RequestFetch)
    assert fetch.base == h("head-5")


# ---- signature / identity rules


def test_wrong_key_is_rejected_and_penalised() -> None:
    c = core()
    out = recv(c, ann(5, key=MALLORY))  # claims DID of OWNER, signed by MALLORY
    assert of(out, Penalise) and reasons(out) == ["bad-signature"]
    assert not of(out, Forward) and not of(out, RequestFetch)
    assert c.peer_score("p1", T0) < 0


def test_did_mismatch_signer_of_other_dataset_is_rejected() -> None:
    c = ProtocolCore(CoreConfig(), random.Random(1), [DID, MALLORY.dataset_id()])
    # Signed by OWNER but announcing MALLORY's dataset.
    out = recv(c, ann(1, dataset=MALLORY.dataset_id(), key=OWNER))
    assert reasons(out) == ["bad-signature"]


def test_resent_bad_message_is_penalised_again_without_reverification() -> None:
    c = core()
    bad = ann(5, key=MALLORY)
    recv(c, bad)
    out = recv(c, bad, t=T0 + 1)
    assert reasons(out) == ["bad-signature"] and of(out, Penalise)


# ---- sequence / epoch rules


def test_stale_sequence_is_ignored() -> None:
    c = core()
    accept_head(c, ann(5))
    out = recv(c, ann(4))
    assert reasons(out) == ["stale-sequence"]
    assert not of(out, Forward) and not of(out, RequestFetch) and not of(out, Penalise)


def test_same_head_reannounced_is_already_accepted() -> None:
    c = core()
    accept_head(c, ann(5))
    assert reasons(recv(c, ann(5))) == ["already-accepted"]


def test_stale_epoch_is_ignored_and_new_epoch_needs_no_ancestry() -> None:
    c = core()
    accept_head(c, ann(5, epoch=1))
    assert reasons(recv(c, ann(9, epoch=0))) == ["stale-epoch"]
    # Owner-signed rewrite: epoch 2 with a *lower* sequence is accepted, fetched without base.
    fetch = of(recv(c, ann(2, "rewritten", epoch=2)), RequestFetch)[0]
    assert isinstance(fetch, RequestFetch)
    assert fetch.base is None and fetch.epoch == 2
    assert of(c.handle(FetchCompleted(DID, h("rewritten"), True, T0)), HeadAccepted)


def test_head_that_does_not_descend_is_rejected_and_not_refetched() -> None:
    c = core()
    accept_head(c, ann(5))
    recv(c, ann(6, "bad-6"))
    out = c.handle(FetchCompleted(DID, h("bad-6"), False, T0))
    assert [type(d) for d in out] == [RejectHead]
    assert c.accepted(DID) is not None
    assert c.accepted(DID).message.sequence == 5  # type: ignore[union-attr]
    again = recv(c, ann(6, "bad-6"), peer="p2")
    assert reasons(again) == ["rejected-head"] and not of(again, RequestFetch)


def test_unsubscribed_dataset_is_ignored() -> None:
    c = ProtocolCore(CoreConfig(), random.Random(1))
    assert reasons(recv(c, ann(1))) == ["not-subscribed"]


# ---- replay / duplicates


def test_exact_replay_is_a_duplicate() -> None:
    c = core()
    sm = ann(5)
    recv(c, sm)
    out = recv(c, sm, peer="p2", t=T0 + NS_PER_S)
    assert reasons(out) == ["duplicate"] and not of(out, Penalise)


def test_old_replay_beyond_seen_window_is_expired() -> None:
    c = core()
    late = T0 + 11 * 60 * NS_PER_S  # beyond max age (5 min) and seen TTL (10 min)
    out = recv(c, ann(5), t=late)
    assert reasons(out) == ["expired"]


def test_duplicates_after_reconnect_do_not_retrigger_fetch() -> None:
    c = core()
    sm = ann(5)
    c.handle(PeerConnected("p1", T0))
    recv(c, sm)
    c.handle(FetchCompleted(DID, h("head-5"), True, T0))
    c.handle(PeerDisconnected("p1", T0 + 1))
    out = c.handle(PeerConnected("p1", T0 + 2))
    assert out == [RequestAntiEntropy("p1", (DID,))]
    # gossip re-delivery of the same bytes, plus an anti-entropy reply carrying the same head
    again = recv(c, sm, t=T0 + 3)
    ae = c.handle(AntiEntropyReceived("p1", (sm.envelope, ann(5).envelope), T0 + 4))
    assert not of(again + ae, RequestFetch) and not of(again + ae, Penalise)
    assert reasons(again) == ["duplicate"]
    assert reasons(ae) == ["duplicate", "already-accepted"]


def test_accept_says_whether_anti_entropy_or_gossip_brought_the_message() -> None:
    c = core()
    gossiped = of(recv(c, ann(5)), Accept)
    repaired = of(c.handle(AntiEntropyReceived("p2", (ann(6).envelope,), T0 + 1)), Accept)
    assert [a.via_anti_entropy for a in gossiped] == [False]
    assert [a.via_anti_entropy for a in repaired] == [True]


def test_reannouncement_of_pending_head_does_not_duplicate_fetch() -> None:
    c = core()
    recv(c, ann(5))
    out = recv(c, ann(5), peer="p2")
    assert reasons(out) == ["already-pending"] and not of(out, RequestFetch)


def test_failed_fetch_is_retried_on_reannouncement() -> None:
    c = core()
    recv(c, ann(5))
    assert c.handle(FetchFailed(DID, h("head-5"), "unreachable", T0)) == []
    assert of(recv(c, ann(5), peer="p2"), RequestFetch)


def fetches(ds: list[Decision]) -> list[Multihash]:
    return [d.head for d in ds if isinstance(d, RequestFetch)]


def test_failed_fetch_is_retried_with_exponential_backoff() -> None:
    c = core(fetch_retry_base_ns=2 * NS_PER_S, fetch_retry_max_ns=8 * NS_PER_S)
    recv(c, ann(5))
    t = T0
    gaps = []
    for _ in range(5):
        c.handle(FetchFailed(DID, h("head-5"), "unreachable", t))
        start = t
        while True:
            t += NS_PER_S // 10
            if fetches(c.handle(Tick(t))) == [h("head-5")]:
                break
        gaps.append((t - start) / NS_PER_S)
    # base 2 s doubling, capped at 8 s, each with jitter in [0.5, 1.5)
    for gap, nominal in zip(gaps, [2, 4, 8, 8, 8], strict=True):
        assert 0.5 * nominal <= gap <= 1.5 * nominal + 0.1, gaps
    done = c.handle(FetchCompleted(DID, h("head-5"), True, t))
    assert of(done, HeadAccepted)
    assert not fetches(c.handle(Tick(t + 3600 * NS_PER_S)))


def test_abandoned_fetch_is_retried_and_its_late_result_accepted() -> None:
    c = core(fetch_timeout_ns=10 * NS_PER_S)
    recv(c, ann(5))
    out = c.handle(Tick(T0 + 11 * NS_PER_S))
    assert of(out, AbandonFetch) and not fetches(out)
    retried = []
    for s in range(12, 16):  # base 2 s with jitter: due within 3 s of the abandon
        retried += fetches(c.handle(Tick(T0 + s * NS_PER_S)))
    assert retried == [h("head-5")]
    assert of(c.handle(FetchCompleted(DID, h("head-5"), True, T0 + 16 * NS_PER_S)), HeadAccepted)


def test_newer_announcement_replaces_a_pending_retry() -> None:
    c = core()
    recv(c, ann(5))
    c.handle(FetchFailed(DID, h("head-5"), "unreachable", T0))
    assert fetches(recv(c, ann(6), t=T0 + 1)) == [h("head-6")]
    c.handle(FetchCompleted(DID, h("head-6"), True, T0 + 2))
    later = [f for s in range(1, 200) for f in fetches(c.handle(Tick(T0 + s * NS_PER_S)))]
    assert later == []  # head-5 is older than the accepted head: never fetched again


def test_anti_entropy_repeat_restarts_an_idle_stalled_dataset() -> None:
    c = core(fetch_retry_base_ns=60 * NS_PER_S, fetch_retry_max_ns=60 * NS_PER_S)
    sm = ann(5)
    recv(c, sm)
    c.handle(FetchFailed(DID, h("head-5"), "unreachable", T0))
    # The same bytes come back in an anti-entropy reply long before the backoff ends.
    out = c.handle(AntiEntropyReceived("p2", (sm.envelope,), T0 + NS_PER_S))
    assert fetches(out) == [h("head-5")]
    # While that fetch runs, another repeat is only a duplicate.
    again = c.handle(AntiEntropyReceived("p2", (sm.envelope,), T0 + 2 * NS_PER_S))
    assert reasons(again) == ["duplicate"] and not fetches(again)
    c.handle(FetchCompleted(DID, h("head-5"), True, T0 + 3 * NS_PER_S))
    after = c.handle(AntiEntropyReceived("p2", (sm.envelope,), T0 + 4 * NS_PER_S))
    assert reasons(after) == ["duplicate"] and not fetches(after)


def test_anti_entropy_catches_up_a_dataset_followed_again() -> None:
    """An announcement seen while the node did not follow the dataset (ignored then) is judged
    when an anti-entropy reply repeats it after the node follows the dataset again."""
    c = core()
    accept_head(c, ann(4))
    c.unsubscribe(DID)
    sm = ann(5)
    assert reasons(recv(c, sm)) == ["not-subscribed"]
    c.subscribe(DID)
    assert reasons(recv(c, sm, peer="p2")) == ["duplicate"]  # gossip repeats stay duplicates
    out = c.handle(AntiEntropyReceived("p2", (sm.envelope,), T0 + NS_PER_S))
    assert fetches(out) == [h("head-5")]
    c.handle(FetchCompleted(DID, h("head-5"), True, T0 + 2 * NS_PER_S))
    assert c.accepted(DID) == sm
    after = c.handle(AntiEntropyReceived("p2", (sm.envelope,), T0 + 3 * NS_PER_S))
    assert reasons(after) == ["duplicate"] and not fetches(after)


def test_gossip_repeat_does_not_restart_a_stalled_dataset() -> None:
    c = core(fetch_retry_base_ns=60 * NS_PER_S, fetch_retry_max_ns=60 * NS_PER_S)
    sm = ann(5)
    recv(c, sm)
    c.handle(FetchFailed(DID, h("head-5"), "unreachable", T0))
    assert reasons(recv(c, sm, peer="p2", t=T0 + NS_PER_S)) == ["duplicate"]


# ---- forks


def test_fork_in_same_epoch_emits_checkable_proof() -> None:
    c = core()
    a, b = ann(5, "head-5"), ann(5, "head-5-evil")
    recv(c, a)
    out = recv(c, b, peer="p2")
    proofs = of(out, EmitEquivocationProof)
    assert len(proofs) == 1 and reasons(out) == ["equivocation"]
    proof = proofs[0].proof  # type: ignore[union-attr]
    assert isinstance(proof, EquivocationProof)
    assert verify_equivocation_proof(proof.envelope) == DID
    assert c.equivocation_proof(DID) == proof
    assert not of(out, Penalise)  # the forwarding peer is not to blame
    # a second copy of the fork does not emit the same proof again
    assert not of(recv(c, ann(5, "head-5-evil"), peer="p3"), EmitEquivocationProof)


def test_fork_against_accepted_head_is_detected() -> None:
    c = core()
    accept_head(c, ann(5))
    assert of(recv(c, ann(5, "other")), EmitEquivocationProof)


def test_same_sequence_in_different_epochs_is_not_a_fork() -> None:
    c = core()
    recv(c, ann(5, epoch=0))
    assert not of(recv(c, ann(5, "x", epoch=1)), EmitEquivocationProof)


def test_received_proof_is_accepted_and_forwarded_and_bad_proof_penalised() -> None:
    c = core()
    proof = EquivocationProof.make(ann(3, "a"), ann(3, "b"))
    out = recv(c, proof.envelope)
    assert of(out, Accept) and of(out, Forward)
    assert c.equivocation_proof(DID) == proof
    not_a_fork = EquivocationProof.make(ann(3, "a"), ann(4, "b"))
    out = recv(c, not_a_fork.envelope, peer="p9")
    assert reasons(out) == ["invalid-proof"] and of(out, Penalise)


# ---- size / garbage / time


def test_oversized_is_penalised() -> None:
    c = core()
    out = recv(c, b"ODFP\x01\x01" + b"\x00" * 5000)
    assert reasons(out) == ["oversized"] and of(out, Penalise)


def test_truncated_is_penalised() -> None:
    c = core()
    out = recv(c, ann(5).envelope[:-10])
    assert reasons(out) == ["malformed:truncated"] and of(out, Penalise)


def test_garbage_is_penalised() -> None:
    c = core()
    out = recv(c, b"\x00\x01garbage\xff" * 3)
    assert reasons(out) == ["malformed:bad-magic"] and of(out, Penalise)


def test_future_timestamp_is_rejected_but_not_remembered() -> None:
    c = core()
    sm = ann(5, issued=T0 + 31 * NS_PER_S)
    out = recv(c, sm)
    assert reasons(out) == ["future-timestamp"] and of(out, Penalise)
    # within the skew bound it is fine (and once the clocks agree, the same bytes are accepted)
    assert of(recv(c, sm, peer="p2", t=T0 + 2 * NS_PER_S), RequestFetch)


# ---- flood / scores


def attestation(i: int, key: PrivateKey = NODE) -> SignedMessage:
    att = Attestation(
        node=key.dataset_id(),
        dataset=DID,
        head=h(f"head-{i}"),
        verdict=Verdict.INTEGRITY_ONLY,
        engine_name="none",
        engine_version="0",
        checks=Checks.METADATA_INTEGRITY,
        locations=FetchLocations(),
        issued_at_ns=T0,
        nonce=i.to_bytes(16, "big"),
    )
    return sign_message(att, key)


def test_fast_honest_owner_is_delayed_and_coalesced_never_penalised() -> None:
    c = core(rate_burst=5.0, rate_per_s=1.0)
    outs: list[Decision] = []
    for i in range(40):
        outs += recv(c, ann(100 + i), peer="owner", t=T0)
    assert not of(outs, Penalise) and not of(outs, DisconnectPeer)
    rs = reasons(outs)
    assert "rate-limited" not in rs and rs.count("delayed") == 35
    assert c.peer_score("owner", T0) > 0
    assert c.backlog_bytes() > 0
    # The newest head waits in the backlog; when a token refills it is processed and queued
    # behind the running fetch (it superseded the 34 older delayed heads, each told so). Of the
    # five processed at once, 100 is fetched and 101..104 queue in turn, each newer one
    # superseding the one queued before it (3 outcomes).
    assert rs.count("superseded") == 34 + 3
    late = c.handle(Tick(T0 + 2 * NS_PER_S))
    # 139 takes 104's place in the queue: 104 is superseded.
    assert [type(d) for d in late] == [Accept, Forward, Ignore]
    assert reasons(late) == ["superseded"]
    assert c.backlog_bytes() == 0
    nxt = c.handle(FetchCompleted(DID, h("head-100"), True, T0 + 3 * NS_PER_S))
    fetch = of(nxt, RequestFetch)
    assert len(fetch) == 1 and fetch[0].head == h("head-139")  # type: ignore[union-attr]


def test_delayed_message_age_counts_from_its_arrival() -> None:
    c = core(rate_burst=1.0, rate_per_s=1.0 / 600)
    recv(c, ann(1), t=T0)
    assert reasons(recv(c, ann(2, issued=T0), t=T0)) == ["delayed"]
    # Ten minutes later (beyond max_message_age) its token arrives; it was fresh when it came.
    out = c.handle(Tick(T0 + 601 * NS_PER_S))
    assert of(out, Accept) and "expired" not in reasons(out)


def test_backlog_overflow_is_flooding_penalised_and_graylisted() -> None:
    c = core(rate_burst=5.0, rate_per_s=1.0, backlog_bytes_per_peer=64 * 1024)
    outs: list[Decision] = []
    for i in range(400):  # distinct messages that cannot coalesce
        outs += recv(c, attestation(i), peer="flooder", t=T0)
    rs = reasons(outs)
    assert rs.count("rate-limited") >= 20
    assert of(outs, DisconnectPeer)
    assert "graylisted" in rs
    assert c.peer_score("flooder", T0) <= -100
    # another peer is unaffected
    assert of(recv(c, ann(500), peer="honest"), Forward)
    # the score decays back towards zero
    assert c.peer_score("flooder", T0 + 3600 * NS_PER_S) > -1


def test_delayed_invalid_message_is_penalised_when_processed() -> None:
    c = core(rate_burst=1.0, rate_per_s=1.0)
    recv(c, ann(1), t=T0)
    forged = ann(2, key=MALLORY)  # for DID, signed by someone else
    assert reasons(recv(c, forged, peer="p1", t=T0)) == ["delayed"]
    out = c.handle(Tick(T0 + 2 * NS_PER_S))
    assert reasons(out) == ["bad-signature"] and of(out, Penalise)


def test_rate_limit_refills_with_time() -> None:
    c = core(rate_burst=2.0, rate_per_s=1.0)
    assert not reasons(recv(c, ann(1), t=T0))
    recv(c, ann(2), t=T0)
    assert reasons(recv(c, ann(3), t=T0)) == ["delayed"]
    assert of(recv(c, ann(4), t=T0 + 2 * NS_PER_S), Accept)


def test_total_backlog_is_bounded_across_peers() -> None:
    c = core(
        rate_burst=1.0,
        rate_per_s=1.0,
        backlog_bytes_total=4096,
        max_message_size=2048,
        backlog_bytes_per_peer=2048,
    )
    outs: list[Decision] = []
    for i in range(40):
        peer = f"p{i}"
        recv(c, attestation(1000 + i), peer=peer, t=T0)  # spends the one token
        outs += recv(c, attestation(i), peer=peer, t=T0)
    rs = reasons(outs)
    assert "backlog-full" in rs and not of(outs, Penalise)
    assert c.backlog_bytes() <= 4096


# ---- queueing, timers, anti-entropy


def test_newer_head_is_queued_while_fetching_and_fetched_next() -> None:
    c = core()
    recv(c, ann(5))
    assert not of(recv(c, ann(6)), RequestFetch)
    assert not of(recv(c, ann(7)), RequestFetch)
    out = c.handle(FetchCompleted(DID, h("head-5"), True, T0))
    fetch = of(out, RequestFetch)
    assert len(fetch) == 1 and fetch[0].head == h("head-7")  # type: ignore[union-attr]
    assert fetch[0].base == h("head-5")  # type: ignore[union-attr]


def test_fetch_timeout_abandons_and_unexpected_results_are_ignored() -> None:
    c = core(fetch_timeout_ns=10 * NS_PER_S)
    recv(c, ann(5))
    assert of(c.handle(Tick(T0 + 11 * NS_PER_S)), AbandonFetch)
    # A completion the core no longer waited for still lands (its commit cannot be undone)...
    assert of(c.handle(FetchCompleted(DID, h("head-5"), True, T0)), HeadAccepted)
    # ...but results for heads nobody announced are ignored.
    assert reasons(c.handle(FetchCompleted(DID, h("nope"), True, T0))) == ["unexpected-fetch"]
    assert reasons(c.handle(FetchFailed(DID, h("nope"), "x", T0))) == ["unexpected-fetch"]


def test_periodic_anti_entropy_with_injected_rng() -> None:
    c = core(anti_entropy_interval_ns=10 * NS_PER_S)
    c.handle(PeerConnected("a", T0))
    c.handle(PeerConnected("b", T0))
    requests: list[Decision] = []
    for s in range(0, 100):
        requests += of(c.handle(Tick(T0 + s * NS_PER_S)), RequestAntiEntropy)
    assert 5 <= len(requests) <= 20
    assert {r.peer for r in requests} <= {"a", "b"}  # type: ignore[union-attr]


def test_anti_entropy_catches_up_a_restarted_node() -> None:
    old = core()
    accept_head(old, ann(5))
    served = old.latest_heads([DID])
    fresh = core()
    fresh.restore_accepted(ann(3).envelope)
    old_ts = T0 + 3600 * NS_PER_S  # long after issue: gossip would call it expired
    out = fresh.handle(AntiEntropyReceived("old", tuple(served), old_ts))
    assert of(out, RequestFetch) and not of(out, Forward)


def test_attestation_and_verification_results() -> None:
    c = core()
    att = Attestation(
        node=NODE.dataset_id(),
        dataset=DID,
        head=h("head-5"),
        verdict=Verdict.INTEGRITY_ONLY,
        engine_name="none",
        engine_version="0",
        checks=Checks.METADATA_INTEGRITY,
        locations=FetchLocations(),
        issued_at_ns=T0,
        nonce=b"\x00" * 16,
    )
    assert of(recv(c, sign_message(att, NODE)), Forward)
    assert reasons(recv(c, sign_message(att, OWNER), peer="p2")) == ["bad-signature"]
    accept_head(c, ann(5))
    assert c.handle(VerificationCompleted(DID, h("head-5"), True, T0)) == [
        PublishAttestation(DID, h("head-5"))
    ]
    assert c.handle(VerificationCompleted(DID, h("head-5"), False, T0)) == [
        PublishDispute(DID, h("head-5"))
    ]


# ---- bounded memory


def test_seen_cache_is_bounded_and_expires() -> None:
    s = SeenCache(ttl_ns=10, capacity=3)
    for i in range(5):
        s.add(bytes([i]), now_ns=i)
    assert len(s) == 3 and s.get(b"\x00", 4) == (False, None) and s.get(b"\x04", 4)[0]
    s.expire(100)
    assert len(s) == 0


def test_peer_table_is_bounded() -> None:
    c = core(max_peers=8)
    for i in range(50):
        recv(c, b"junk", peer=f"p{i}")
    assert c.peer_count() == 8


def test_config_rejects_seen_ttl_shorter_than_replay_window() -> None:
    with pytest.raises(ValueError):
        CoreConfig(seen_ttl_ns=NS_PER_S)


# ---- every announcement ends with exactly one outcome


def _terminal(ds: list[Decision]) -> int:
    """Outcomes that end an announcement's life ("delayed" is not one: it is processed later)."""
    return sum(
        1
        for d in ds
        if isinstance(d, (HeadAccepted, RejectHead, Penalise))
        or (isinstance(d, Ignore) and d.reason != "delayed")
    )


@pytest.mark.parametrize("seed", range(40))
def test_every_received_announcement_gets_exactly_one_outcome(seed: int) -> None:
    """Random arrivals (out of order, re-sent), fetch successes, failures and timeouts: when the
    fetch queue has drained, the terminal outcomes number the messages received (a candidate
    replaced in the queue is told "superseded"; none silently disappears)."""
    rnd = random.Random(seed)
    c = core(rate_burst=1000.0, rate_per_s=1000.0)
    t = T0
    received = 0
    terminal = 0
    inflight: list[Multihash] = []
    msgs: list[SignedMessage] = []
    seq = 0

    def apply(ds: list[Decision]) -> None:
        nonlocal terminal
        terminal += _terminal(ds)
        for d in ds:
            if isinstance(d, RequestFetch):
                inflight.append(d.head)
            elif isinstance(d, AbandonFetch):
                inflight.remove(d.head)

    for _ in range(200):
        t += rnd.randrange(1, 3 * NS_PER_S)
        r = rnd.random()
        if r < 0.45 or not inflight:
            if msgs and rnd.random() < 0.2:
                sm = rnd.choice(msgs)  # the very same message again (a duplicate)
            else:
                seq += rnd.choice((1, 1, 1, 2, -1)) if seq > 1 else 1
                sm = ann(seq, issued=t)
                msgs.append(sm)
            received += 1
            apply(recv(c, sm, peer=rnd.choice(("p1", "p2")), t=t))
        elif r < 0.75:
            apply(c.handle(FetchCompleted(DID, inflight.pop(0), True, t)))
        elif r < 0.85:
            apply(c.handle(FetchFailed(DID, inflight.pop(0), "unreachable", t)))
        else:
            apply(c.handle(Tick(t)))
    # Drain: complete whatever is in flight, tick past every retry and timeout.
    for _ in range(500):
        if inflight:
            apply(c.handle(FetchCompleted(DID, inflight.pop(0), True, t)))
        else:
            t += 120 * NS_PER_S
            apply(c.handle(Tick(t)))
            if not inflight:
                break
    assert not inflight
    assert terminal == received
