"""The subscriber pipeline after a head is accepted: verify, then attest or dispute.

``HeadAccepted`` (from the protocol core) -> :meth:`VerifyPipeline.queue` -> work "verify" ->
integrity, then replay of every transform on the engine -> the outcome is recorded and
reported to the core as ``VerificationCompleted`` -> the core decides (``PublishAttestation`` /
``PublishDispute``, or nothing when the head is no longer the accepted one), and the port
returns that verdict -> the pipeline signs and publishes what it says, with the report it
holds — the same decision the simulator measures, with no table of verifications waiting for
a decision. The work item finishes only after the attestation or dispute is stored and
published, so a crash before that re-runs the verification.

Outcomes: ``verified``; ``failed`` (evidence -> dispute); ``nondeterministic`` (a mismatch of a
query that is not deterministic: no conclusion, attested as unverifiable); ``inconclusive`` (a
DataFusion derivative that no pinned DataFusion release reproduced while its query is
version-sensitive: "inconclusive: engine version unknown", attested as unverifiable, never a
dispute); ``unverifiable`` (a derivative whose engine this node cannot run, kamu's ``flink``
or ``risingwave``: integrity checked, attested as unverifiable at once instead of retried).
Attestations name the engine and the versions that reproduced the blocks
(``odf-node-datafusion`` / ``41.0.0+51.0.0``).
A pending verify item always verifies the dataset's current head, so superseded heads of one
dataset coalesce into one item.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, assert_never

from coordinator.identity import DatasetId, PrivateKey
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from coordinator.transform.engines import REPLAYABLE_ENGINES, SPARK_VERSION
from coordinator.verify import verify_integrity
from node.app.datasets import load_data_stack
from node.app.errors import RetryLater
from node.app.metrics import NodeMetrics
from node.app.ports import Clock, EnginePort, EventSink, GossipPort, IpfsPort, StatePort
from node.app.rows import VerificationOutcome, WorkItem
from p2p.core import PublishAttestation, PublishDispute
from p2p.intoto import seal
from p2p.wire import (
    Attestation,
    Checks,
    Dispute,
    DisputeKind,
    Evidence,
    FetchLocations,
    SignedMessage,
    Verdict,
    sign_message,
)

if TYPE_CHECKING:
    from coordinator.transform.verify import VerificationReport

log = logging.getLogger("odf_node.verify")

ENGINE_NAME = "odf-node-spark"
ENGINE_VERSION = SPARK_VERSION
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]
"""Starts a supervised task on the node's task group."""
REPLAY_ENGINES = REPLAYABLE_ENGINES
"""Transform engines this node can replay (``Transform.Sql.engine``, case-insensitive)."""


class VerdictSink(Protocol):
    """Where the node's own verdicts go (:class:`node.app.trust.TrustDriver`)."""

    async def local_verdict(
        self,
        did: DatasetId,
        head: Multihash,
        outcome: VerificationOutcome,
        *,
        conclusive: bool,
        evidence: str,
    ) -> None:
        """The node's verification of ``head`` ended."""
        ...

    def may_republish(self, did: DatasetId, head: Multihash) -> bool:
        """Whether ``head`` may be republished now (trusted, or trust does not gate)."""
        ...


@dataclass(frozen=True)
class _Outcome:
    """A finished verification: what its attestation is made of."""

    did: DatasetId
    head: Multihash
    outcome: VerificationOutcome
    report: VerificationReport | None
    replayed: bool
    kind: m.DatasetKind | None
    dataset: Dataset


def unsupported_engine(chain: Any) -> str | None:
    """The engine name of a derivative this node cannot replay, else None."""
    st = chain.set_transform
    if chain.dataset_kind != m.DatasetKind.DERIVATIVE or st is None:
        return None
    engine = str(st.transform.engine or "")
    return None if engine.strip().lower() in REPLAY_ENGINES else engine


class VerifyQueue:
    """Queues verify work items: what the trust driver and the gossip effects ask of the verify
    pipeline, without needing the pipeline itself (so the trust driver can be built first)."""

    def __init__(self, state: StatePort, kick: Callable[[], None]) -> None:
        self._state = state
        self._kick = kick

    async def queue(
        self, did: DatasetId, head: Multihash, sequence: int, *, replay: bool | None = None
    ) -> None:
        """Queue verification of ``did`` unless a pending item will already cover its head.

        ``replay``: whether the trust policy asks for a replay (True) or integrity checks only
        (False); None, and True on a node with ``[pipeline] replay = false``, follow the
        configuration. An integrity-only item pending does not cover a replay.
        """
        for w in await self._state.work(state="pending", did=did.as_did_str()):
            if w.kind == "verify" and (replay is not True or w.payload.get("replay", True)):
                await self._state.log_event(
                    "verify.coalesced", did.as_did_str(), {"head": head.to_multibase()}
                )
                return
        payload: dict[str, object] = {"sequence": sequence}
        dedupe = True
        if replay is not None:
            payload["replay"] = replay
            if replay:
                # An integrity-only check of this head already running does not cover a replay.
                claimed = await self._state.work(state="claimed", did=did.as_did_str())
                dedupe = not any(
                    w.kind == "verify" and not w.payload.get("replay", True) for w in claimed
                )
        await self._state.enqueue(
            "verify", did.as_did_str(), head.to_multibase(), payload, dedupe=dedupe
        )
        self._kick()


class Republisher:
    """Republishes a head a quorum trusted to IPFS (``[pipeline] republish``): the trust
    driver's side of republishing, built before the verify pipeline."""

    def __init__(
        self, repo: DatasetRepository, state: StatePort, ipfs: IpfsPort, *, enabled: bool
    ) -> None:
        self._repo = repo
        self._state = state
        self._ipfs = ipfs
        self._enabled = enabled

    async def republish(self, did: DatasetId, head: Multihash) -> None:
        """Republish ``did`` (at ``head``, its current head) to IPFS, when republishing is on:
        a head a quorum trusted, which the node's attestation did not republish."""
        if not (self._enabled and self._ipfs.api_url):
            return
        ds = self._repo.open(did.as_did_str())
        if ds.head() != head:
            return  # superseded meanwhile: the newer head is judged on its own
        cid = await self._ipfs.publish_dataset(ds)
        await self._state.log_event(
            "republish", did.as_did_str(), {"head": head.to_multibase(), "cid": cid}
        )


class VerifyPipeline:
    """Verification work items and the attestation / dispute effects; see the module docstring."""

    def __init__(
        self,
        repo: DatasetRepository,
        state: StatePort,
        gossip: GossipPort,
        ipfs: IpfsPort,
        engine: Callable[[], EnginePort],
        events: EventSink,
        metrics: NodeMetrics,
        clock: Clock,
        node_key: PrivateKey,
        *,
        replay: bool,
        republish: bool,
        http_urls: Callable[[DatasetId], tuple[str, ...]],
        kick: Callable[[], None],
        trust: VerdictSink | None = None,
        follow_input: Callable[[DatasetId, DatasetId], Awaitable[bool]] | None = None,
        input_missing: Callable[[DatasetId, DatasetId], None] | None = None,
    ) -> None:
        self._repo = repo
        self._state = state
        self._gossip = gossip
        self._ipfs = ipfs
        self._engine = engine
        self._events = events
        self._metrics = metrics
        self._clock = clock
        self._key = node_key
        self._replay = replay
        self._republish = republish
        self._http_urls = http_urls
        self._kick = kick
        # Computed once: base58-encoding the key on every attestation showed in loop profiles.
        self._node_id = self._key.dataset_id().as_did_key()
        self._queue = VerifyQueue(state, kick)
        self._republisher = Republisher(repo, state, ipfs, enabled=republish)
        self.trust = trust
        """Told the node's own verdicts (the trust driver)."""
        self.follow_input = follow_input
        """Follows a missing input of a dataset followed by URL from beside its source (the
        source follower; True when it did)."""
        self.input_missing = input_missing
        """Told ``(derivative, input)`` for each input a replay waits for (the fetcher: the
        peer the derivative came from becomes a source of the input)."""

    @property
    def node_id(self) -> str:
        """This node's ``did:key``."""
        return self._node_id

    def seal(self, stmt: Mapping[str, Any]) -> dict[str, Any]:
        """An in-toto statement in a DSSE envelope signed with the node key (``p2p/intoto.py``).

        The key signs only the DSSE pre-authentication encoding (``DSSEv1 …``), which neither a
        gossip message's signing input (``odf-node/<kind>/v1\\0 …``) nor a kamu proof starts
        with: a signature made for one purpose cannot be passed off as the other.
        """
        return seal(stmt, self._node_id, self._key.sign)

    async def queue(
        self, did: DatasetId, head: Multihash, sequence: int, *, replay: bool | None = None
    ) -> None:
        """Queue verification of ``did`` (:meth:`VerifyQueue.queue`)."""
        await self._queue.queue(did, head, sequence, replay=replay)

    async def run(self, item: WorkItem) -> None:
        """Verify the dataset's current head, record the outcome, attest or dispute."""
        # Replay imports pyarrow (via the transform planner): imported when a verification runs,
        # so that an idle daemon never loads it.
        await load_data_stack()

        did = DatasetId.parse(item.did)
        ds = self._repo.open(item.did)
        chain = await asyncio.to_thread(ds.state)
        head = chain.head
        if head is None:
            return
        # The trust policy may ask for integrity checks only (quorum) on a node that can replay.
        replay = self._replay and bool(item.payload.get("replay", True))
        engine_name = unsupported_engine(chain) if replay else None
        if engine_name is None and replay:
            engine_name = self._missing_engine(chain)
        inputs = {} if engine_name else await self._inputs(item.did, chain, replay)
        await self._state.log_event("verify.start", item.did, {"head": head.to_multibase()})
        self._events.publish("verify.started", {"did": item.did, "head": head.to_multibase()})
        t0 = time.monotonic()
        report, outcome, detail = await self._verify(item.did, ds, inputs, replay, engine_name)
        seconds = time.monotonic() - t0
        await self._record(item.did, head, report, outcome, detail, seconds)
        finished = _Outcome(
            did,
            head,
            outcome,
            report,
            replayed=report.replay is not None,
            kind=chain.dataset_kind,
            dataset=ds,
        )
        await self._conclude(finished, detail)

    async def _verify(
        self,
        did: str,
        ds: Dataset,
        inputs: dict[DatasetId, Dataset],
        replay: bool,
        engine_name: str | None,
    ) -> tuple[VerificationReport, VerificationOutcome, str]:
        """Check ``ds``: its integrity only when its engine cannot run here (``engine_name``),
        else :func:`verify_dataset` (a replay with ``replay``); the report, outcome, detail."""
        from coordinator.transform.verify import VerificationReport, verify_dataset  # see run()

        def progress(phase: str, done: int, total: int) -> None:
            self._events.publish_threadsafe(
                "verify.progress", {"did": did, "phase": phase, "done": done, "total": total}
            )

        if engine_name:
            integrity = await asyncio.to_thread(verify_integrity, ds, listener=progress)
            outcome: VerificationOutcome = "unverifiable" if integrity.ok else "failed"
            detail = (
                f"unverifiable: engine {engine_name}"
                if integrity.ok
                else "; ".join(integrity.problems)
            )
            return VerificationReport(integrity=integrity), outcome, detail
        report = await asyncio.to_thread(
            verify_dataset,
            ds,
            inputs,
            self._engine() if replay else None,
            integrity_only=not replay,
            listener=progress,
        )
        outcome, detail = self._judge(report)
        return report, outcome, detail

    async def _record(
        self,
        did: str,
        head: Multihash,
        report: VerificationReport,
        outcome: VerificationOutcome,
        detail: str,
        seconds: float,
    ) -> None:
        """The outcome in the metrics, the state (with the event log) and to the console."""
        self._metrics.verifications.labels(outcome).inc()
        self._metrics.verify_seconds.observe(seconds)
        await self._state.record_verification(
            did, head.to_multibase(), outcome, detail[:2000], seconds
        )
        replayed = report.replay.blocks_replayed if report.replay is not None else 0
        # Per replayed block, the engine and release that reproduced it (the chain does not
        # record a DataFusion release, so this is the node's finding, kept with the outcome).
        engines = [
            {
                "block": b.block_hash.to_multibase(),
                "sequence_number": b.sequence_number,
                "engine": b.engine,
                "version": b.version,
            }
            for b in (report.replay.block_engines if report.replay is not None else ())
        ]
        await self._state.log_event(
            "verify." + outcome,
            did,
            {
                "head": head.to_multibase(),
                "seconds": seconds,
                "blocks_replayed": replayed,
                "engines": engines,
            },
        )
        self._events.publish(
            "verify.finished", {"did": did, "head": head.to_multibase(), "outcome": outcome}
        )

    async def _conclude(self, finished: _Outcome, detail: str) -> None:
        """Tell the trust driver, then carry out the core's verdict: attest, dispute or not."""
        did, head, outcome, report = finished.did, finished.head, finished.outcome, finished.report
        if self.trust is not None:
            # Before the attestation: a head this replay trusts is republished with it.
            conclusive = finished.replayed or finished.kind == m.DatasetKind.ROOT
            await self.trust.local_verdict(
                did, head, outcome, conclusive=conclusive, evidence=detail[:200] or outcome
            )
        # The core decides: an attestation, a dispute, or nothing (head superseded).
        verdict = self._gossip.verification_completed(did, head, outcome != "failed")
        match verdict:
            case PublishAttestation():
                await self._attest(finished)
            case PublishDispute():
                assert report is not None  # every verification makes one
                await self._dispute_from_report(did, head, report)
            case None:
                pass
            case _:
                assert_never(verdict)

    def _missing_engine(self, chain: Any) -> str | None:
        """A replayable engine none of whose releases is installed here (e.g. a deployment
        without the DataFusion environments): unverifiable at once, not retried for ever."""
        st = chain.set_transform
        if chain.dataset_kind != m.DatasetKind.DERIVATIVE or st is None:
            return None
        pinned = getattr(self._engine(), "pinned_versions", None)
        engine = str(st.transform.engine or "")
        if callable(pinned) and not pinned(engine):
            return engine
        return None

    async def _inputs(self, did: str, chain: Any, replay: bool) -> dict[DatasetId, Dataset]:
        inputs: dict[DatasetId, Dataset] = {}
        if not (chain.dataset_kind == m.DatasetKind.DERIVATIVE and chain.set_transform and replay):
            return inputs
        missing = []
        for i in chain.set_transform.inputs:
            idid = DatasetId.parse(i.dataset_ref)
            if self._repo.contains(idid.as_did_str()):
                inputs[idid] = self._repo.open(idid.as_did_str())
            else:
                missing.append(idid)
        for idid in missing:
            if self.input_missing is not None:
                self.input_missing(DatasetId.parse(did), idid)
            # Inputs of a dataset followed by URL come from beside its source, if served there.
            if self.follow_input is not None and await self.follow_input(
                DatasetId.parse(did), idid
            ):
                continue
            # Inputs are pulled recursively: follow them like any subscription.
            await self._state.subscribe(idid.as_did_str(), None, f"input of {did}")
            await self._gossip.follow(idid)
        if missing:
            raise RetryLater(f"waiting for {len(missing)} input dataset(s) to be pulled")
        return inputs

    def _judge(self, report: VerificationReport) -> tuple[VerificationOutcome, str]:
        from coordinator.transform.verify import ReplayVerdict  # see run()

        rp = report.replay
        if rp is not None and rp.verdict is ReplayVerdict.ERROR:
            # Usually a missing input slice or an engine failure: not a verdict on the data.
            self._metrics.verifications.labels("error").inc()
            raise RetryLater(f"replay could not run: {rp.error}")
        if report.ok:
            return "verified", ""
        problems = [*report.integrity.problems, *report.problems]
        detail = rp.mismatch.describe() if rp is not None and rp.mismatch else "; ".join(problems)
        if rp is not None and rp.verdict is ReplayVerdict.INCONCLUSIVE:
            return "inconclusive", rp.describe()
        if rp is not None and rp.verdict is ReplayVerdict.NOT_REPRODUCIBLE:
            return "nondeterministic", detail
        return "failed", detail

    async def republish(self, did: DatasetId, head: Multihash) -> None:
        """Republish ``did`` at ``head`` (:meth:`Republisher.republish`)."""
        await self._republisher.republish(did, head)

    # ---- carrying out the core's verdict

    async def _attest(self, p: _Outcome) -> None:
        locations = FetchLocations()
        trusted = self.trust is None or self.trust.may_republish(p.did, p.head)
        if p.outcome == "verified" and self._republish and self._ipfs.api_url and trusted:
            cid = await self._ipfs.publish_dataset(p.dataset)
            locations = FetchLocations((cid,), self._http_urls(p.did))
            await self._state.log_event(
                "republish", p.did.as_did_str(), {"head": p.head.to_multibase(), "cid": cid}
            )
        checks = Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY
        if p.replayed:
            checks |= Checks.REPLAY
        if p.outcome in ("unverifiable", "nondeterministic", "inconclusive"):
            verdict = Verdict.UNVERIFIABLE
        elif p.replayed or p.kind == m.DatasetKind.ROOT:
            verdict = Verdict.VERIFIED
        else:
            verdict = Verdict.INTEGRITY_ONLY
        engine_name, engine_version = attested_engine(p.report, p.outcome)
        att = Attestation(
            node=self._key.dataset_id(),
            dataset=p.did,
            head=p.head,
            verdict=verdict,
            engine_name=engine_name,
            engine_version=engine_version,
            checks=checks,
            locations=locations,
            issued_at_ns=self._clock(),
            nonce=secrets.token_bytes(16),
        )
        sm = sign_message(att, self._key)
        did = p.did.as_did_str()
        head = p.head.to_multibase()
        await self._state.add_attestation(
            did, head, verdict.name.lower(), self.node_id, sm.envelope, True
        )
        await self._gossip.publish(p.did, sm.envelope)
        self._events.publish("attestation", {"did": did, "head": head, "own": True})

    async def _dispute_from_report(
        self, did: DatasetId, head: Multihash, report: VerificationReport
    ) -> None:
        rp = report.replay
        if rp is not None and rp.mismatch is not None:
            mm = rp.mismatch
            sm = self.sign_dispute(
                did,
                mm.block_hash,
                DisputeKind.REPLAY_MISMATCH,
                _evidence(mm.expected),
                _evidence(mm.actual),
                "; ".join(mm.differences),
            )
        else:
            problems = [*report.integrity.problems, *report.problems]
            sm = self.sign_dispute(
                did, head, DisputeKind.INTEGRITY, Evidence(), Evidence(), "; ".join(problems)
            )
        await self.send_dispute(did, sm)

    def sign_dispute(
        self,
        did: DatasetId,
        block: Multihash,
        kind: DisputeKind,
        expected: Evidence,
        computed: Evidence,
        detail: str,
    ) -> SignedMessage:
        """A dispute signed with the node key (``detail`` cut to 250 bytes)."""
        detail_b = detail.encode()[:250].decode(errors="ignore")
        return sign_message(
            Dispute(
                node=self._key.dataset_id(),
                dataset=did,
                block=block,
                kind=kind,
                expected=expected,
                computed=computed,
                detail=detail_b,
                issued_at_ns=self._clock(),
                nonce=secrets.token_bytes(16),
            ),
            self._key,
        )

    async def send_dispute(self, did: DatasetId, sm: SignedMessage) -> None:
        """Store our dispute and publish it on the dataset's topic."""
        x = sm.message
        assert isinstance(x, Dispute)
        await self._state.add_dispute(
            did.as_did_str(),
            x.block.to_multibase(),
            x.kind.name.lower(),
            self.node_id,
            sm.envelope,
            True,
            x.detail,
        )
        await self._gossip.publish(did, sm.envelope)
        self._events.publish(
            "dispute", {"did": did.as_did_str(), "block": x.block.to_multibase(), "own": True}
        )

    async def run_rejected_head(self, item: WorkItem) -> None:
        """Work "dispute": an owner-signed head that does not descend from the accepted one."""
        did = DatasetId.parse(item.did)
        assert item.head is not None
        sm = self.sign_dispute(
            did,
            Multihash.from_multibase(item.head),
            DisputeKind.INTEGRITY,
            Evidence(),
            Evidence(),
            str(item.payload.get("detail", "")),
        )
        await self.send_dispute(did, sm)


def attested_engine(report: VerificationReport | None, outcome: str) -> tuple[str, str]:
    """The attestation's engine name and version: what reproduced the blocks.

    ``odf-node-<engine>`` and the versions that reproduced blocks joined by ``+`` (oldest
    first: ``41.0.0+51.0.0``); ``unknown`` for an inconclusive replay; the Spark defaults when
    nothing was replayed.
    """
    rp = report.replay if report is not None else None
    if rp is None:
        return ENGINE_NAME, ENGINE_VERSION
    engines = rp.engines()
    if outcome == "inconclusive":
        return "odf-node-datafusion", "unknown"
    if not engines:
        return ENGINE_NAME, ENGINE_VERSION
    name = next(iter(engines))
    versions = sorted(engines[name], key=lambda v: [int(x) for x in v.split(".") if x.isdigit()])
    return f"odf-node-{name}"[:64], "+".join(versions)[:64]


def _evidence(e: m.ExecuteTransform) -> Evidence:
    nd = e.new_data
    wm = e.new_watermark
    return Evidence(
        logical_hash=nd.logical_hash if nd else None,
        physical_hash=nd.physical_hash if nd else None,
        offsets=(nd.offset_interval.start, nd.offset_interval.end) if nd else None,
        watermark_ns=wm.epoch_ns if wm is not None else None,
    )


__all__ = [
    "ENGINE_NAME",
    "ENGINE_VERSION",
    "REPLAY_ENGINES",
    "VerdictSink",
    "VerifyPipeline",
    "attested_engine",
    "unsupported_engine",
]
