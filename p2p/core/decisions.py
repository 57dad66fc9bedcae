"""What the protocol core tells its driver to do; :mod:`p2p.executor` carries each one out."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from p2p.wire import EquivocationProof, FetchLocations, SignedMessage, WireMessage


@dataclass(frozen=True, slots=True)
class Accept:
    """``message`` (from ``peer``) passed every check; announcements still await a fetch.

    ``via_anti_entropy``: the message came in a reply to this node's anti-entropy request, not
    over gossip: anti-entropy repaired something gossip had not delivered.
    """

    peer: str
    message: WireMessage
    via_anti_entropy: bool = False


@dataclass(frozen=True, slots=True)
class Ignore:
    """Drop the message without blame. ``reason`` is a stable short identifier."""

    peer: str
    reason: str


@dataclass(frozen=True, slots=True)
class Penalise:
    """``peer`` misbehaved: lower its score by ``amount`` (already applied in the core)."""

    peer: str
    reason: str
    amount: float


@dataclass(frozen=True, slots=True)
class Forward:
    """Propagate ``envelope`` to other peers (never back to ``source``)."""

    content_id: bytes
    envelope: bytes
    source: str


@dataclass(frozen=True, slots=True)
class RequestFetch:
    """Fetch the chain of ``head`` and report :class:`FetchCompleted` or :class:`FetchFailed`.

    ``base`` is the last accepted head of the same epoch the chain must descend from (``None``
    for a first head or an owner-signed epoch bump).
    """

    dataset: DatasetId
    head: Multihash
    sequence: int
    epoch: int
    base: Multihash | None
    locations: FetchLocations


@dataclass(frozen=True, slots=True)
class AbandonFetch:
    """Stop a fetch the core no longer waits for (it timed out)."""

    dataset: DatasetId
    head: Multihash
    reason: str


@dataclass(frozen=True, slots=True)
class HeadAccepted:
    """``announcement`` is now the accepted head of its dataset; persist and verify it."""

    dataset: DatasetId
    head: Multihash
    sequence: int
    epoch: int
    announcement: SignedMessage


@dataclass(frozen=True, slots=True)
class RejectHead:
    """An owner-signed head failed its ancestry check; the driver may publish a dispute."""

    dataset: DatasetId
    head: Multihash
    reason: str
    announcement: SignedMessage


@dataclass(frozen=True, slots=True)
class EmitEquivocationProof:
    """Publish ``proof`` (the owner of ``dataset`` signed a fork) on the node-level topic."""

    dataset: DatasetId
    proof: EquivocationProof


@dataclass(frozen=True, slots=True)
class RequestAntiEntropy:
    """Ask ``peer`` for its latest signed heads of ``datasets`` (``/odf/heads/1.0.0``)."""

    peer: str
    datasets: tuple[DatasetId, ...]


@dataclass(frozen=True, slots=True)
class DisconnectPeer:
    """``peer``'s score fell below the graylist threshold."""

    peer: str
    score: float


@dataclass(frozen=True, slots=True)
class PublishAttestation:
    """Sign and publish an attestation for a head this node verified."""

    dataset: DatasetId
    head: Multihash


@dataclass(frozen=True, slots=True)
class PublishDispute:
    """Sign and publish a dispute (with the driver's evidence) for a head that failed."""

    dataset: DatasetId
    head: Multihash


@dataclass(frozen=True, slots=True)
class PollSource:
    """Poll ``source`` for ``dataset`` now: ``peer``'s node observed it showing ``head``, which is
    not the newest head this node accepted from it (witnessing, ``docs/follow.md``)."""

    dataset: DatasetId
    source: str
    head: Multihash
    peer: str


Decision = (
    Accept
    | Ignore
    | Penalise
    | Forward
    | RequestFetch
    | AbandonFetch
    | HeadAccepted
    | RejectHead
    | EmitEquivocationProof
    | RequestAntiEntropy
    | DisconnectPeer
    | PublishAttestation
    | PublishDispute
    | PollSource
)
