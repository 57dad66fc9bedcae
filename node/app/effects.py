"""The node's part of each protocol-core decision (after the gossip service's network part).

:class:`NodeEffects` implements :class:`p2p.executor.DecisionEffects`: it stores what the core
accepted (attestations, disputes, equivocation proofs, accepted heads), queues verification of
accepted heads and disputes of rejected ones and counts every outcome in the metrics.
``PublishAttestation`` / ``PublishDispute`` are carried out by the verify pipeline, which
receives them as the verdict of the verification it reported.
Effects are synchronous (the executor calls them inline); their state writes run as tasks on the
node's task group, in order, so a burst of decisions never blocks the loop.

Strangers' evidence is stored within :class:`~node.app.rows.EvidenceCaps` (``[storage]``,
issue 39: 20,000 disputes from one key took 28.4 MB): an attestation or dispute signed by a
trusted attester of its dataset's policy (any key of its rotation chain the node knows) is stored
as kept, never evicted nor counted; everyone else's are held to the caps per signer, per dataset
and in total, the oldest evicted first.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from coordinator.identity import DatasetId
from node.app.follow import SourceFollower
from node.app.keys import NodeKeyRecords
from node.app.metrics import NodeMetrics
from node.app.ports import EventSink, StatePort
from node.app.rows import EvidenceCaps
from node.app.trust import TrustDriver
from node.app.verify import Spawn, VerifyPipeline
from p2p import core
from p2p.wire import (
    Attestation,
    Dispute,
    EquivocationProof,
    HeadAnnouncement,
    KeyInception,
    KeyRevocation,
    KeyRotation,
    Observation,
    SignedMessage,
    content_id,
)

log = logging.getLogger("odf_node.effects")


@functools.lru_cache(maxsize=4096)
def _did_key(node: DatasetId) -> str:
    """``node``'s did:key text (cached: the trusted attesters' are encoded per message)."""
    return node.as_did_key()


class NodeEffects:
    """See the module docstring."""

    def __init__(
        self,
        state: StatePort,
        verify: VerifyPipeline,
        events: EventSink,
        metrics: NodeMetrics,
        spawn: Spawn,
        owns: Callable[[Any], bool],
        kick: Callable[[], None],
        trust: TrustDriver | None = None,
        keys: NodeKeyRecords | None = None,
        caps: EvidenceCaps | None = None,
        witness: SourceFollower | None = None,
    ) -> None:
        self._state = state
        self._caps = caps if caps is not None else EvidenceCaps()  # bounded unless told how
        self._trust = trust
        self._keys = keys
        self._verify = verify
        self._events = events
        self._metrics = metrics
        self._spawn = spawn
        self._owns = owns
        self._kick = kick
        self.witness = witness
        """Told of peers' observations and asked to poll (the source follower)."""
        # State writes of decisions run one after another, in decision order.
        self._queue: asyncio.Queue[Callable[[], Awaitable[None]]] | None = None

    def _later(self, write: Callable[[], Awaitable[None]]) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._spawn(self._drain(self._queue))
        self._queue.put_nowait(write)

    async def _drain(self, queue: asyncio.Queue[Callable[[], Awaitable[None]]]) -> None:
        while True:
            write = await queue.get()
            try:
                await write()
            except Exception:  # one failed write must not stop the ones after it
                log.exception("storing a gossip decision failed")
            finally:
                queue.task_done()

    async def flush(self) -> None:
        """Wait until every queued write is done, the one running included (tests, shutdown)."""
        if self._queue is not None:
            await self._queue.join()

    # ---- DecisionEffects

    def accepted(self, d: core.Accept) -> None:
        """Store accepted attestations, disputes and proofs (announcements wait for a fetch)."""
        msg = d.message
        if isinstance(msg, EquivocationProof):
            self._store_proof(msg)
            return
        inner = msg.message
        if isinstance(inner, HeadAnnouncement):
            self._metrics.announcements.labels("candidate", "").inc()
            if d.via_anti_entropy:
                # Gossip never brought this head (a partition, a restart, a dropped message):
                # worth an event, since it shows anti-entropy doing its repair job.
                self._metrics.anti_entropy_repairs.inc()
                did, head = inner.dataset.as_did_str(), inner.head.to_multibase()
                data = {"head": head, "sequence": inner.sequence, "peer": d.peer}
                self._later(lambda: self._log("head.repaired", did, data))
        elif isinstance(inner, Attestation):
            self._metrics.announcements.labels("attestation", "").inc()
            self._later(lambda: self._store_attestation(msg, inner))
        elif isinstance(inner, Dispute):
            self._metrics.announcements.labels("dispute", "").inc()
            self._later(lambda: self._store_dispute(msg, inner))
        elif isinstance(inner, Observation):
            self._metrics.announcements.labels("observation", "").inc()
            witness = self.witness
            if witness is not None:
                # Bounded like strangers' evidence: a flood of observations from fresh keys
                # evicts the oldest strangers' ones, never a trusted attester's or our own.
                trusted = self._trusted(inner.dataset, inner.node)
                self._later(lambda: witness.observed(msg, inner, trusted=trusted, caps=self._caps))
        elif isinstance(inner, KeyRotation | KeyRevocation | KeyInception):
            self._metrics.announcements.labels("key_record", "").inc()
            keys = self._keys
            if keys is not None:

                async def store() -> None:
                    await keys.received(msg)

                self._later(store)

    def _trusted(self, dataset: DatasetId, signer: DatasetId) -> tuple[str, ...]:
        """The keys whose evidence of ``dataset`` the state keeps: each trusted attester's key
        as configured and its newest, and ``signer`` when it is a key of one of them. The
        canonical key, not every alias: the signer's chain is walked, not every rotation the
        node knows (a stranger can add thousands)."""
        trust = self._trust
        if trust is None:
            return ()
        ids = trust.identities
        attesters = trust.config_for(dataset).trusted_attesters
        roots = {ids.canonical(a) for a in attesters}
        keys = {*attesters, *roots}
        if ids.canonical(signer) in roots:
            keys.add(signer)
        return tuple(sorted(_did_key(k) for k in keys))

    async def keep_trusted(self, datasets: Iterable[DatasetId]) -> None:
        """Mark the stored evidence of ``datasets`` by every key of their trusted attesters
        kept (at start-up, and when a dataset's trust policy changes): a key trusted since its
        evidence was stored is otherwise marked only when evidence of the same dataset next
        arrives, and another dataset's flood could evict it before. Each attester's keys are
        found once per call (finding them walks every rotation the node knows)."""
        trust = self._trust
        if trust is None:
            return
        ids = trust.identities
        keys: dict[DatasetId, set[str]] = {}
        for did in datasets:
            signers: set[str] = set()
            for a in trust.config_for(did).trusted_attesters:
                if a not in keys:
                    keys[a] = {_did_key(k) for k in {a, *ids.aliases(a)}}
                signers |= keys[a]
            if signers:
                await self._state.keep_evidence(did.as_did_str(), sorted(signers))

    async def _store_attestation(self, sm: SignedMessage, a: Attestation) -> None:
        did, head = a.dataset.as_did_str(), a.head.to_multibase()
        await self._state.add_attestation(
            did,
            head,
            a.verdict.name.lower(),
            _did_key(a.node),
            sm.envelope,
            False,
            trusted=self._trusted(a.dataset, a.node),
            caps=self._caps,
        )
        self._events.publish("attestation", {"did": did, "head": head, "own": False})
        if self._trust is not None and not self._owns(a.dataset):
            await self._trust.attestation(a.dataset, a.head, a.node, a.verdict, a.issued_at_ns)

    async def _store_dispute(self, sm: SignedMessage, x: Dispute) -> None:
        did, block = x.dataset.as_did_str(), x.block.to_multibase()
        await self._state.add_dispute(
            did,
            block,
            x.kind.name.lower(),
            _did_key(x.node),
            sm.envelope,
            False,
            x.detail,
            trusted=self._trusted(x.dataset, x.node),
            caps=self._caps,
        )
        self._events.publish("dispute", {"did": did, "block": block, "own": False})
        if self._trust is not None and not self._owns(x.dataset):
            evidence = "f1620" + content_id(sm.envelope).hex()  # as the state stores it
            await self._trust.dispute(x.dataset, x.block, x.node, evidence, x.issued_at_ns)

    def _store_proof(self, proof: EquivocationProof) -> None:
        async def write() -> None:
            did = proof.dataset.as_did_str()
            if await self._state.add_equivocation_proof(did, proof.envelope):
                await self._state.log_event("equivocation", did, {})
                self._events.publish("equivocation", {"did": did})

        self._later(write)

    def ignored(self, d: core.Ignore) -> None:
        """Counted by reason."""
        self._metrics.announcements.labels("ignored", d.reason).inc()

    def penalised(self, d: core.Penalise) -> None:
        """Counted by reason."""
        self._metrics.announcements.labels("penalised", d.reason).inc()

    def forward(self, d: core.Forward) -> None:
        """Nothing for the node: gossipsub forwards."""

    def fetch(self, d: core.RequestFetch) -> None:
        """Nothing for the node: the gossip service runs the fetcher."""

    def abandon_fetch(self, d: core.AbandonFetch) -> None:
        """The service cancelled the pull; recorded for operators."""
        self._metrics.pulls.labels("abandoned").inc()
        did, head = d.dataset.as_did_str(), d.head.to_multibase()
        self._later(lambda: self._log("pull.abandoned", did, {"head": head, "reason": d.reason}))

    async def _log(self, kind: str, did: str | None, data: dict[str, Any]) -> None:
        await self._state.log_event(kind, did, data)

    def head_accepted(self, d: core.HeadAccepted) -> None:
        """Persist the accepted head, then verify it (unless this node owns the dataset)."""
        self._metrics.announcements.labels("accepted", "").inc()

        async def write() -> None:
            did, head = d.dataset.as_did_str(), d.head.to_multibase()
            stored = await self._state.record_accepted_head(
                did, d.epoch, d.sequence, head, "", d.announcement.envelope
            )
            if not stored:
                return
            await self._state.log_event(
                "head.accepted", did, {"head": head, "sequence": d.sequence}
            )
            self._events.publish(
                "head.accepted", {"did": did, "head": head, "sequence": d.sequence}
            )
            if self._owns(d.dataset):
                return
            if self._trust is not None:
                # The policy decides: a replay, or integrity checks only while a quorum forms.
                await self._trust.head_accepted(d.dataset, d.head, d.sequence)
            else:
                await self._verify.queue(d.dataset, d.head, d.sequence)

        self._later(write)

    def head_rejected(self, d: core.RejectHead) -> None:
        """Record it and queue a signed integrity dispute."""
        self._metrics.announcements.labels("rejected", d.reason).inc()

        async def write() -> None:
            did, head = d.dataset.as_did_str(), d.head.to_multibase()
            await self._state.log_event("head.rejected", did, {"head": head, "reason": d.reason})
            await self._state.enqueue(
                "dispute",
                did,
                head,
                {"kind": "integrity", "detail": f"head is {d.reason} of the accepted head"},
            )
            self._kick()

        self._later(write)

    def equivocation(self, d: core.EmitEquivocationProof) -> None:
        """Store the proof the core built (the service publishes it)."""
        self._store_proof(d.proof)

    def anti_entropy(self, d: core.RequestAntiEntropy) -> None:
        """Nothing for the node: the service asks the peer."""

    def disconnect(self, d: core.DisconnectPeer) -> None:
        """Log the graylisting."""
        self._later(lambda: self._log("peer.graylisted", None, {"peer": d.peer, "score": d.score}))

    def attest(self, d: core.PublishAttestation) -> None:
        """Nothing here: the verify pipeline that reported the verification receives this
        verdict from :meth:`~node.app.ports.GossipPort.verification_completed` and signs and
        publishes it with the report it holds."""

    def dispute(self, d: core.PublishDispute) -> None:
        """Nothing here, as for :meth:`attest`: the verify pipeline publishes the dispute."""

    def poll_source(self, d: core.PollSource) -> None:
        """A peer observed a source we follow showing another head: poll it now."""
        if self.witness is not None:
            self.witness.poll_now(d.dataset, d.source)


__all__ = ["NodeEffects"]
