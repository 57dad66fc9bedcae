"""Trust policies in the daemon: feeds :mod:`p2p.trust` and carries out its decisions.

:class:`TrustDriver` keeps one :class:`~p2p.trust.TrustPolicy` per followed dataset (the node's
``[trust]`` policy, or the subscription's own override) and feeds it what the node sees:

* ``HeadSeen`` when the protocol core accepted a head (fetched, and its blocks' hashes and
  signatures checked by the pull): :meth:`TrustDriver.head_accepted`;
* ``LocalVerdict`` when the node's own verification of a head ends
  (:meth:`TrustDriver.local_verdict`, called by the verify pipeline);
* ``AttestationSeen`` / ``DisputeSeen`` for signed attestations and disputes from gossip (the
  core already checked their signatures): :meth:`attestation`, :meth:`dispute`;
* ``TrustTick`` from the injected clock (:meth:`tick`, every few seconds from the daemon's
  housekeeping).

It carries out ``Replay`` (a verify work item with ``replay`` set, through the verify pipeline),
``Trusted`` and ``Distrusted`` (the subscription's trust state and newest trusted head persisted,
``head.trusted`` / ``head.distrusted`` in the event log and on the event stream, the dataset
republished to IPFS once a quorum trusts its current head). The policy stays pure: this module
owns the IO.

What trust changes (``docs/trust.md``): under any policy but ``verify-all`` a followed dataset is
served over the Simple Transfer Protocol, republished and used as a derivative's input only at
its newest trusted head (:meth:`served_head`, :meth:`untrusted_input`). ``verify-all`` keeps
today's behaviour exactly: every accepted head is replayed (or integrity checked on a node with
no engine) and served as soon as it is stored.

After a restart :meth:`restore` re-feeds each subscription's stored evidence (its accepted head,
the node's verification, the attestations and disputes received) without carrying out the
decisions again (no event, no republication): the state is rebuilt, a dispute is not forgotten,
and a head is not trusted twice. The disputes are read block by block (the blocks of the
accepted head's chain that others disputed), each trusted attester's in full, so no number of
strangers' disputes can push a trusted one out of a rebuild. A node key rotation or revocation
rebuilds only the datasets that the keys it names signed evidence of
(:meth:`TrustDriver.identities_changed`), and of those only the ones whose decisions a named
key can move (a listed attester, one with an earned reputation, or anyone under
``any_attester`` or a ``reputation`` base weight): a stranger's rotation, even by a key that
disputed a followed head, costs an index lookup, not a rebuild.

What a dispute costs (issue 39): the policy's work is O(1) in the number of earlier disputes
(``p2p/trust.py``), the persisted record names the trusted disputers and at most
:data:`p2p.trust.SHOWN_DISPUTERS` others, node ids are encoded as did:key once (a bounded
cache), and a record that did not change is not written again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from node.app.identities import NodeIdentities
from node.app.jsontypes import JsonFields
from node.app.ports import Clock, EventSink, StatePort
from node.app.rows import (
    AttestationRecord,
    Subscription,
    TrustOverride,
    TrustRecord,
    VerificationOutcome,
)
from p2p.core.config import Rng
from p2p.errors import WireDecodeError
from p2p.trust import (
    MAX_RECORDED_PER_HEAD,
    AttestationSeen,
    DisputeSeen,
    Distrusted,
    HeadSeen,
    LocalVerdict,
    Outcome,
    Policy,
    Replay,
    TrustConfig,
    TrustConfigError,
    TrustDecision,
    Trusted,
    TrustedBy,
    TrustEvent,
    TrustPolicy,
    TrustState,
    TrustTick,
    dataset_policy,
    parse_attesters,
)
from p2p.trust_executor import dispatch
from p2p.wire import Attestation as WireAttestation
from p2p.wire import (
    Checks,
    EquivocationProof,
    KeyRevocation,
    KeyRotation,
    Verdict,
    decode_unverified,
)

log = logging.getLogger("odf_node.trust")

DID_KEY_CACHE = 8192
"""Node ids whose did:key text is kept (each dispute re-encoded every disputer of the head:
15.8 ms per dispute at first, 281 ms by the 1,024th, issue 39)."""


@functools.lru_cache(maxsize=DID_KEY_CACHE)
def _did_key(node: DatasetId) -> str:
    return node.as_did_key()


def _counts_any(policy: TrustPolicy, keys: set[DatasetId]) -> bool:
    """Whether evidence signed by any of ``keys`` can move ``policy``'s decisions: a key whose
    attestations count or whose disputes block (a listed attester, or under ``any_attester``
    or a ``reputation`` base weight everyone), or one with an earned reputation. Only then
    does a rotation or revocation naming those keys change what the policy decides; a
    strangers' rotation under a quorum of listed attesters changes nothing it decides, and
    rebuilding for it let a storm of fresh keys' rotations (each ~150 ms over 1,500 stored
    disputes) hold the serial queue of gossip decisions for a minute."""
    listed = policy.config.trusted_attesters
    return any(
        k in listed or policy.is_trusted_attester(k) or policy.reputation(k) != 0 for k in keys
    )


def _named_count(policy: TrustPolicy, keys: set[DatasetId]) -> bool:
    """Whether any of ``keys`` counts for ``policy`` by name: a listed attester, or one with
    an earned reputation (not merely as anyone does under ``any_attester`` or a ``reputation``
    base weight). A rotation naming one is re-evaluated at once; a stranger's is coalesced."""
    listed = policy.config.trusted_attesters
    return any(k in listed or policy.reputation(k) != 0 for k in keys)


REBUILD_DELAY_S = 1.0
"""How long strangers' key records that touch a dataset under ``any_attester`` or a
``reputation`` base weight are gathered before its policy is rebuilt once for all of them."""
REBUILD_SLICE = 256
"""Events fed to a policy being rebuilt between two yields to the event loop."""


def keys_named(record: KeyRotation | KeyRevocation) -> tuple[DatasetId, ...]:
    """Every node key a key record names (a rotation's old and new key, a revocation's key and
    the key that signed it): what :meth:`TrustDriver.identities_changed` re-evaluates."""
    values = (getattr(record, f.name) for f in dataclasses.fields(record))
    return tuple(v for v in values if isinstance(v, DatasetId))


_VERDICTS = {v.name.lower(): v for v in Verdict}


def effective_config(default: TrustConfig, override: TrustOverride) -> TrustConfig:
    """The node's ``[trust]`` with a subscription's override applied, validated.

    Raises:
        TrustConfigError: the result is invalid (e.g. ``quorum`` with no trusted attesters);
            its message names the setting.
    """
    if override.empty:
        return default
    policy = default.policy
    if override.policy is not None:
        try:
            policy = Policy(override.policy)
        except ValueError:
            choices = ", ".join(p.value for p in Policy)
            raise TrustConfigError(
                "policy", f"unknown policy {override.policy!r} ({choices})"
            ) from None
    attesters = default.trusted_attesters
    if override.trusted_attesters is not None:
        attesters = parse_attesters(list(override.trusted_attesters))
    return dataclasses.replace(
        default,
        policy=policy,
        k=default.k if override.k is None else override.k,
        trusted_attesters=attesters,
    )


class ReplayPort(Protocol):
    """Queues the node's own verification of a head (the verify pipeline)."""

    async def queue(
        self, did: DatasetId, head: Multihash, sequence: int, *, replay: bool | None = None
    ) -> None:
        """Queue a verification of ``did``; ``replay`` False: integrity checks only."""
        ...


Republish = Callable[[DatasetId, Multihash], Awaitable[None]]
"""Republishes a followed dataset whose current head just became trusted (IPFS)."""


class TrustDriver:
    """See the module docstring."""

    def __init__(
        self,
        default: TrustConfig,
        state: StatePort,
        events: EventSink,
        clock: Clock,
        rng: Rng,
        verify: ReplayPort,
        *,
        republish: Republish | None = None,
        current_head: Callable[[DatasetId], Multihash | None] = lambda _d: None,
        contains_block: Callable[[DatasetId, Multihash], bool] = lambda _d, _b: False,
        identities: NodeIdentities | None = None,
    ) -> None:
        self.default = default
        self._state = state
        self._events = events
        self._clock = clock
        self._rng = rng
        self._verify = verify
        self._republish = republish
        self._current_head = current_head
        self._contains_block = contains_block
        self._policies: dict[DatasetId, TrustPolicy] = {}
        self._trusted_head: dict[DatasetId, str] = {}
        self._latest: dict[DatasetId, Multihash] = {}  # newest accepted head per dataset
        self._written: dict[DatasetId, tuple[TrustRecord, str | None]] = {}  # last persisted
        self._trusted_key_cache: dict[frozenset[DatasetId], list[str]] = {}
        # Rebuilds (docs/trust.md, "Rotation storms"): a policy is rebuilt aside and swapped
        # in whole; the live events of its dataset meanwhile are fed to the old one (carried
        # out) and kept here to feed to the new one (not carried out again).
        self._live: dict[DatasetId, list[TrustEvent]] = {}
        self._again: set[DatasetId] = set()  # rebuilt again once the running rebuild ends
        self._stale: set[DatasetId] = set()  # strangers' key records: rebuilt coalesced
        self._rebuilder: asyncio.Task[None] | None = None
        # Node key rotations and revocations: attesters are fed by their newest key, and a
        # revoked key's attestations and disputes from its revocation on are not fed at all.
        self.identities = identities if identities is not None else NodeIdentities()

    # ----------------------------------------------------------------- configuration

    def config_for(self, did: DatasetId) -> TrustConfig:
        """The policy ``did`` is judged by (the node's, until :meth:`configure` says else)."""
        policy = self._policies.get(did)
        return self.default if policy is None else policy.config

    def gates(self, did: DatasetId) -> bool:
        """Whether trust gates what the node does with ``did`` (every policy but verify-all)."""
        return self.config_for(did).policy is not Policy.VERIFY_ALL

    def _policy(self, did: DatasetId) -> TrustPolicy:
        policy = self._policies.get(did)
        if policy is None:
            policy = self._policies[did] = self._new_policy(self.default)
        return policy

    def _new_policy(self, config: TrustConfig) -> TrustPolicy:
        policy = dataset_policy(config, self._rng)
        policy.canonical = self.identities.canonical
        return policy

    async def identities_changed(self, *named: DatasetId) -> None:
        """A key rotation or revocation naming the keys ``named`` arrived (:func:`keys_named`):
        rebuild, from the stored evidence, the policies of the datasets that any key of those
        keys' nodes signed an attestation or a dispute of, so that an old key's attestations
        count as its node's and a revoked key's stop counting. Nothing else is rebuilt (a
        stranger's rotation between two fresh keys touches nothing); with no key named, every
        policy is."""
        self._trusted_key_cache.clear()
        if not named:
            await self.restore()
            return
        keys: set[DatasetId] = set()
        for node in named:
            keys |= self.identities.aliases(node)
            keys |= self.identities.aliases(self.identities.canonical(node))
            keys.add(node)
        touched = await self._state.datasets_signed_by(sorted(_did_key(k) for k in keys))
        for text in touched:
            did = DatasetId.parse(text)
            policy = self._policies.get(did)
            if policy is None or not _counts_any(policy, keys):
                continue
            if _named_count(policy, keys):
                await self.configure(did)
            else:
                # Counts only as anyone does (any_attester, a reputation base weight): a storm
                # of fresh keys' rotations rebuilt the dataset once per rotation, in the serial
                # queue of gossip decisions. Gathered, then rebuilt once, off that queue.
                self._stale.add(did)
                self._start_rebuilder()

    def _start_rebuilder(self) -> None:
        if self._rebuilder is None or self._rebuilder.done():
            self._rebuilder = asyncio.get_running_loop().create_task(self._rebuild_stale())

    async def _rebuild_stale(self) -> None:
        """Rebuild the datasets strangers' key records touched, once per :data:`REBUILD_DELAY_S`
        however many records arrived meanwhile."""
        while self._stale:
            await asyncio.sleep(REBUILD_DELAY_S)
            stale, self._stale = self._stale, set()
            for did in sorted(stale, key=str):
                try:
                    await self.configure(did)
                except Exception:  # one dataset's failure must not stop the others
                    log.exception("rebuilding the trust policy of %s failed", did)

    async def settle(self) -> None:
        """Wait until the coalesced rebuilds scheduled so far are done (tests, shutdown)."""
        while self._rebuilder is not None and not self._rebuilder.done():
            await asyncio.shield(self._rebuilder)

    async def restore(self) -> None:
        """Rebuild every subscription's policy from the stored evidence (at start-up)."""
        for sub in await self._state.subscriptions():
            await self._restore(sub)

    async def configure(self, did: DatasetId) -> None:
        """Re-read ``did``'s subscription (its override changed) and rebuild its policy."""
        sub = await self._state.subscription(did.as_did_str())
        if sub is not None:
            await self._restore(sub)

    async def _restore(self, sub: Subscription) -> None:
        """Rebuild ``sub``'s policy from the stored evidence: built aside (the reads off the
        loop, the feeding in slices of :data:`REBUILD_SLICE` events between which the loop runs
        other work), then swapped in whole; a rebuild of a dataset already being rebuilt runs
        again after it."""
        did = DatasetId.parse(sub.did)
        if did in self._live:
            self._again.add(did)
            return
        self._live[did] = []
        try:
            await self._rebuild(sub, did)
        finally:
            self._live.pop(did, None)
        if did in self._again:
            self._again.discard(did)
            await self.configure(did)

    async def _rebuild(self, sub: Subscription, did: DatasetId) -> None:
        try:
            config = effective_config(self.default, sub.override)
        except TrustConfigError as e:  # [trust] changed under a stored override
            log.warning("subscription %s: %s; using the node's [trust]", sub.did, e)
            config = self.default
        policy = self._new_policy(config)
        if did not in self._policies:
            # Its config gates serving at once (served_head); filled in when the rebuild ends.
            self._policies[did] = self._new_policy(config)
        if sub.trusted_head is not None:
            self._trusted_head[did] = sub.trusted_head
        acc = await self._state.accepted_head(sub.did)
        if acc is None:
            self._install(did, policy)
            return
        head = Multihash.from_multibase(acc.head)
        self._latest[did] = head
        feed: list[TrustEvent] = []
        # The disputes of each block of the head's chain, never "the newest N of the dataset"
        # (strangers' disputes of random blocks pushed the trusted one out): every trusted
        # attester's (any key of theirs) and the first strangers' the policy would keep.
        trusted = self._trusted_keys(policy.config)
        feed += await self._chain_disputes(did, head, trusted, MAX_RECORDED_PER_HEAD, 0)
        conclusive = False  # whether the node's own check of the head was conclusive
        for a in await self._state.attestations_of_head(
            sub.did, acc.head, trusted, MAX_RECORDED_PER_HEAD
        ):
            verdict = _VERDICTS.get(a.verdict)
            if a.own:
                conclusive = conclusive or _conclusive(a)
                continue
            if verdict is None:
                continue
            signer = self._counted(DatasetId.parse(a.signer), _issued_at(a.envelope))
            if signer is not None:
                feed.append(AttestationSeen(did, head, signer, verdict, 0))
        # Fed as :meth:`local_verdict` fed it live: a stored ``verified`` may be a light node's
        # integrity check of a derivative, which proves nothing (taken for a replay, it trusted
        # a forged head once a redelivered dispute made the rebuilt state persist).
        ver = await self._state.verification(sub.did, acc.head)
        outcome = None if ver is None else _outcome(ver.outcome, conclusive=conclusive)
        if outcome is not None:
            feed.append(LocalVerdict(did, head, outcome, acc.accepted_ns, "local replay"))
        feed.append(HeadSeen(did, head, acc.accepted_ns))
        # Fed without carrying out Trusted or Distrusted again (no event, no republication);
        # replays are queued once the policy is in place.
        replays: list[Replay] = []
        for i, ev in enumerate(feed, 1):
            replays += [d for d in policy.handle(ev) if isinstance(d, Replay)]
            if i % REBUILD_SLICE == 0:
                await asyncio.sleep(0)
        # What arrived live meanwhile: carried out by the old policy already.
        for ev in self._live.get(did, []):
            policy.handle(ev)
        self._install(did, policy)
        for r in replays:
            await self._verify.queue(r.dataset, r.head, 0, replay=True)

    def _install(self, did: DatasetId, policy: TrustPolicy) -> None:
        """Swap a rebuilt policy in (no await between its last event and this)."""
        self._policies[did] = policy
        self._written.pop(did, None)

    # ----------------------------------------------------------------- events in

    async def head_accepted(self, did: DatasetId, head: Multihash, sequence: int) -> None:
        """The core accepted ``head``: start its trust clock and queue the node's own check
        (a replay when the policy asks for one, else integrity checks only)."""
        self._latest[did] = head
        policy = self._policy(did)
        if policy.config.policy is not Policy.VERIFY_ALL:
            # A head over a block a trusted attester disputed is disputed too, live as after a
            # restart (a colluding quorum trusted the forged head's successor until then).
            trusted = self._trusted_keys(policy.config)
            now = self._clock()
            for ev in await self._chain_disputes(did, head, trusted, 0, now):
                await self._feed(did, ev)
        replays = await self._feed(did, HeadSeen(did, head, self._clock()), sequence=sequence)
        if self.config_for(did).policy is not Policy.VERIFY_ALL:
            # The new head's state (pending, or what the policy decided) replaces the old one's.
            await self._record(self._policy(did), did, head)
        if not replays:
            await self._verify.queue(did, head, sequence, replay=False)

    async def local_verdict(
        self,
        did: DatasetId,
        head: Multihash,
        outcome: VerificationOutcome,
        *,
        conclusive: bool,
        evidence: str,
    ) -> None:
        """The node's own verification of ``head`` ended; ``conclusive``: it replayed the
        transform or the dataset is a root (an integrity check of a derivative proves only
        a failure)."""
        mapped = _outcome(outcome, conclusive=conclusive)
        if mapped is not None:
            await self._feed(did, LocalVerdict(did, head, mapped, self._clock(), evidence))

    async def _chain_disputes(
        self, did: DatasetId, head: Multihash, trusted: list[str], others: int, now_ns: int
    ) -> list[DisputeSeen]:
        """``head``'s disputes as stored: those of every block of its chain that others
        disputed, each block's read apart (all by ``trusted`` keys, the first ``others`` by
        anyone else), each under its signer's newest key unless revoked before it was issued."""
        out: list[DisputeSeen] = []
        for text in await self._state.disputed_blocks(did.as_did_str()):
            block = Multihash.from_multibase(text)
            if block != head and not self._contains_block(did, block):
                continue
            for x in await self._state.disputes_of_block(did.as_did_str(), text, trusted, others):
                signer = self._counted(DatasetId.parse(x.signer), _issued_at(x.envelope))
                if signer is not None:
                    out.append(DisputeSeen(did, head, signer, x.content_id, now_ns))
        return out

    def _trusted_keys(self, config: TrustConfig) -> list[str]:
        """Every key of every ``trusted_attesters`` node (its rotations' old and new keys), as
        the state stores signers; kept until the identities change (finding a node's keys
        walks every rotation the node knows, strangers' included)."""
        known = self._trusted_key_cache.get(config.trusted_attesters)
        if known is not None:
            return known
        keys: set[DatasetId] = set()
        for a in config.trusted_attesters:
            keys |= self.identities.aliases(a)
            keys.add(a)
        if len(self._trusted_key_cache) >= 64:  # one entry per distinct attester list
            self._trusted_key_cache.clear()
        out = self._trusted_key_cache[config.trusted_attesters] = sorted(_did_key(k) for k in keys)
        return out

    def _counted(self, signer: DatasetId, issued_at_ns: int | None) -> DatasetId | None:
        """The identity ``signer``'s message counts under (its newest key), or None when the
        key was revoked before the message was issued."""
        if not self.identities.counts(signer, issued_at_ns):
            return None
        return self.identities.canonical(signer)

    async def attestation(
        self,
        did: DatasetId,
        head: Multihash,
        attester: DatasetId,
        verdict: Verdict,
        issued_at_ns: int | None = None,
    ) -> None:
        """A signed attestation from a peer (signature checked by the core); counted under the
        attester's newest key, and not at all if the key was revoked before ``issued_at_ns``."""
        counted = self._counted(attester, issued_at_ns)
        if counted is None:
            log.info("attestation of %s by revoked key %s not counted", did, attester)
            return
        await self._feed(did, AttestationSeen(did, head, counted, verdict, self._clock()))

    async def dispute(
        self,
        did: DatasetId,
        block: Multihash,
        attester: DatasetId,
        evidence: str,
        issued_at_ns: int | None = None,
    ) -> None:
        """A signed dispute of ``block`` from a peer; ``evidence`` is its content id.

        A dispute of an older block of the stored chain disputes the newest accepted head too
        (it descends from the disputed block). Counted as :meth:`attestation` counts."""
        counted = self._counted(attester, issued_at_ns)
        if counted is None:
            log.info("dispute of %s by revoked key %s not counted", did, attester)
            return
        attester = counted
        now = self._clock()
        await self._feed(did, DisputeSeen(did, block, attester, evidence, now))
        latest = self._latest.get(did)
        if latest is not None and latest != block and self._contains_block(did, block):
            await self._feed(did, DisputeSeen(did, latest, attester, evidence, now))
        if latest is not None:
            # Shown even when it changes nothing: who disputed the head (trusted or not).
            await self._record(self._policy(did), did, latest)

    async def tick(self) -> None:
        """Time passed: heads pending longer than ``fallback_verify_s`` get replayed."""
        now = self._clock()
        for did, policy in list(self._policies.items()):
            await self._carry_out(did, policy, policy.handle(TrustTick(now)), 0)

    # ----------------------------------------------------------------- what trust changes

    def heads_tracked(self) -> int:
        """Heads the policies of every dataset remember (at most
        :data:`p2p.trust.HEADS_PER_DATASET` in each of a policy's three rooms)."""
        return sum(p.head_count() for p in self._policies.values())

    def served_head(self, did: DatasetId) -> str | None:
        """The head to serve of ``did``: None serves the stored head (verify-all, owned or
        unknown datasets); else its newest trusted head, ``""`` when none is trusted yet."""
        if did not in self._policies or not self.gates(did):
            return None
        return self._trusted_head.get(did, "")

    def may_republish(self, did: DatasetId, head: Multihash) -> bool:
        """Whether ``head`` may be republished to IPFS now: trust does not gate ``did``, or
        ``head`` is its newest trusted head."""
        served = self.served_head(did)
        return served is None or served == head.to_multibase()

    def untrusted_input(self, did: DatasetId) -> str | None:
        """Why ``did`` cannot be a derivative's input right now (its stored head is not
        trusted), or None."""
        served = self.served_head(did)
        if served is None:
            return None
        current = self._current_head(did)
        if current is None or current.to_multibase() == served:
            return None
        return (
            f"input {did.as_did_str()}: its head {current.to_multibase()} is not trusted yet "
            f"(policy {self.config_for(did).policy.value}; trusted head: {served or 'none'})"
        )

    # ----------------------------------------------------------------- decisions out

    async def _feed(self, did: DatasetId, ev: TrustEvent, *, sequence: int = 0) -> list[Replay]:
        policy = self._policy(did)
        live = self._live.get(did)
        if live is not None:  # being rebuilt: the new policy gets it too (:meth:`_restore`)
            live.append(ev)
        return await self._carry_out(did, policy, policy.handle(ev), sequence)

    async def _carry_out(
        self, did: DatasetId, policy: TrustPolicy, decisions: list[TrustDecision], sequence: int
    ) -> list[Replay]:
        effects = _Effects(self, did, policy, sequence)
        for d in decisions:
            await dispatch(d, effects)
        return effects.replays

    async def _record(self, policy: TrustPolicy, did: DatasetId, head: Multihash) -> bool:
        """Persist ``head``'s trust state when it is the newest accepted head."""
        if self._latest.get(did) not in (None, head):
            return False  # a superseded head: its state is not the subscription's
        st = policy.status(did, head)
        trusted = head.to_multibase() if st.state is TrustState.TRUSTED else None
        if trusted is not None:
            self._trusted_head[did] = trusted
        record = TrustRecord(
            head=head.to_multibase(),
            state=st.state.value,
            by=st.by.value if st.by is not None else None,
            attesters=tuple(_did_key(a) for a in st.attesters),
            evidence=st.evidence,
            disputed_by=tuple(_did_key(a) for a in st.disputed_by),
        )
        if self._written.get(did) == (record, trusted):
            return True  # e.g. a stranger's dispute past the shown ones: nothing to write
        await self._state.record_trust(did.as_did_str(), record, trusted)
        self._written[did] = (record, trusted)
        return True

    async def _trusted(self, policy: TrustPolicy, d: Trusted) -> None:
        attesters = [_did_key(a) for a in d.attesters]
        data = {"by": d.by.value, "attesters": attesters}
        if not await self._record_event(policy, d.dataset, d.head, "head.trusted", data):
            return
        # A head trusted by its own replay was republished with its attestation.
        current = self._current_head(d.dataset)
        quorum = d.by is TrustedBy.QUORUM and self.gates(d.dataset)
        if self._republish is not None and quorum and current == d.head:
            await self._republish(d.dataset, d.head)

    async def _distrusted(self, policy: TrustPolicy, d: Distrusted) -> None:
        disputer = _did_key(d.disputer) if d.disputer is not None else None
        data = {"state": d.state.value, "evidence": d.evidence, "disputer": disputer}
        await self._record_event(policy, d.dataset, d.head, "head.distrusted", data)

    async def _record_event(
        self,
        policy: TrustPolicy,
        dataset: DatasetId,
        head: Multihash,
        kind: str,
        data: JsonFields,
    ) -> bool:
        """:meth:`_record` ``head``'s state; when it is the newest accepted head, log and
        publish the event ``kind`` (its ``head`` and ``data``). Whether it was."""
        if not await self._record(policy, dataset, head):
            return False
        did, event = dataset.as_did_str(), {"head": head.to_multibase(), **data}
        await self._state.log_event(kind, did, event)
        self._events.publish(kind, {"did": did, **event})
        return True


def _issued_at(envelope: bytes) -> int | None:
    """The ``issued_at_ns`` a stored attestation or dispute envelope signs (None: unreadable)."""
    try:
        msg = decode_unverified(envelope)
    except WireDecodeError:
        return None
    return None if isinstance(msg, EquivocationProof) else msg.message.issued_at_ns


def _conclusive(own: AttestationRecord) -> bool:
    """Whether the node's own attestation says its check was conclusive, as
    :meth:`TrustDriver.local_verdict` is told by the verify pipeline: a replay (``REPLAY`` among
    its checks) or a root's integrity check (the only ``verified`` without a replay). With no
    own attestation stored (the node stopped before publishing it) only a failure is fed."""
    if own.verdict == Verdict.VERIFIED.name.lower():
        return True
    try:
        msg = decode_unverified(own.envelope)
    except WireDecodeError:
        return False
    if isinstance(msg, EquivocationProof) or not isinstance(msg.message, WireAttestation):
        return False
    return Checks.REPLAY in msg.message.checks


def _outcome(outcome: str, *, conclusive: bool) -> Outcome | None:
    """The policy's view of a verification outcome (None: it proves nothing either way)."""
    if outcome == "failed":
        return Outcome.FAILED
    if not conclusive:
        return None
    if outcome == "verified":
        return Outcome.VERIFIED
    if outcome in ("unverifiable", "nondeterministic", "inconclusive"):
        return Outcome.UNVERIFIABLE
    return None


__all__ = ["ReplayPort", "Republish", "TrustDriver", "effective_config", "keys_named"]


@dataclasses.dataclass(eq=False)
class _Effects:
    """The daemon's :class:`~p2p.trust_executor.TrustEffects` for one batch of a dataset's
    decisions (each an awaitable: state writes and verify work items)."""

    driver: TrustDriver
    did: DatasetId
    policy: TrustPolicy
    sequence: int
    replays: list[Replay] = dataclasses.field(init=False, default_factory=list)
    """The replays asked for (the caller reports them)."""

    async def replay(self, d: Replay) -> None:
        """Queue a replay work item and log why."""
        self.replays.append(d)
        drv = self.driver
        await drv._verify.queue(d.dataset, d.head, self.sequence, replay=True)
        await drv._state.log_event(
            "trust.replay",
            self.did.as_did_str(),
            {"head": d.head.to_multibase(), "reason": d.reason.value},
        )

    async def trusted(self, d: Trusted) -> None:
        """Record and announce a trusted head."""
        await self.driver._trusted(self.policy, d)

    async def distrusted(self, d: Distrusted) -> None:
        """Record and announce a disputed or unverifiable head."""
        await self.driver._distrusted(self.policy, d)
