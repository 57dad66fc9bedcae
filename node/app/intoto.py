"""Export of the node's attestations and disputes as in-toto/DSSE envelopes, and their check.

The mapping and the envelope format are :mod:`p2p.intoto`'s; this use case reads the stored
signed messages (``odf-node attestations``, ``odf-node disputes``), adds what the attested block
itself says (its inputs and logical hash, from the node's copy of the chain) and has the node
key seal each statement. ``docs/attestations.md`` says which node signs what and what a
verifier learns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.errors import OdfNodeError
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.app.ports import StatePort
from node.app.results import VerifiedEnvelope
from node.app.subscriptions import parse_did
from p2p.errors import EnvelopeError
from p2p.intoto import BlockFacts, parse_envelopes, statement, verify_envelope
from p2p.wire import Attestation, SignedMessage, decode

Sealer = Callable[[Mapping[str, Any]], dict[str, Any]]
"""Seals a statement in a DSSE envelope signed with the node key (``VerifyPipeline.seal``)."""


@dataclass(eq=False)
class AttestationExport:
    """The node's signed verdicts as in-toto statements in DSSE envelopes."""

    state: StatePort
    repo: DatasetRepository
    node_id: str
    seal: Sealer

    async def attestations(
        self,
        did: str | None = None,
        head: str | None = None,
        limit: int = 100,
        received: bool = False,
    ) -> list[dict[str, Any]]:
        """Envelopes of the newest ``limit`` stored attestations: ours, and with ``received``
        also the peers' (sealed by us, the peer's signed wire envelope inside)."""
        did = parse_did(did).as_did_str() if did is not None else None
        rows = await self.state.attestations(did=did, head=head, limit=limit)
        return await self._export([r.envelope for r in rows], received)

    async def disputes(
        self, did: str | None = None, limit: int = 100, received: bool = False
    ) -> list[dict[str, Any]]:
        """Envelopes of the newest ``limit`` stored disputes (ours; with ``received`` all)."""
        did = parse_did(did).as_did_str() if did is not None else None
        rows = await self.state.disputes(did=did, limit=limit)
        return await self._export([r.envelope for r in rows], received)

    async def _export(self, envelopes: list[bytes], received: bool) -> list[dict[str, Any]]:
        out = []
        for raw in envelopes:
            try:
                signed = decode(raw)
            except OdfNodeError:
                continue  # stored envelopes were verified on receipt; a damaged row is skipped
            if not isinstance(signed, SignedMessage):
                continue
            if not received and signed.signer().as_did_key() != self.node_id:
                continue
            facts = None
            if isinstance(signed.message, Attestation):
                facts = await asyncio.to_thread(self._facts, signed.message)
            out.append(self.seal(statement(signed, facts)))
        return out

    def _facts(self, att: Attestation) -> BlockFacts | None:
        """Inputs and logical hash of the attested block, if this node holds it."""
        did = att.dataset.as_did_str()
        try:
            if not self.repo.contains(did):
                return None
            block = self.repo.open(did).get_block(att.head)
        except OdfNodeError:
            return None
        return block_facts(block)

    @staticmethod
    def verify(text: str) -> list[VerifiedEnvelope]:
        """Check every envelope of an export (one object, an array or JSON lines).

        Raises:
            EnvelopeError: the text holds no envelope at all.
        """
        rows = []
        for env in parse_envelopes(text):
            try:
                v = verify_envelope(env)
            except EnvelopeError as e:
                rows.append(VerifiedEnvelope.failed(str(e)))
                continue
            rows.append(
                VerifiedEnvelope.from_record(
                    v,
                    ok=True,
                    problem=None,
                    # The verifier's checked fields, never the envelope's own: a field
                    # added outside the signed wire envelope is refused, not passed through.
                    predicate=dict(v.predicate),
                )
            )
        return rows


def block_facts(block: m.MetadataBlock) -> BlockFacts:
    """What a block says about its inputs and new data (``ExecuteTransform``, ``AddData``)."""
    event = block.event
    inputs: tuple[tuple[str, str | None], ...] = ()
    if isinstance(event, m.ExecuteTransform):
        inputs = tuple(
            (i.dataset_id.as_did_str(), _hash(i.new_block_hash or i.prev_block_hash))
            for i in event.query_inputs
        )
    new_data = getattr(event, "new_data", None)
    logical = new_data.logical_hash.to_multibase() if new_data is not None else None
    return BlockFacts(inputs=inputs, logical_hash=logical)


def _hash(h: Multihash | None) -> str | None:
    return h.to_multibase() if h is not None else None


__all__ = ["AttestationExport", "Sealer", "block_facts"]
