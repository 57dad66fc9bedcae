"""What the node knows, read from its state: peers, events, work items and the trust evidence.

Each query returns typed rows (:mod:`node.app.results`); the daemon's RPC methods and the CLI
without a daemon run the same queries over the same state, so their JSON is the same.
"""

from __future__ import annotations

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId
from node.app.identities import NodeIdentities, load_records
from node.app.ports import GossipPort, StatePort
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
    """Read models over the node's state (``gossip``: the node's live transport, if any)."""

    def __init__(self, state: StatePort, gossip: GossipPort | None = None) -> None:
        self._state = state
        self._gossip = gossip

    async def peers(self) -> list[PeerRow]:
        """Known gossip peers with score and last contact.

        ``connected`` is the state's flag only while the gossip transport runs (the daemon keeps
        it current): without it (no daemon) the stored flag is what a stopped or killed daemon
        last wrote, so nobody is connected and ``last_seen_ns`` says when each peer was.
        """
        live = self._gossip is not None and self._gossip.enabled
        return [
            PeerRow.from_record(p, addrs=list(p.addrs), connected=live and p.connected)
            for p in await self._state.peers()
        ]

    async def events(
        self, after_id: int = 0, limit: int = 100, kind: str | None = None
    ) -> list[EventRow]:
        """The event log, oldest first, after ``after_id``."""
        return [
            EventRow.from_record(e, at_ns=e.ts_ns)
            for e in await self._state.events(after_id, limit, kind)
        ]

    async def work(self, state: WorkState | None = None, did: str | None = None) -> list[WorkRow]:
        """Work items (verify, publish, dispute) and their states."""
        return [WorkRow.from_record(w) for w in await self._state.work(state=state, did=did)]

    async def attestations(
        self, did: str | None = None, head: str | None = None, limit: int = 100
    ) -> list[AttestationRow]:
        """Attestations received or made, newest first; ``node`` is the attesting node's
        current id (its ``signer`` key followed through the node key rotations known)."""
        identities = NodeIdentities()
        load_records(identities, await self._state.key_rotations())
        return [
            AttestationRow.from_record(
                a,
                at_ns=a.received_ns,
                node=_node_of(identities, a.signer),
                **_attested_engine(a.envelope),
            )
            for a in await self._state.attestations(did=_did(did), head=head, limit=limit)
        ]

    async def disputes(self, did: str | None = None, limit: int = 100) -> list[DisputeRow]:
        """Disputes received or made, and split views of followed sources, newest first."""
        rows = [
            DisputeRow.from_record(x, block=x.head, at_ns=x.received_ns)
            for x in await self._state.disputes(did=_did(did), limit=limit)
        ]
        for s in await self._state.split_views(_did(did), limit):
            rows.append(
                DisputeRow.from_record(
                    s,
                    block=s.second.head,
                    kind="split-view",
                    signer=s.first.signer if s.first.own else s.second.signer,
                    own=True,
                    at_ns=s.detected_ns,
                    observations=s.observations(),
                )
            )
        rows.sort(key=lambda r: r.at_ns, reverse=True)
        return rows[:limit]

    async def equivocations(self, did: str | None = None) -> list[EquivocationRow]:
        """Equivocation proofs known to this node."""
        return [
            EquivocationRow.from_record(p, at_ns=p.received_ns)
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
