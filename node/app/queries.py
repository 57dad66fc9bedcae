"""What the node knows, read from its state: peers, events, work items and the trust evidence.

Each query returns typed rows (:mod:`node.app.results`); the daemon's RPC methods and the CLI
without a daemon run the same queries over the same state, so their JSON is the same.
"""

from __future__ import annotations

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId
from node.app.identities import NodeIdentities, load_records
from node.app.ports import StatePort
from node.app.results import (
    AttestationRow,
    DisputeRow,
    EquivocationRow,
    EventRow,
    PeerRow,
    WorkRow,
)
from node.app.rows import WorkState
from node.app.subscriptions import parse_did


def _node_of(identities: NodeIdentities, signer: str) -> str:
    """``signer``'s node as its newest key (``signer`` itself when it never rotated)."""
    if identities.empty:
        return signer
    try:
        return identities.canonical(DatasetId.parse(signer)).as_did_key()
    except OdfNodeError:
        return signer


def _did(did: str | None) -> str | None:
    """The canonical form of an optional DID filter (a bad one is :class:`InvalidArgument`)."""
    return parse_did(did).as_did_str() if did is not None else None


class NodeQueries:
    """Read models over the node's state."""

    def __init__(self, state: StatePort) -> None:
        self._state = state

    async def peers(self) -> list[PeerRow]:
        """Known gossip peers with score and last contact."""
        return [
            PeerRow(
                peer_id=p.peer_id,
                connected=p.connected,
                score=p.score,
                addrs=list(p.addrs),
                last_seen_ns=p.last_seen_ns,
            )
            for p in await self._state.peers()
        ]

    async def events(
        self, after_id: int = 0, limit: int = 100, kind: str | None = None
    ) -> list[EventRow]:
        """The event log, oldest first, after ``after_id``."""
        return [
            EventRow(id=e.id, at_ns=e.ts_ns, kind=e.kind, did=e.did, data=e.data)
            for e in await self._state.events(after_id, limit, kind)
        ]

    async def work(self, state: WorkState | None = None, did: str | None = None) -> list[WorkRow]:
        """Work items (verify, publish, dispute) and their states."""
        return [
            WorkRow(
                id=w.id,
                kind=w.kind,
                did=w.did,
                head=w.head,
                state=w.state,
                attempts=w.attempts,
                last_error=w.last_error,
            )
            for w in await self._state.work(state=state, did=did)
        ]

    async def attestations(
        self, did: str | None = None, head: str | None = None, limit: int = 100
    ) -> list[AttestationRow]:
        """Attestations received or made, newest first; ``node`` is the attesting node's
        current id (its ``signer`` key followed through the node key rotations known)."""
        identities = NodeIdentities()
        load_records(identities, await self._state.key_rotations())
        return [
            AttestationRow(
                did=a.did,
                head=a.head,
                verdict=a.verdict,
                signer=a.signer,
                own=a.own,
                at_ns=a.received_ns,
                node=_node_of(identities, a.signer),
                **_attested_engine(a.envelope),
            )
            for a in await self._state.attestations(did=_did(did), head=head, limit=limit)
        ]

    async def disputes(self, did: str | None = None, limit: int = 100) -> list[DisputeRow]:
        """Disputes received or made, and split views of followed sources, newest first."""
        rows = [
            DisputeRow(
                did=x.did,
                block=x.head,
                kind=x.kind,
                signer=x.signer,
                own=x.own,
                detail=x.detail,
                at_ns=x.received_ns,
            )
            for x in await self._state.disputes(did=_did(did), limit=limit)
        ]
        for s in await self._state.split_views(_did(did), limit):
            rows.append(
                DisputeRow(
                    did=s.did,
                    block=s.second.head,
                    kind="split-view",
                    signer=s.first.signer if s.first.own else s.second.signer,
                    own=True,
                    detail=s.detail,
                    at_ns=s.detected_ns,
                    source=s.source,
                    seen=s.seen,
                    last_seen_ns=s.last_seen_ns,
                    observations=s.observations(),
                )
            )
        rows.sort(key=lambda r: r.at_ns, reverse=True)
        return rows[:limit]

    async def equivocations(self, did: str | None = None) -> list[EquivocationRow]:
        """Equivocation proofs known to this node."""
        return [
            EquivocationRow(did=p.did, content_id=p.content_id, at_ns=p.received_ns)
            for p in await self._state.equivocation_proofs(_did(did))
        ]


def _attested_engine(envelope: bytes) -> dict[str, str | None]:
    """The engine name and version an attestation signs (what reproduced the head)."""
    from p2p.errors import WireDecodeError
    from p2p.wire import Attestation, SignedMessage, decode_unverified

    none: dict[str, str | None] = {"engine": None, "engine_version": None}
    try:
        signed = decode_unverified(envelope)
    except WireDecodeError:  # stored envelopes were decoded and verified on receipt
        return none
    msg = signed.message if isinstance(signed, SignedMessage) else None
    if not isinstance(msg, Attestation):
        return none
    return {"engine": msg.engine_name, "engine_version": msg.engine_version}


__all__ = ["NodeQueries"]
