"""Typed, immutable rows of the node's state: the application layer's own types.

The ports (:mod:`node.app.ports`) speak in them; the SQLite adapter
(:class:`node.state.store.NodeState`) returns them.

Times are integers, nanoseconds since the Unix epoch, from the injected clock. DIDs are
``did:odf:...`` strings, heads multibase multihash strings (``f1620...``), envelopes raw bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

VerificationOutcome = Literal[
    "verified", "failed", "nondeterministic", "error", "unverifiable", "inconclusive"
]
WorkState = Literal["pending", "claimed", "done", "failed"]

VERIFICATION_OUTCOMES: frozenset[str] = frozenset(
    {"verified", "failed", "nondeterministic", "error", "unverifiable", "inconclusive"}
)
WORK_STATES: frozenset[str] = frozenset({"pending", "claimed", "done", "failed"})


@dataclass(frozen=True)
class TrustOverride:
    """A subscription's own trust settings over the node's ``[trust]`` (None: the node's)."""

    policy: str | None = None
    k: int | None = None
    trusted_attesters: tuple[str, ...] | None = None

    @property
    def empty(self) -> bool:
        """Whether nothing is overridden."""
        return self.policy is None and self.k is None and self.trusted_attesters is None


@dataclass(frozen=True)
class TrustRecord:
    """The trust state of a subscription's newest judged head, as ``p2p.trust`` answered it.

    ``state``: pending, trusted, disputed, unverifiable; ``by``: local or quorum (trusted
    only); ``attesters``: the quorum's node ids; ``evidence``: what disputed it;
    ``disputed_by``: every signer that disputed it, trusted or not.
    """

    head: str
    state: str
    by: str | None = None
    attesters: tuple[str, ...] = ()
    evidence: str | None = None
    disputed_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Subscription:
    """A dataset the node follows; ``trusted_head`` is the newest head trusted (the one served
    and used as an input under a trust policy other than verify-all)."""

    did: str
    alias: str | None
    source_hint: str | None
    created_ns: int
    updated_ns: int
    override: TrustOverride = field(default_factory=TrustOverride)
    trusted_head: str | None = None
    trust: TrustRecord | None = None
    source_url: str | None = None
    """The URL the dataset is followed from (None: owner-signed announcements over gossip)."""


@dataclass(frozen=True)
class AcceptedHead:
    """The newest head accepted for a DID, by (epoch, sequence), and the announcement with it."""

    did: str
    epoch: int
    sequence: int
    head: str
    source_peer: str | None
    envelope: bytes
    accepted_ns: int


@dataclass(frozen=True)
class Verification:
    """The outcome of re-verifying one head of one dataset (the latest recorded wins)."""

    did: str
    head: str
    outcome: VerificationOutcome
    detail: str
    engine_seconds: float
    recorded_ns: int


@dataclass(frozen=True)
class AttestationRecord:
    """A signed verdict on (did, head), ours (``own``) or received; ``content_id`` = sha3-256."""

    id: int
    content_id: str
    did: str
    head: str
    verdict: str
    signer: str
    envelope: bytes
    own: bool
    received_ns: int


@dataclass(frozen=True)
class DisputeRecord:
    """A signed dispute of (did, head), ours (``own``) or received."""

    id: int
    content_id: str
    did: str
    head: str
    kind: str
    signer: str
    envelope: bytes
    own: bool
    detail: str
    received_ns: int


@dataclass(frozen=True)
class ObservationRecord:
    """A signed observation of a source (ours, ``own``, or a peer's): the head it showed."""

    id: int
    content_id: str
    did: str
    source: str
    head: str
    sequence: int
    signer: str
    envelope: bytes
    own: bool
    observed_ns: int
    received_ns: int


@dataclass(frozen=True)
class SplitView:
    """Two observations of one source whose heads do not descend one from the other.

    One per (dataset, source, fork): ``seen`` counts the times the node found that fork (once
    per poll that shows it), ``last_seen_ns`` is the latest; ``detected_ns`` the first.
    """

    id: int
    did: str
    source: str
    first: ObservationRecord
    second: ObservationRecord
    detail: str
    detected_ns: int
    seen: int = 1
    last_seen_ns: int = 0

    def observations(self) -> list[dict[str, Any]]:
        """Both signed observations as plain data, envelopes in hex: the evidence anyone can
        check (the console and the query API show it alike)."""
        return [
            {
                "head": o.head,
                "sequence": o.sequence,
                "signer": o.signer,
                "own": o.own,
                "at_ns": o.observed_ns,
                "envelope": o.envelope.hex(),
            }
            for o in (self.first, self.second)
        ]


@dataclass(frozen=True)
class EquivocationRecord:
    """Evidence that a dataset's key signed two different heads for the same position."""

    id: int
    content_id: str
    did: str
    envelope: bytes
    received_ns: int


@dataclass(frozen=True)
class KeyRotationRecord:
    """A node key ``old_id`` succeeded by ``new_id`` (both ``did:key``), as signed by both."""

    old_id: str
    new_id: str
    issued_at_ns: int
    envelope: bytes
    received_ns: int
    kept: bool = True
    """Never evicted (a trusted node's or the node's own), else a stranger's, evictable."""


@dataclass(frozen=True)
class KeyRevocationRecord:
    """A node key ``node_id`` that no longer counts from ``revoked_ns`` on (signed by that key or
    by the key it committed to as its next one)."""

    node_id: str
    revoked_ns: int
    envelope: bytes
    received_ns: int
    kept: bool = True
    """As :attr:`KeyRotationRecord.kept`."""


@dataclass(frozen=True)
class KeyInceptionRecord:
    """A node key ``node_id`` committing to the digest of its next key (a
    :class:`p2p.wire.KeyInception`, signed by that key): its first commitment."""

    node_id: str
    issued_at_ns: int
    envelope: bytes
    received_ns: int
    kept: bool = True
    """As :attr:`KeyRotationRecord.kept`."""


@dataclass(frozen=True)
class Peer:
    """A gossip peer: addresses, score, whether connected now, and when it was last seen."""

    peer_id: str
    addrs: tuple[str, ...]
    score: float
    connected: bool
    first_seen_ns: int
    last_seen_ns: int


@dataclass(frozen=True)
class EventRecord:
    """One entry of the event log; ``data`` is the JSON object given to ``log_event``."""

    id: int
    ts_ns: int
    kind: str
    did: str | None
    data: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class Schedule:
    """A dataset's flow trigger (``docs/flows.md``): exactly one of ``every_s``, ``cron`` and
    ``on_input``. ``next_ns``: when a time trigger is next due; ``inputs_seen``: the input heads
    (DID -> multibase head) the last transform was queued for."""

    did: str
    every_s: float | None
    cron: str | None
    on_input: bool
    next_ns: int | None
    inputs_seen: dict[str, str] = field(hash=False)
    created_ns: int = 0
    updated_ns: int = 0


@dataclass(frozen=True)
class WorkItem:
    """A durable unit of pipeline work (fetch, verify, attest...) and its retry bookkeeping.

    ``attempts`` counts claims: the first run is attempt 1. ``not_before_ns`` is when a pending
    item becomes runnable (enqueue time, or the retry time given to ``fail``).
    """

    id: int
    kind: str
    did: str
    head: str | None
    payload: dict[str, Any] = field(hash=False)
    state: WorkState = "pending"
    attempts: int = 0
    not_before_ns: int = 0
    created_ns: int = 0
    updated_ns: int = 0
    claimed_ns: int | None = None
    last_error: str | None = None


@dataclass(frozen=True)
class EvidenceCaps:
    """How many strangers' attestations, disputes and key records the state keeps
    (``[storage]``, docs/operations.md "Strangers' evidence").

    A stranger's row is one neither this node's own nor signed by a key the caller marks kept
    (a trusted attester's of the dataset). Per table: at most ``per_signer`` rows of one signing
    key, ``per_dataset`` of one dataset and ``total`` in all; past a cap the oldest strangers'
    row of that scope is deleted. Key rotations and revocations: at most ``key_records`` each.
    Kept rows are never evicted and never counted.
    """

    per_signer: int = 256
    per_dataset: int = 2048
    total: int = 16384
    key_records: int = 4096

    def __post_init__(self) -> None:
        if min(self.per_signer, self.per_dataset, self.total, self.key_records) < 1:
            raise ValueError("evidence caps must be >= 1")
