"""Unit tests of the trust-policy module (``p2p/trust.py``): every state transition."""

from __future__ import annotations

import random

import pytest

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from p2p.trust import (
    MAX_RECORDED_PER_HEAD,
    SHOWN_DISPUTERS,
    STRANGER_HEADS_PER_SIGNER,
    AttestationSeen,
    DisputeSeen,
    Distrusted,
    HeadSeen,
    LocalVerdict,
    Outcome,
    Policy,
    Replay,
    ReplayReason,
    TrustConfig,
    TrustConfigError,
    Trusted,
    TrustedBy,
    TrustPolicy,
    TrustState,
    TrustTick,
)
from p2p.wire import Verdict

NS = 1_000_000_000
DS = DatasetId(b"\x01" * 32)
H = Multihash.sha3_256(b"head")
OTHER = Multihash.sha3_256(b"other head")
A, B, C, X, Y = (DatasetId(bytes([i]) * 32) for i in (10, 11, 12, 20, 21))
TRUSTED = frozenset({A, B, C})


class FixedRng:
    """An rng that always draws ``value``."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return self.value


def policy(name: Policy = Policy.QUORUM, rng: float = 0.99, **kw: object) -> TrustPolicy:
    if name in (Policy.QUORUM, Policy.SAMPLE):
        kw.setdefault("trusted_attesters", TRUSTED)
        kw.setdefault("k", 2)
    return TrustPolicy(TrustConfig(policy=name, **kw), FixedRng(rng))  # type: ignore[arg-type]


def att(who: DatasetId, head: Multihash = H, t: int = 1, v: Verdict = Verdict.VERIFIED):
    return AttestationSeen(DS, head, who, v, t * NS)


def dispute(who: DatasetId, t: int = 1) -> DisputeSeen:
    return DisputeSeen(DS, H, who, f"dispute-{who.public_key[0]}", t * NS)


def seen(t: int = 0) -> HeadSeen:
    return HeadSeen(DS, H, t * NS)


# ----------------------------------------------------------------------------- configuration


def test_quorum_with_no_trusted_attesters_is_a_configuration_error() -> None:
    with pytest.raises(TrustConfigError) as e:
        TrustConfig(policy=Policy.QUORUM, k=1)
    assert e.value.setting == "[trust] trusted_attesters"
    assert isinstance(e.value, OdfNodeError)
    with pytest.raises(TrustConfigError, match=r"\[trust\] trusted_attesters"):
        TrustConfig(policy=Policy.SAMPLE, k=1)
    with pytest.raises(TrustConfigError, match=r"\[trust\] trusted_attesters"):
        TrustConfig(policy=Policy.QUORUM, k=1, trusted_attesters=TRUSTED, any_attester=True)


@pytest.mark.parametrize(
    ("kw", "setting"),
    [
        ({"k": 0}, "k"),
        ({"k": 4}, "k"),  # more than the 3 trusted attesters: unreachable
        ({"p": 1.5}, "p"),
        ({"fallback_verify_s": 0.0}, "fallback_verify_s"),
        ({"penalty": -1.0}, "base_weight"),
    ],
)
def test_bad_settings_are_refused_and_named(kw: dict[str, object], setting: str) -> None:
    with pytest.raises(TrustConfigError) as e:
        TrustConfig(policy=Policy.QUORUM, trusted_attesters=TRUSTED, **kw)  # type: ignore[arg-type]
    assert e.value.setting == f"[trust] {setting}"


def test_settings_table_parses_node_ids_as_status_prints_them() -> None:
    cfg = TrustConfig.from_settings(
        {"policy": "quorum", "k": 2, "trusted_attesters": [A.as_did_key(), B.as_did_str()]},
        can_replay=False,
    )
    assert cfg.policy is Policy.QUORUM and cfg.k == 2 and not cfg.can_replay
    assert cfg.trusted_attesters == frozenset({A, B})
    assert TrustConfig.from_settings({}, can_replay=True).policy is Policy.VERIFY_ALL
    for table, setting in [
        ({"policy": "trust-me"}, "policy"),
        ({"policy": "quorum", "k": 1, "trusted_attesters": ["did:key:nope"]}, "trusted_attesters"),
        ({"policy": "quorum", "k": 1, "trusted_attesters": "did:key:z6Mk"}, "trusted_attesters"),
        ({"policy": "quorum", "k": "2", "trusted_attesters": [A.as_did_key()]}, "k"),
        ({"p": "often"}, "p"),
        ({"quorum": 3}, "quorum"),
    ]:
        with pytest.raises(TrustConfigError) as e:
            TrustConfig.from_settings(table, can_replay=True)
        assert e.value.setting == f"[trust] {setting}", table


# ----------------------------------------------------------------------------- verify-all


def test_verify_all_replays_every_head_and_trusts_only_its_own_replay() -> None:
    p = policy(Policy.VERIFY_ALL, trusted_attesters=TRUSTED)
    assert p.handle(seen()) == [Replay(DS, H, ReplayReason.POLICY)]
    assert p.handle(att(A)) == [] and p.handle(att(B)) == [] and p.handle(att(C)) == []
    assert p.status(DS, H).state is TrustState.PENDING
    assert p.handle(LocalVerdict(DS, H, Outcome.VERIFIED, 5 * NS)) == [
        Trusted(DS, H, TrustedBy.LOCAL, ())
    ]
    st = p.status(DS, H)
    assert st.state is TrustState.TRUSTED and st.by is TrustedBy.LOCAL and st.attesters == ()


def test_verify_all_failed_replay_disputes_the_head() -> None:
    p = policy(Policy.VERIFY_ALL)
    p.handle(seen())
    out = p.handle(LocalVerdict(DS, H, Outcome.FAILED, NS, evidence="mismatch at 0..99"))
    assert out == [Distrusted(DS, H, TrustState.DISPUTED, "mismatch at 0..99", None)]
    assert p.status(DS, H).evidence == "mismatch at 0..99"
    # the node's own verdict is final
    assert p.handle(LocalVerdict(DS, H, Outcome.VERIFIED, 2 * NS)) == []
    assert p.status(DS, H).state is TrustState.DISPUTED


def test_verify_all_on_a_node_without_engine_is_unverifiable() -> None:
    p = policy(Policy.VERIFY_ALL, can_replay=False)
    out = p.handle(seen())
    assert out == [Distrusted(DS, H, TrustState.UNVERIFIABLE, "cannot replay", None)]
    assert p.handle(TrustTick(10_000 * NS)) == []


def test_unverifiable_local_verdict_under_verify_all() -> None:
    p = policy(Policy.VERIFY_ALL)
    p.handle(seen())
    out = p.handle(LocalVerdict(DS, H, Outcome.UNVERIFIABLE, NS, evidence="engine missing"))
    assert out == [Distrusted(DS, H, TrustState.UNVERIFIABLE, "engine missing", None)]


# ----------------------------------------------------------------------------- quorum


def test_quorum_trusts_at_k_distinct_trusted_attesters_and_names_them() -> None:
    p = policy(Policy.QUORUM, k=2)
    assert p.handle(seen()) == []
    assert p.status(DS, H).state is TrustState.PENDING
    assert p.handle(att(A)) == []
    assert p.handle(att(A, t=2)) == []  # the same attester twice counts once
    assert p.handle(att(X)) == []  # not in the trusted set
    assert p.status(DS, H).state is TrustState.PENDING
    assert p.handle(att(B)) == [Trusted(DS, H, TrustedBy.QUORUM, (A, B))]
    st = p.status(DS, H)
    assert (st.state, st.by, st.attesters) == (TrustState.TRUSTED, TrustedBy.QUORUM, (A, B))
    assert p.handle(att(C)) == []  # trusted once


def test_attestations_before_the_head_is_seen_count_when_it_is() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(att(A))
    p.handle(att(B))
    assert p.status(DS, H).state is TrustState.PENDING  # not accepted yet: never trusted
    assert p.handle(seen()) == [Trusted(DS, H, TrustedBy.QUORUM, (A, B))]


def test_attestations_of_another_head_or_not_verified_never_count() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(seen())
    p.handle(att(A, head=OTHER))
    p.handle(att(B, head=OTHER))
    p.handle(att(C, v=Verdict.INTEGRITY_ONLY))
    p.handle(att(A, v=Verdict.UNVERIFIABLE))
    assert p.status(DS, H).state is TrustState.PENDING
    assert p.status(DS, OTHER).state is TrustState.PENDING  # OTHER was never seen


def test_quorum_never_replays_unless_disputed_or_overdue() -> None:
    p = policy(Policy.QUORUM, k=2)
    assert p.handle(seen(0)) == []
    assert p.handle(TrustTick(599 * NS)) == []
    assert p.handle(TrustTick(600 * NS)) == [Replay(DS, H, ReplayReason.FALLBACK)]
    assert p.handle(TrustTick(1200 * NS)) == []  # asked once
    # while the fallback replay runs, a quorum may still trust the head
    p.handle(att(A))
    assert p.handle(att(B)) == [Trusted(DS, H, TrustedBy.QUORUM, (A, B))]
    # and the node's own replay, when it ends, confirms it as local
    out = p.handle(LocalVerdict(DS, H, Outcome.VERIFIED, 700 * NS))
    assert out == [Trusted(DS, H, TrustedBy.LOCAL, ())]


def test_fallback_needs_an_engine() -> None:
    p = policy(Policy.QUORUM, k=2, can_replay=False)
    p.handle(seen())
    assert p.handle(TrustTick(10_000 * NS)) == []
    assert p.status(DS, H).state is TrustState.PENDING


def test_a_trusted_attesters_dispute_blocks_trust_and_triggers_a_replay() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(seen())
    p.handle(att(A))
    out = p.handle(dispute(C))
    assert out == [
        Distrusted(DS, H, TrustState.DISPUTED, "dispute-12", C),
        Replay(DS, H, ReplayReason.DISPUTE),
    ]
    assert p.handle(att(B)) == []  # a quorum no longer suffices
    st = p.status(DS, H)
    assert st.state is TrustState.DISPUTED and st.evidence == "dispute-12"
    assert st.disputed_by == (C,)
    assert p.handle(TrustTick(10_000 * NS)) == []  # no fallback: already replaying
    # the node's own replay settles it either way
    out = p.handle(LocalVerdict(DS, H, Outcome.VERIFIED, 50 * NS))
    assert out == [Trusted(DS, H, TrustedBy.LOCAL, ())]
    assert p.status(DS, H).disputed_by == (C,)  # still shown


def test_a_trusted_dispute_revokes_quorum_trust() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(seen())
    p.handle(att(A))
    p.handle(att(B))
    out = p.handle(dispute(C))
    assert [type(d) for d in out] == [Distrusted, Replay]
    assert p.status(DS, H).state is TrustState.DISPUTED
    out = p.handle(LocalVerdict(DS, H, Outcome.FAILED, 40 * NS, evidence="replay mismatch"))
    assert out == [Distrusted(DS, H, TrustState.DISPUTED, "replay mismatch", None)]


def test_a_dispute_before_the_head_blocks_it_on_arrival() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(att(A))
    p.handle(att(B))
    assert p.handle(dispute(A)) == []
    out = p.handle(seen())
    assert out == [
        Distrusted(DS, H, TrustState.DISPUTED, "dispute-10", A),
        Replay(DS, H, ReplayReason.DISPUTE),
    ]


def test_untrusted_disputes_are_recorded_but_never_block() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(seen())
    assert p.handle(dispute(X)) == []
    assert p.handle(dispute(Y)) == []
    assert p.status(DS, H).disputed_by == (X, Y)
    p.handle(att(A))
    assert p.handle(att(B)) == [Trusted(DS, H, TrustedBy.QUORUM, (A, B))]
    assert p.status(DS, H).disputed_by == (X, Y)


def test_a_light_node_is_disputed_by_a_trusted_dispute_without_replaying() -> None:
    p = policy(Policy.QUORUM, k=2, can_replay=False)
    p.handle(seen())
    assert p.handle(dispute(B)) == [Distrusted(DS, H, TrustState.DISPUTED, "dispute-11", B)]


def test_unverifiable_local_verdict_leaves_quorum_open() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(seen())
    p.handle(TrustTick(600 * NS))
    out = p.handle(LocalVerdict(DS, H, Outcome.UNVERIFIABLE, 601 * NS))
    assert [d.state for d in out if isinstance(d, Distrusted)] == [TrustState.UNVERIFIABLE]
    p.handle(att(A))
    assert p.handle(att(C)) == [Trusted(DS, H, TrustedBy.QUORUM, (A, C))]


def test_an_attester_refuted_by_the_nodes_replay_stops_counting() -> None:
    p = policy(Policy.QUORUM, k=2)
    p.handle(seen())
    p.handle(TrustTick(600 * NS))
    p.handle(att(A))
    p.handle(att(B))  # trusted by quorum, fallback replay still running
    p.handle(LocalVerdict(DS, H, Outcome.FAILED, 700 * NS))
    assert p.reputation(A) == -10.0 and not p.is_trusted_attester(A)
    # next head: A and B lied; C alone is not a quorum of two
    h2 = Multihash.sha3_256(b"next")
    p.handle(HeadSeen(DS, h2, 800 * NS))
    for who in (A, B, C):
        p.handle(AttestationSeen(DS, h2, who, Verdict.VERIFIED, 801 * NS))
    assert p.status(DS, h2).state is TrustState.PENDING


# ----------------------------------------------------------------------------- sample, reputation


def test_sample_draws_once_per_head() -> None:
    rng = FixedRng(0.05)
    p = TrustPolicy(TrustConfig(policy=Policy.SAMPLE, k=2, p=0.1, trusted_attesters=TRUSTED), rng)
    assert p.handle(seen()) == [Replay(DS, H, ReplayReason.SAMPLE)]
    assert p.handle(seen()) == []
    assert rng.draws == 1
    # a head chosen for replay waits for the node's own verdict, not a quorum
    p.handle(att(A))
    assert p.handle(att(B)) == []
    rng.value = 0.5
    h2 = Multihash.sha3_256(b"h2")
    assert p.handle(HeadSeen(DS, h2, 0)) == []
    assert rng.draws == 2
    p.handle(AttestationSeen(DS, h2, A, Verdict.VERIFIED, NS))
    out = p.handle(AttestationSeen(DS, h2, C, Verdict.VERIFIED, NS))
    assert out == [Trusted(DS, h2, TrustedBy.QUORUM, (A, C))]


def test_sample_on_a_node_without_engine_never_draws() -> None:
    rng = FixedRng(0.0)
    cfg = TrustConfig(policy=Policy.SAMPLE, k=1, p=1.0, trusted_attesters=TRUSTED, can_replay=False)
    p = TrustPolicy(cfg, rng)
    assert p.handle(seen()) == []
    assert rng.draws == 0


def test_reputation_weights_attesters_and_learns_from_replays() -> None:
    cfg = TrustConfig(policy=Policy.REPUTATION, p=0.0, base_weight=0.5, threshold=1.0)
    p = TrustPolicy(cfg, random.Random(1))
    p.handle(seen())
    assert p.handle(att(X)) == []
    assert p.handle(att(Y)) == [Trusted(DS, H, TrustedBy.QUORUM, (X, Y))]
    p.handle(LocalVerdict(DS, H, Outcome.FAILED, 9 * NS))
    assert p.reputation(X) == -10.0
    h2 = Multihash.sha3_256(b"h2")
    p.handle(HeadSeen(DS, h2, 10 * NS))
    for who in (X, Y, A):
        p.handle(AttestationSeen(DS, h2, who, Verdict.VERIFIED, 11 * NS))
    assert p.status(DS, h2).state is TrustState.PENDING  # the liars weigh nothing now


def test_memory_is_bounded() -> None:
    cfg = TrustConfig(policy=Policy.QUORUM, k=1, trusted_attesters=TRUSTED, max_heads=8)
    p = TrustPolicy(cfg, random.Random(1))
    for i in range(100):
        p.handle(HeadSeen(DS, Multihash.sha3_256(i.to_bytes(4, "big")), i))
    assert len(p._heads) == 8
    assert p.handle(TrustTick(10_000 * NS)) == [
        Replay(DS, Multihash.sha3_256(i.to_bytes(4, "big")), ReplayReason.FALLBACK)
        for i in range(92, 100)
    ]


def test_an_own_verdict_before_the_head_is_seen_stays_final() -> None:
    p = policy(Policy.VERIFY_ALL, can_replay=False)
    p.handle(LocalVerdict(DS, H, Outcome.VERIFIED, 0))
    assert p.handle(seen()) == []
    assert p.status(DS, H).state is TrustState.TRUSTED
    q = policy(Policy.QUORUM, k=2)
    q.handle(LocalVerdict(DS, H, Outcome.UNVERIFIABLE, 0))
    assert q.handle(seen()) == []  # no replay: it was tried; no fallback either
    assert q.handle(TrustTick(10_000 * NS)) == []
    q.handle(att(A))
    assert q.handle(att(B)) == [Trusted(DS, H, TrustedBy.QUORUM, (A, B))]


# ----------------------------------------------------------------------------- under attack


def _fresh(n: int) -> list[DatasetId]:
    """``n`` strangers' keys, none in ``TRUSTED`` (a sybil flood's fresh keys)."""
    return [DatasetId(b"\xee" + i.to_bytes(31, "big")) for i in range(n)]


def test_a_sybil_flood_cannot_crowd_a_trusted_dispute_out() -> None:
    """Issue 39, defect 1: 1,024 disputes from fresh keys filled the head's slots first come,
    first served; the trusted attester's dispute that followed was dropped and a quorum trusted
    the disputed head."""
    p = policy(Policy.QUORUM, k=2, can_replay=False)
    p.handle(seen())
    for who in _fresh(MAX_RECORDED_PER_HEAD + 10):
        assert p.handle(dispute(who)) == []
    assert p.handle(dispute(C)) == [Distrusted(DS, H, TrustState.DISPUTED, "dispute-12", C)]
    p.handle(att(A))
    assert p.handle(att(B)) == []  # the quorum does not trust a head a trusted attester disputed
    st = p.status(DS, H)
    assert st.state is TrustState.DISPUTED and st.disputed_by[0] == C
    assert st.disputes == MAX_RECORDED_PER_HEAD + 1  # the strangers' room stays bounded
    assert len(st.disputed_by) == 1 + SHOWN_DISPUTERS


def test_a_sybil_flood_before_the_head_is_seen_still_blocks_it_on_arrival() -> None:
    p = policy(Policy.QUORUM, k=2, can_replay=False)
    for who in _fresh(MAX_RECORDED_PER_HEAD + 1):
        p.handle(dispute(who))
    p.handle(dispute(C))
    p.handle(att(A))
    p.handle(att(B))
    assert p.handle(seen()) == [Distrusted(DS, H, TrustState.DISPUTED, "dispute-12", C)]


def test_strangers_attestations_cannot_crowd_out_an_earned_reputation() -> None:
    """Under ``reputation`` with no weight for strangers, the attesters whose reputation the
    node's own replays earned have a room of their own."""
    p = policy(Policy.REPUTATION, base_weight=0.0, threshold=1.0, p=0.0)
    h0 = Multihash.sha3_256(b"h0")
    p.handle(HeadSeen(DS, h0, 0))
    p.handle(AttestationSeen(DS, h0, X, Verdict.VERIFIED, 0))
    p.handle(LocalVerdict(DS, h0, Outcome.VERIFIED, 0))
    assert p.reputation(X) == 1.0
    p.handle(seen())
    for who in _fresh(MAX_RECORDED_PER_HEAD):
        assert p.handle(att(who)) == []  # no weight: never trusted by them
    assert p.handle(att(X)) == [Trusted(DS, H, TrustedBy.QUORUM, (X,))]


def test_strangers_heads_never_evict_a_seen_head() -> None:
    """Issue 39, defect 2 (live): disputes of unknown blocks made the policy forget the head
    it had seen (and the trusted dispute of it); strangers' heads have a room of their own,
    and one signer a share of it."""
    p = policy(Policy.QUORUM, k=2, can_replay=False, max_heads=4)
    p.handle(seen())
    p.handle(att(A))
    noise = [Multihash.sha3_256(i.to_bytes(4, "big")) for i in range(64)]
    for block in noise:  # one key, 64 random blocks
        p.handle(DisputeSeen(DS, block, X, "noise", NS))
    for who, block in zip(_fresh(64), noise, strict=True):  # fresh keys
        p.handle(DisputeSeen(DS, block, who, "noise", NS))
    assert p.head_count() == 1 + 4  # the seen head and the strangers' room
    assert p.handle(att(B)) == [Trusted(DS, H, TrustedBy.QUORUM, (A, B))]
    q = policy(Policy.QUORUM, k=2, can_replay=False, max_heads=64)
    for block in noise:
        q.handle(DisputeSeen(DS, block, X, "noise", NS))
    assert q.head_count() == STRANGER_HEADS_PER_SIGNER  # one signer's share


def test_a_head_a_trusted_attester_disputed_is_never_evicted_by_other_heads() -> None:
    p = policy(Policy.QUORUM, k=2, can_replay=False, max_heads=4)
    p.handle(seen())
    p.handle(dispute(C))
    for i in range(40):  # newer heads, seen ones and strangers' alike
        p.handle(HeadSeen(DS, Multihash.sha3_256(i.to_bytes(4, "big")), i))
        p.handle(DisputeSeen(DS, Multihash.sha3_256(b"x" + bytes([i])), X, "n", i))
    p.handle(att(A))
    p.handle(att(B))
    st = p.status(DS, H)
    assert st.state is TrustState.DISPUTED and st.disputed_by == (C,)
    assert p.is_guarded(DS, H)
    assert p.head_count() <= 3 * 4  # every room stays bounded
