"""Property tests of the trust-policy module (``p2p/trust.py``) over generated event sequences.

Whatever order the events of a few heads, attesters (trusted or not), disputes, own verdicts and
ticks arrive in, after every event:

* a head trusted by quorum has at least ``k`` distinct attesters, all in the trusted set, each of
  which sent a VERIFIED attestation of that exact head — so ``k - 1`` trusted attestations, ``k``
  attestations of a different head, untrusted signers or one signer repeated never suffice;
* ``verify-all`` never trusts by quorum; a head is trusted by ``local`` only after the node's own
  VERIFIED verdict;
* a head disputed by a trusted attester is not trusted unless the node's own replay verified it;
* a node that cannot replay never gets a :class:`~p2p.trust.Replay`, and no head is asked to be
  replayed twice;
* the decisions are a function of the events and the rng seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fuzz_profile import fuzz
from hypothesis import given
from hypothesis import strategies as st

from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from p2p.trust import (
    AttestationSeen,
    DisputeSeen,
    HeadSeen,
    LocalVerdict,
    Outcome,
    Policy,
    Replay,
    TrustConfig,
    TrustDecision,
    TrustedBy,
    TrustEvent,
    TrustPolicy,
    TrustState,
    TrustTick,
)
from p2p.wire import Verdict

NS = 1_000_000_000
DS = DatasetId(b"\x01" * 32)
HEADS = [Multihash.sha3_256(bytes([i])) for i in range(3)]
TRUSTED = [DatasetId(bytes([10 + i]) * 32) for i in range(4)]
UNTRUSTED = [DatasetId(bytes([40 + i]) * 32) for i in range(4)]
SIGNERS = TRUSTED + UNTRUSTED


@dataclass(frozen=True)
class Case:
    """A generated policy and event sequence."""

    config: TrustConfig
    seed: int
    events: list[TrustEvent]


@st.composite
def cases(draw: st.DrawFn, with_local: bool = True) -> Case:
    """A policy (closed trusted set of 4 unless verify-all) and up to 60 events."""
    name = draw(st.sampled_from([Policy.VERIFY_ALL, Policy.QUORUM, Policy.SAMPLE]))
    config = TrustConfig(
        policy=name,
        k=draw(st.integers(1, len(TRUSTED))),
        trusted_attesters=frozenset(TRUSTED),
        p=draw(st.sampled_from([0.0, 0.3, 1.0])),
        fallback_verify_s=float(draw(st.integers(1, 50))),
        can_replay=draw(st.booleans()),
    )
    head = st.sampled_from(HEADS)
    signer = st.sampled_from(SIGNERS)
    t = st.integers(0, 100).map(lambda s: s * NS)
    kinds = [
        st.builds(lambda h, n: HeadSeen(DS, h, n), head, t),
        st.builds(
            lambda h, a, v, n: AttestationSeen(DS, h, a, v, n),
            head,
            signer,
            st.sampled_from(list(Verdict)),
            t,
        ),
        st.builds(
            lambda h, a, n: DisputeSeen(DS, h, a, f"d-{a.public_key[0]}", n), head, signer, t
        ),
        st.builds(TrustTick, t),
    ]
    if with_local:
        kinds.append(
            st.builds(
                lambda h, o, n: LocalVerdict(DS, h, o, n), head, st.sampled_from(list(Outcome)), t
            )
        )
    events = draw(st.lists(st.one_of(kinds), max_size=60))
    return Case(config, draw(st.integers(0, 2**32)), events)


def _run(case: Case) -> list[list[TrustDecision]]:
    p = TrustPolicy(case.config, random.Random(case.seed))
    return [p.handle(ev) for ev in case.events]


@given(cases())
@fuzz(400)
def test_quorum_trust_needs_k_distinct_trusted_verified_attestations_of_that_head(
    case: Case,
) -> None:
    cfg = case.config
    p = TrustPolicy(cfg, random.Random(case.seed))
    verified: dict[Multihash, set[DatasetId]] = {h: set() for h in HEADS}
    local_ok: set[Multihash] = set()
    local_done: set[Multihash] = set()
    refuted: set[DatasetId] = set()
    trusted_disputes: dict[Multihash, set[DatasetId]] = {h: set() for h in HEADS}
    replayed: set[Multihash] = set()
    for ev in case.events:
        out = p.handle(ev)
        match ev:
            case AttestationSeen() if ev.verdict is Verdict.VERIFIED:
                verified[ev.head].add(ev.attester)
            case DisputeSeen() if ev.attester in cfg.trusted_attesters:
                trusted_disputes[ev.head].add(ev.attester)
            case LocalVerdict() if (
                ev.head not in local_done and ev.outcome is not Outcome.UNVERIFIABLE
            ):
                local_done.add(ev.head)
                if ev.outcome is Outcome.VERIFIED:
                    local_ok.add(ev.head)
                else:
                    refuted |= verified[ev.head] & set(TRUSTED)
            case _:
                pass
        for d in out:
            if isinstance(d, Replay):
                assert cfg.can_replay, "a node without engine was asked to replay"
                assert d.head not in replayed, "asked to replay the same head twice"
                replayed.add(d.head)
        for h in HEADS:
            st_ = p.status(DS, h)
            if st_.state is TrustState.TRUSTED and st_.by is TrustedBy.QUORUM:
                assert cfg.policy is not Policy.VERIFY_ALL
                names = set(st_.attesters)
                assert len(names) == len(st_.attesters) >= cfg.k
                assert names <= cfg.trusted_attesters
                assert names <= verified[h]
                # the same count from untrusted signers or other heads would not have done
                assert len(verified[h] & cfg.trusted_attesters) >= cfg.k
            if st_.state is TrustState.TRUSTED and st_.by is TrustedBy.LOCAL:
                assert h in local_ok
            if h in local_ok:
                assert st_.state is TrustState.TRUSTED and st_.by is TrustedBy.LOCAL
            blocking = trusted_disputes[h] - refuted
            if blocking and h not in local_ok and cfg.policy is not Policy.VERIFY_ALL:
                assert st_.state is not TrustState.TRUSTED, (h, blocking)


@given(cases(with_local=False))
@fuzz(300)
def test_without_a_trusted_dispute_k_trusted_attestations_of_a_seen_head_trust_it(
    case: Case,
) -> None:
    """Liveness: quorum trusts as soon as it may (a sampled head waits for its own replay)."""
    cfg = case.config
    if cfg.policy is not Policy.QUORUM:
        return
    p = TrustPolicy(cfg, random.Random(case.seed))
    seen: set[Multihash] = set()
    verified: dict[Multihash, set[DatasetId]] = {h: set() for h in HEADS}
    disputed: set[Multihash] = set()
    for ev in case.events:
        p.handle(ev)
        match ev:
            case HeadSeen():
                seen.add(ev.head)
            case AttestationSeen() if ev.verdict is Verdict.VERIFIED:
                verified[ev.head].add(ev.attester)
            case DisputeSeen() if ev.attester in cfg.trusted_attesters:
                disputed.add(ev.head)
            case _:
                pass
        for h in HEADS:
            enough = len(verified[h] & cfg.trusted_attesters) >= cfg.k
            if h in seen and h not in disputed and enough:
                assert p.status(DS, h).state is TrustState.TRUSTED


@given(cases())
@fuzz(200)
def test_decisions_are_a_function_of_the_events_and_the_seed(case: Case) -> None:
    assert _run(case) == _run(case)


@given(cases())
@fuzz(200)
def test_untrusted_signers_change_nothing_under_a_closed_set(case: Case) -> None:
    """Dropping every attestation and dispute by an untrusted signer gives the same decisions."""
    if case.config.policy is Policy.VERIFY_ALL:
        return
    untrusted = set(UNTRUSTED)
    kept = [
        ev
        for ev in case.events
        if not (isinstance(ev, AttestationSeen | DisputeSeen) and ev.attester in untrusted)
    ]
    full = TrustPolicy(case.config, random.Random(case.seed))
    clean = TrustPolicy(case.config, random.Random(case.seed))
    for ev in kept:
        clean.handle(ev)
    for ev in case.events:
        full.handle(ev)
    for h in HEADS:
        a, b = full.status(DS, h), clean.status(DS, h)
        assert (a.state, a.by, a.attesters, a.evidence) == (b.state, b.by, b.attesters, b.evidence)
