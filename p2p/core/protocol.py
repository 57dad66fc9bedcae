"""The rules: :class:`ProtocolCore`, events in, decisions out (see :mod:`p2p.core`)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from coordinator.errors import SignatureError
from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from p2p.core.config import NS_PER_S, CoreConfig, Rng
from p2p.core.decisions import (
    AbandonFetch,
    Accept,
    Decision,
    DisconnectPeer,
    EmitEquivocationProof,
    Forward,
    HeadAccepted,
    Ignore,
    Penalise,
    PollSource,
    PublishAttestation,
    PublishDispute,
    RejectHead,
    RequestAntiEntropy,
    RequestFetch,
)
from p2p.core.events import (
    AntiEntropyReceived,
    Event,
    FetchCompleted,
    FetchFailed,
    MessageReceived,
    PeerConnected,
    PeerDisconnected,
    SourceHeadAccepted,
    Tick,
    VerificationCompleted,
)
from p2p.core.state import (
    DatasetState,
    Delayed,
    FetchState,
    KeyBuckets,
    PeerState,
    SeenCache,
    announcement_of,
    kept,
    order_of,
    supersede,
)
from p2p.errors import InvalidEquivocationProof, WireDecodeError
from p2p.wire import (
    EquivocationProof,
    HeadAnnouncement,
    KeyInception,
    KeyRevocation,
    KeyRotation,
    Observation,
    SignedMessage,
    WireMessage,
    content_id,
    decode_unverified,
    verify_equivocation_proof,
)


class ProtocolCore:
    """The gossip rules as a pure state machine; see the module docstring.

    Args:
        config: tunables.
        rng: injected randomness (anti-entropy peer choice and jitter).
        subscriptions: datasets whose announcements this node follows.
    """

    def __init__(
        self, config: CoreConfig, rng: Rng, subscriptions: Iterable[DatasetId] = ()
    ) -> None:
        self.config = config
        self._rng = rng
        self._seen = SeenCache(config.seen_ttl_ns, config.seen_capacity)
        self._peers: OrderedDict[str, PeerState] = OrderedDict()
        self._datasets: dict[DatasetId, DatasetState] = {}
        self._known_proofs: OrderedDict[bytes, None] = OrderedDict()
        self._signers: KeyBuckets[DatasetId] = KeyBuckets(config.max_signers)
        self._next_anti_entropy_ns: int | None = None
        self._backlog_bytes = 0
        for did in subscriptions:
            self.subscribe(did)

    # ---- public queries and state management

    def subscribe(self, did: DatasetId) -> None:
        """Follow ``did`` (idempotent)."""
        self._datasets.setdefault(did, DatasetState())

    def unsubscribe(self, did: DatasetId) -> None:
        """Stop following ``did`` and forget its state."""
        self._datasets.pop(did, None)

    def follow_source(self, did: DatasetId, source: str, head: Multihash | None = None) -> None:
        """Follow ``did`` from ``source`` as well (a URL subscription); ``head``: the newest head
        already accepted from it (after a restart)."""
        st = self._datasets.setdefault(did, DatasetState())
        if head is not None or source not in st.sources:
            st.sources[source] = head

    def unfollow_source(self, did: DatasetId, source: str) -> None:
        """Stop following ``did`` from ``source``."""
        st = self._datasets.get(did)
        if st is not None:
            st.sources.pop(source, None)

    def subscriptions(self) -> tuple[DatasetId, ...]:
        """The followed datasets."""
        return tuple(self._datasets)

    def accepted(self, did: DatasetId) -> SignedMessage | None:
        """The announcement of the accepted head of ``did``, if any."""
        st = self._datasets.get(did)
        return st.accepted if st else None

    def equivocation_proof(self, did: DatasetId) -> EquivocationProof | None:
        """The first equivocation proof known against ``did``, if any."""
        st = self._datasets.get(did)
        return st.proof if st else None

    def restore_accepted(self, envelope: bytes) -> None:
        """Reinstall a persisted accepted announcement after a restart (signature re-checked).

        Raises:
            WireDecodeError, SignatureError: the envelope is not a valid announcement.
        """
        sm = decode_unverified(envelope)
        if not isinstance(sm, SignedMessage) or not isinstance(sm.message, HeadAnnouncement):
            raise WireDecodeError("unexpected-kind", "not a head announcement")
        sm.verify()
        st = self._datasets.setdefault(sm.message.dataset, DatasetState())
        st.accepted = sm
        self._remember(st, sm)

    def latest_heads(self, datasets: Iterable[DatasetId] | None = None) -> list[bytes]:
        """Envelopes of accepted heads, to answer an anti-entropy request."""
        dids = self._datasets if datasets is None else datasets
        out: list[bytes] = []
        for did in dids:
            st = self._datasets.get(did)
            if st is not None and st.accepted is not None:
                out.append(st.accepted.envelope)
            if len(out) >= self.config.max_anti_entropy_entries:
                break
        return out

    def peer_score(self, peer: str, now_ns: int) -> float:
        """``peer``'s current (decayed) score; 0 for an unknown peer."""
        p = self._peers.get(peer)
        if p is None:
            return 0.0
        self._decay(p, now_ns)
        return p.score

    def move_peer_score(self, old: str, new: str, now_ns: int) -> float | None:
        """Carry ``old``'s score over to ``new`` (a node that rotated its key, whose libp2p
        peer id follows the key); the score moved, or None when ``old`` has none.

        A graylisted (negative) score moves too: a rotation does not launder a bad record. If
        ``new`` already has a score, the lower of the two is kept for the same reason.
        """
        p = self._peers.get(old)
        if p is None or old == new:
            return None
        self._decay(p, now_ns)
        score = p.score
        q = self._peer(new, now_ns)
        self._decay(q, now_ns)
        q.score = min(score, q.score) if q.score else score
        q.graylisted = q.graylisted or p.graylisted
        if not p.connected:
            self._backlog_bytes -= self._peers.pop(old).backlog_bytes
        else:
            p.score = 0.0
        return q.score

    def seen_count(self) -> int:
        """Entries in the seen-cache (for metrics and memory tests)."""
        return len(self._seen)

    def peer_count(self) -> int:
        """Peers with state (bounded by ``max_peers``)."""
        return len(self._peers)

    def signer_count(self) -> int:
        """Signing keys with a token bucket (bounded by ``max_signers``)."""
        return len(self._signers)

    def backlog_bytes(self) -> int:
        """Bytes of delayed messages waiting for their senders' tokens (for metrics)."""
        return self._backlog_bytes

    # ---- event dispatch

    def handle(self, event: Event) -> list[Decision]:
        """Apply one event and return the decisions for the driver, in order."""
        out: list[Decision] = []
        match event:
            case MessageReceived():
                self._on_message(event.peer, event.data, event.now_ns, out, via_ae=False)
            case AntiEntropyReceived():
                for data in event.envelopes[: self.config.max_anti_entropy_entries]:
                    self._on_message(event.peer, data, event.now_ns, out, via_ae=True)
            case FetchCompleted():
                self._on_fetch_done(event, out)
            case FetchFailed():
                self._on_fetch_failed(event.dataset, event.head, event.now_ns, out)
            case VerificationCompleted():
                st = self._datasets.get(event.dataset)
                if st is not None and (
                    (st.accepted is not None and announcement_of(st.accepted).head == event.head)
                    or event.head in st.sources.values()
                ):
                    if event.ok:
                        out.append(PublishAttestation(event.dataset, event.head))
                    else:
                        out.append(PublishDispute(event.dataset, event.head))
            case SourceHeadAccepted():
                st = self._datasets.get(event.dataset)
                if st is not None and event.source in st.sources:
                    st.sources[event.source] = event.head
            case PeerConnected():
                p = self._peer(event.peer, event.now_ns)
                p.connected = True
                if self._datasets and not p.graylisted:
                    out.append(RequestAntiEntropy(event.peer, tuple(self._datasets)))
            case PeerDisconnected():
                p = self._peer(event.peer, event.now_ns)
                p.connected = False
            case Tick():
                self._on_tick(event.now_ns, out)
        return out

    # ---- peers

    def _peer(self, peer: str, now_ns: int) -> PeerState:
        p = self._peers.get(peer)
        if p is None:
            p = PeerState(tokens=self.config.rate_burst, refilled_ns=now_ns, scored_ns=now_ns)
            self._peers[peer] = p
            self._evict_peers()
        else:
            self._peers.move_to_end(peer)
        return p

    def _evict_peers(self) -> None:
        while len(self._peers) > self.config.max_peers:
            victim = next((k for k, v in self._peers.items() if not v.connected), None)
            if victim is None:
                victim = next(iter(self._peers))
            self._backlog_bytes -= self._peers.pop(victim).backlog_bytes

    def _decay(self, p: PeerState, now_ns: int) -> None:
        dt = now_ns - p.scored_ns
        if dt > 0:
            p.score *= math.pow(0.5, dt / self.config.score_half_life_ns)
            p.scored_ns = now_ns
        if p.graylisted and p.score >= self.config.graylist_threshold / 2:
            p.graylisted = False

    def _take_token(self, p: PeerState, now_ns: int) -> bool:
        """A token from the peer's bucket (rule 2)."""
        return take_token(p, now_ns, self.config.rate_per_s, self.config.rate_burst)

    def _penalise(
        self, peer: str, p: PeerState, reason: str, amount: float, now_ns: int, out: list[Decision]
    ) -> None:
        self._decay(p, now_ns)
        p.score -= amount
        out.append(Penalise(peer, reason, amount))
        out.append(Ignore(peer, reason))
        if not p.graylisted and p.score < self.config.graylist_threshold:
            p.graylisted = True
            out.append(DisconnectPeer(peer, p.score))

    def _reward(self, p: PeerState, now_ns: int) -> None:
        self._decay(p, now_ns)
        p.score = min(self.config.score_cap, p.score + self.config.reward_first_delivery)

    # ---- messages

    def _on_message(
        self, peer: str, data: bytes, now_ns: int, out: list[Decision], *, via_ae: bool
    ) -> None:
        p = self._peer(peer, now_ns)
        self._decay(p, now_ns)
        if p.graylisted:
            out.append(Ignore(peer, "graylisted"))
            return
        if via_ae:
            self._process(peer, p, data, now_ns, now_ns, out, via_ae=True)
            return
        if not p.backlog and self._take_token(p, now_ns):
            self._process(peer, p, data, now_ns, now_ns, out, via_ae=False)
            return
        self._delay(peer, p, data, now_ns, out)
        self._drain(peer, p, now_ns, out)

    def _screen(
        self,
        peer: str,
        p: PeerState,
        data: bytes,
        now_ns: int,
        out: list[Decision],
        *,
        via_ae: bool = False,
    ) -> tuple[bytes, WireMessage] | None:
        """The first checks of every message, queued or processed, with their decisions: an
        oversized one is penalised (not even hashed); a known one is a duplicate, or penalised
        again if it was bad, or (``via_ae``) compared as anti-entropy; a malformed one is
        remembered as bad and penalised. None after any of them; else the message's content id
        and the message, parsed without its signatures."""
        cfg = self.config
        if len(data) > cfg.max_message_size:
            self._penalise(peer, p, "oversized", cfg.penalty_oversized, now_ns, out)
            return None
        cid = content_id(data)
        seen, bad = self._seen.get(cid, now_ns)
        if seen:
            if bad is not None:
                self._penalise(peer, p, bad, self._penalty_for(bad), now_ns, out)
            elif via_ae:
                self._on_known_via_ae(peer, p, data, now_ns, out)
            else:
                out.append(Ignore(peer, "duplicate"))
            return None
        try:
            return cid, decode_unverified(data)
        except WireDecodeError as e:
            reason = "oversized" if e.reason == "oversized" else f"malformed:{e.reason}"
            self._seen.add(cid, now_ns, reason)
            self._penalise(peer, p, reason, self._penalty_for(reason), now_ns, out)
            return None

    def _delay(
        self, peer: str, p: PeerState, data: bytes, now_ns: int, out: list[Decision]
    ) -> None:
        """Park a message that found the sender's bucket empty (only cheap checks run here)."""
        cfg = self.config
        screened = self._screen(peer, p, data, now_ns, out)
        if screened is None:
            return
        cid, msg = screened
        key, order = cid, (0, 0)
        if isinstance(msg, SignedMessage) and isinstance(msg.message, HeadAnnouncement):
            a = msg.message
            if a.dataset not in self._datasets:
                out.append(Ignore(peer, "not-subscribed"))
                return
            # Unverified until processed: a forged "newer" head only displaces messages of the
            # peer that sent it, and costs that peer its penalty when its turn comes.
            key, order = b"ds:" + a.dataset.to_bytes(), (a.epoch, a.sequence)
        old = p.backlog.get(key)
        if old is not None:
            if order <= old.order:
                out.append(Ignore(peer, "superseded"))
                return
            self._unqueue(p, key)
            out.append(Ignore(peer, "superseded"))  # the displaced, older head of this dataset
        if p.backlog_bytes + len(data) > cfg.backlog_bytes_per_peer:
            self._penalise(peer, p, "rate-limited", cfg.penalty_flood, now_ns, out)
            return
        if self._backlog_bytes + len(data) > cfg.backlog_bytes_total:
            out.append(Ignore(peer, "backlog-full"))
            return
        p.backlog[key] = Delayed(data, now_ns, order)
        p.backlog_bytes += len(data)
        self._backlog_bytes += len(data)
        out.append(Ignore(peer, "delayed"))

    def _unqueue(self, p: PeerState, key: bytes) -> Delayed:
        d = p.backlog.pop(key)
        p.backlog_bytes -= len(d.data)
        self._backlog_bytes -= len(d.data)
        return d

    def _drain(self, peer: str, p: PeerState, now_ns: int, out: list[Decision]) -> None:
        """Process delayed messages of ``peer`` in arrival order while it has tokens."""
        while p.backlog and not p.graylisted and self._take_token(p, now_ns):
            d = self._unqueue(p, next(iter(p.backlog)))
            self._process(peer, p, d.data, d.received_ns, now_ns, out, via_ae=False)

    def _process(
        self,
        peer: str,
        p: PeerState,
        data: bytes,
        received_ns: int,
        now_ns: int,
        out: list[Decision],
        *,
        via_ae: bool,
    ) -> None:
        """Rules 2-5 for one message the sender had a token for (or from anti-entropy)."""
        cfg = self.config
        screened = self._screen(peer, p, data, now_ns, out, via_ae=via_ae)
        if screened is None:
            return
        cid, msg = screened
        if isinstance(msg, EquivocationProof):
            self._on_proof(peer, p, msg, now_ns, out, via_ae=via_ae)
            return
        try:
            msg.verify()
        except SignatureError:
            self._seen.add(cid, now_ns, "bad-signature")
            self._penalise(peer, p, "bad-signature", cfg.penalty_bad_signature, now_ns, out)
            return
        issued = msg.message.issued_at_ns
        if issued > now_ns + cfg.max_clock_skew_ns:
            # Not remembered: the same bytes may become acceptable once the clocks agree.
            self._penalise(peer, p, "future-timestamp", cfg.penalty_future, now_ns, out)
            return
        self._seen.add(cid, now_ns)
        # A delayed message is judged by when it arrived, not by how long it waited here.
        # Key records stay true for ever (republished at every start of their node).
        if (
            not via_ae
            and not isinstance(msg.message, KeyRotation | KeyRevocation | KeyInception)
            and issued < received_ns - cfg.max_message_age_ns
        ):
            out.append(Ignore(peer, "expired"))
            return
        if isinstance(msg.message, HeadAnnouncement):
            self._on_announcement(peer, p, msg, now_ns, out, via_ae=via_ae)
        elif not self._take_signer_token(_budget_key(msg), now_ns):
            # Rule 4a: the signing key spent its budget, whichever peers brought its messages.
            # Neither stored nor forwarded; the peer is not blamed (it may only relay).
            out.append(Ignore(peer, "signer-rate-limited"))
        else:
            self._reward(p, now_ns)
            out.append(Accept(peer, msg, via_ae))
            if not via_ae:
                out.append(Forward(msg.content_id, msg.envelope, peer))
            if isinstance(msg.message, Observation):
                self._on_observation(peer, msg.message, out)

    def _take_signer_token(self, signer: DatasetId, now_ns: int) -> bool:
        """A token from ``signer``'s bucket (created full; the least recently used of
        ``max_signers`` forgotten: a forgotten key starts full again, as a fresh key would)."""
        cfg = self.config
        b = self._signers.bucket(signer, now_ns, cfg.signer_rate_burst)
        return take_token(b, now_ns, cfg.signer_rate_per_s, cfg.signer_rate_burst)

    def _on_observation(self, peer: str, o: Observation, out: list[Decision]) -> None:
        """Rule 8: a peer saw a source we follow show another head: poll it now."""
        st = self._datasets.get(o.dataset)
        if st is None or o.source not in st.sources:
            return
        if st.sources[o.source] != o.head:
            out.append(PollSource(o.dataset, o.source, o.head, peer))

    def _on_known_via_ae(
        self, peer: str, p: PeerState, data: bytes, now_ns: int, out: list[Decision]
    ) -> None:
        """An anti-entropy reply repeats a message already checked: repair a stalled dataset.

        The bytes passed every check before (the seen-cache holds no bad reason for them), so
        only the core's own history is consulted: if they are the newest known announcement of an
        idle dataset and newer than its accepted head, its fetch starts again now rather than
        at the next backoff step. If the dataset's history does not know them at all, they
        arrived while this node did not follow the dataset (ignored then as not subscribed) and
        it follows it since: they are judged now as the announcement they are (without this a
        dataset followed again stayed behind until the seen-cache forgot the owner's newest
        announcement or the owner announced again; found by ``make bench-longrun``).
        """
        msg = decode_unverified(data)
        if isinstance(msg, SignedMessage) and isinstance(msg.message, HeadAnnouncement):
            a = msg.message
            st = self._datasets.get(a.dataset)
            if st is not None and st.inflight is None and st.queued is None:
                known_env = st.history.get((a.epoch, a.sequence))
                if known_env is None and a.head.digest not in st.rejected:
                    self._on_announcement(peer, p, msg, now_ns, out, via_ae=True)
                    return
                newest = next(reversed(st.history.values()), None) if st.history else None
                known = kept(known_env) if known_env is not None else None
                if (
                    known is not None
                    and known_env == newest
                    and known.message == a
                    and (st.accepted is None or order_of(known) > order_of(st.accepted))
                    and a.head.digest not in st.rejected
                ):
                    self._start_fetch(st, known, now_ns, out)
                    return
        out.append(Ignore(peer, "duplicate"))

    def _penalty_for(self, reason: str) -> float:
        cfg = self.config
        if reason == "bad-signature":
            return cfg.penalty_bad_signature
        if reason == "invalid-proof":
            return cfg.penalty_invalid_proof
        if reason == "oversized":
            return cfg.penalty_oversized
        return cfg.penalty_malformed

    def _on_proof(
        self,
        peer: str,
        p: PeerState,
        proof: EquivocationProof,
        now_ns: int,
        out: list[Decision],
        *,
        via_ae: bool,
    ) -> None:
        try:
            did = verify_equivocation_proof(proof)
        except InvalidEquivocationProof:
            self._seen.add(proof.content_id, now_ns, "invalid-proof")
            self._penalise(peer, p, "invalid-proof", self.config.penalty_invalid_proof, now_ns, out)
            return
        self._seen.add(proof.content_id, now_ns)
        if proof.content_id in self._known_proofs:
            out.append(Ignore(peer, "duplicate"))
            return
        self._known_proofs[proof.content_id] = None
        while len(self._known_proofs) > self.config.max_known_proofs:
            self._known_proofs.popitem(last=False)
        st = self._datasets.get(did)
        if st is not None:
            st.proved_slots[order_of(proof.first)] = None
            if st.proof is None:
                st.proof = proof
        self._reward(p, now_ns)
        out.append(Accept(peer, proof, via_ae))
        if not via_ae:
            out.append(Forward(proof.content_id, proof.envelope, peer))

    def _remember(self, st: DatasetState, sm: SignedMessage) -> None:
        key = order_of(sm)
        st.history.setdefault(key, sm.envelope)
        st.history.move_to_end(key)
        while len(st.history) > self.config.history_per_dataset:
            st.history.popitem(last=False)

    def _equivocation(
        self,
        did: DatasetId,
        st: DatasetState,
        a: SignedMessage,
        b: SignedMessage,
        out: list[Decision],
    ) -> None:
        slot = order_of(a)
        if slot in st.proved_slots:
            return  # one proof per (epoch, sequence) is enough; re-signed copies add nothing
        st.proved_slots[slot] = None
        while len(st.proved_slots) > self.config.history_per_dataset:
            st.proved_slots.popitem(last=False)
        proof = EquivocationProof.make(a, b)
        if proof.content_id in self._known_proofs:
            return
        self._known_proofs[proof.content_id] = None
        if st.proof is None:
            st.proof = proof
        out.append(EmitEquivocationProof(did, proof))

    def _on_announcement(
        self,
        peer: str,
        p: PeerState,
        sm: SignedMessage,
        now_ns: int,
        out: list[Decision],
        *,
        via_ae: bool,
    ) -> None:
        a = announcement_of(sm)
        st = self._datasets.get(a.dataset)
        if st is None:
            out.append(Ignore(peer, "not-subscribed"))
            return
        key = (a.epoch, a.sequence)
        prior_env = st.history.get(key)
        prior = kept(prior_env) if prior_env is not None else None
        if prior is not None and announcement_of(prior).head != a.head:
            self._equivocation(a.dataset, st, prior, sm, out)
            out.append(Ignore(peer, "equivocation"))
            return
        if a.head.digest in st.rejected:
            out.append(Ignore(peer, "rejected-head"))
            return
        if st.accepted is not None:
            acc = announcement_of(st.accepted)
            if a.epoch < acc.epoch:
                out.append(Ignore(peer, "stale-epoch"))
                return
            if a.epoch == acc.epoch and a.sequence < acc.sequence:
                out.append(Ignore(peer, "stale-sequence"))
                return
            if a.epoch == acc.epoch and a.sequence == acc.sequence:
                # Same slot, same head (the different-head case was caught as a fork above).
                out.append(Ignore(peer, "already-accepted"))
                return
        if prior is not None:
            # A re-announcement (new nonce) of a head we already know: retry only if idle.
            # Its outcome: "already-pending" while that head still waits for a fetch (whose
            # outcome is the first message's); else the outcome of the fetch it restarts.
            if st.inflight is not None or st.queued is not None:
                out.append(Ignore(peer, "already-pending"))
            elif st.retry is not None and order_of(st.retry) > order_of(prior):
                out.append(Ignore(peer, "superseded"))  # a newer head waits for its retry
            else:
                if st.retry is not None and st.retry.envelope == prior.envelope:
                    out.append(Ignore(peer, "already-pending"))
                self._start_fetch(st, prior, now_ns, out)
            return
        self._remember(st, sm)
        self._reward(p, now_ns)
        out.append(Accept(peer, sm, via_ae))
        if not via_ae:
            out.append(Forward(sm.content_id, sm.envelope, peer))
        if st.inflight is None:
            if st.retry is not None and order_of(st.retry) > order_of(sm):
                supersede(out)  # a newer head waits for its retry; this one is not fetched
            else:
                self._start_fetch(st, sm, now_ns, out)
        elif order_of(sm) > order_of(st.inflight.announcement) and (
            st.queued is None or order_of(sm) > order_of(st.queued)
        ):
            if st.queued is not None:
                supersede(out)
            st.queued = sm
        else:
            supersede(out)  # a newer head of this dataset is already being fetched or queued

    # ---- fetching

    def _start_fetch(
        self, st: DatasetState, sm: SignedMessage, now_ns: int, out: list[Decision]
    ) -> None:
        a = announcement_of(sm)
        base: Multihash | None = None
        if st.accepted is not None and announcement_of(st.accepted).epoch == a.epoch:
            base = announcement_of(st.accepted).head
        st.inflight = FetchState(sm, now_ns)
        if st.retry is not None and order_of(st.retry) < order_of(sm):
            st.retry, st.attempts = None, 0
            supersede(out)
        elif st.retry is not None and st.retry.envelope == sm.envelope:
            # The same announcement (the history keeps envelopes: a copy decoded again).
            st.retry = None
        out.append(RequestFetch(a.dataset, a.head, a.sequence, a.epoch, base, a.locations))

    def _start_next(self, st: DatasetState, now_ns: int, out: list[Decision]) -> None:
        nxt, st.queued = st.queued, None
        if nxt is None:
            return
        if st.accepted is not None and order_of(nxt) <= order_of(st.accepted):
            supersede(out)
            return
        self._start_fetch(st, nxt, now_ns, out)

    def _on_fetch_done(self, ev: FetchCompleted, out: list[Decision]) -> None:
        st = self._datasets.get(ev.dataset)
        if st is None:
            out.append(Ignore("", "unexpected-fetch"))
            return
        if st.inflight is None or announcement_of(st.inflight.announcement).head != ev.head:
            self._on_late_fetch(st, ev, out)
            return
        sm = st.inflight.announcement
        st.inflight = None
        a = announcement_of(sm)
        st.attempts = 0
        if ev.ancestry_ok:
            st.accepted = sm
            out.append(HeadAccepted(a.dataset, a.head, a.sequence, a.epoch, sm))
        else:
            st.rejected[a.head.digest] = None
            while len(st.rejected) > self.config.history_per_dataset:
                st.rejected.popitem(last=False)
            out.append(RejectHead(a.dataset, a.head, "not-descendant", sm))
        self._start_next(st, ev.now_ns, out)

    def _on_late_fetch(self, st: DatasetState, ev: FetchCompleted, out: list[Decision]) -> None:
        """A fetch completed after the core abandoned it (its commit could not be undone).

        The driver's store now holds the chain, so a valid late chain that is still newer than
        the accepted head is accepted: a head must never be committed but left unaccepted.
        """
        late = next(
            (
                sm
                for sm in map(kept, reversed(st.history.values()))
                if announcement_of(sm).head == ev.head
            ),
            None,
        )
        if late is None or not ev.ancestry_ok:
            out.append(Ignore("", "unexpected-fetch"))
            return
        if st.accepted is not None and order_of(late) <= order_of(st.accepted):
            out.append(Ignore("", "unexpected-fetch"))
            return
        a = announcement_of(late)
        if st.accepted is not None and announcement_of(st.accepted).epoch != a.epoch:
            # Ancestry was checked against the base of the fetch's own request; an epoch change
            # since then means that base is no longer the accepted head.
            out.append(Ignore("", "unexpected-fetch"))
            return
        st.accepted = late
        out.append(HeadAccepted(a.dataset, a.head, a.sequence, a.epoch, late))

    def _on_fetch_failed(
        self, did: DatasetId, head: Multihash, now_ns: int, out: list[Decision]
    ) -> None:
        st = self._datasets.get(did)
        if (
            st is None
            or st.inflight is None
            or announcement_of(st.inflight.announcement).head != head
        ):
            out.append(Ignore("", "unexpected-fetch"))
            return
        sm = st.inflight.announcement
        st.inflight = None
        self._retry_later(st, sm, now_ns, out)
        self._start_next(st, now_ns, out)

    def _retry_later(
        self, st: DatasetState, sm: SignedMessage, now_ns: int, out: list[Decision]
    ) -> None:
        """Schedule another fetch of ``sm`` unless something newer is already queued.

        Backoff doubles from ``fetch_retry_base_ns`` up to ``fetch_retry_max_ns`` with jitter
        in [0.5, 1.5), and never gives up: the head stays the newest the node knows, and an
        announcement or anti-entropy reply of anything newer replaces it.
        """
        if st.queued is not None or (st.retry is not None and order_of(st.retry) > order_of(sm)):
            supersede(out)
            return
        if st.retry is not None and st.retry.envelope != sm.envelope:
            supersede(out)  # the older head waiting for its retry
        cfg = self.config
        st.attempts += 1
        delay = min(cfg.fetch_retry_max_ns, cfg.fetch_retry_base_ns << min(st.attempts - 1, 32))
        st.retry = sm
        st.retry_at_ns = now_ns + int(delay * (0.5 + self._rng.random()))

    # ---- timers

    def _on_tick(self, now_ns: int, out: list[Decision]) -> None:
        cfg = self.config
        self._seen.expire(now_ns)
        for st in self._datasets.values():
            f = st.inflight
            if f is not None and now_ns - f.started_ns >= cfg.fetch_timeout_ns:
                a = announcement_of(f.announcement)
                st.inflight = None
                out.append(AbandonFetch(a.dataset, a.head, "timeout"))
                self._retry_later(st, f.announcement, now_ns, out)
                self._start_next(st, now_ns, out)
            if (
                st.retry is not None
                and st.inflight is None
                and st.queued is None
                and now_ns >= st.retry_at_ns
            ):
                retry, st.retry = st.retry, None
                if st.accepted is None or order_of(retry) > order_of(st.accepted):
                    self._start_fetch(st, retry, now_ns, out)
                else:
                    supersede(out)
        for peer, p in list(self._peers.items()):
            if p.backlog:
                self._decay(p, now_ns)
                self._drain(peer, p, now_ns, out)
        if self._next_anti_entropy_ns is None:
            self._next_anti_entropy_ns = now_ns + self._jitter()
        elif now_ns >= self._next_anti_entropy_ns:
            self._next_anti_entropy_ns = now_ns + self._jitter()
            peers = [k for k, v in self._peers.items() if v.connected and not v.graylisted]
            if peers and self._datasets:
                peer = peers[min(len(peers) - 1, int(self._rng.random() * len(peers)))]
                out.append(RequestAntiEntropy(peer, tuple(self._datasets)))

    def _jitter(self) -> int:
        return int(self.config.anti_entropy_interval_ns * (0.5 + self._rng.random()))


class TokenBucket(Protocol):
    """A token bucket: a peer's (rule 2), a signing key's (rule 4a), a DHT sender's
    (``p2p/dht_service.py``)."""

    tokens: float
    refilled_ns: int


def take_token(b: TokenBucket, now_ns: int, rate_per_s: float, burst: float) -> bool:
    """A token from ``b``, refilled first at ``rate_per_s`` up to ``burst`` (a clock that steps
    back refills nothing)."""
    dt = max(0, now_ns - b.refilled_ns)
    b.tokens = min(burst, b.tokens + dt * rate_per_s / NS_PER_S)
    b.refilled_ns = max(b.refilled_ns, now_ns)
    if b.tokens >= 1.0:
        b.tokens -= 1.0
        return True
    return False


def _budget_key(sm: SignedMessage) -> DatasetId:
    """The key whose forwarding budget ``sm`` spends: its signer, but a rotation's old key
    (each rotation is signed by a new key, which costs nothing to make; the old one is the
    identity that rotates)."""
    msg = sm.message
    return msg.old if isinstance(msg, KeyRotation) else sm.signer()
