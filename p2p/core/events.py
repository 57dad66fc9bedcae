"""What a driver tells the protocol core: every event carries the driver's time (``now_ns``)."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """Gossip bytes ``data`` arrived from ``peer``."""

    peer: str
    data: bytes
    now_ns: int


@dataclass(frozen=True, slots=True)
class AntiEntropyReceived:
    """A peer answered an anti-entropy request with its latest signed heads (envelopes)."""

    peer: str
    envelopes: tuple[bytes, ...]
    now_ns: int


@dataclass(frozen=True, slots=True)
class FetchCompleted:
    """The driver fetched the chain of ``head`` (every hash checked).

    ``ancestry_ok`` is true when the chain is valid, its head has the announced sequence number
    and, if the fetch had a ``base``, the chain descends from ``base``.
    """

    dataset: DatasetId
    head: Multihash
    ancestry_ok: bool
    now_ns: int


@dataclass(frozen=True, slots=True)
class FetchFailed:
    """The driver could not fetch ``head`` (unreachable, timed out, hash mismatch...)."""

    dataset: DatasetId
    head: Multihash
    reason: str
    now_ns: int


@dataclass(frozen=True, slots=True)
class VerificationCompleted:
    """Local verification of an accepted head finished; ``ok`` is the replay/integrity result."""

    dataset: DatasetId
    head: Multihash
    ok: bool
    now_ns: int


@dataclass(frozen=True, slots=True)
class SourceHeadAccepted:
    """The driver pulled ``head`` of ``dataset`` from ``source`` (a URL subscription: the source
    is the authority, no owner signs) and accepted it: its verification is judged like that of
    an owner-announced head."""

    dataset: DatasetId
    source: str
    head: Multihash
    now_ns: int


@dataclass(frozen=True, slots=True)
class PeerConnected:
    """A connection to ``peer`` was established."""

    peer: str
    now_ns: int


@dataclass(frozen=True, slots=True)
class PeerDisconnected:
    """The connection to ``peer`` was closed."""

    peer: str
    now_ns: int


@dataclass(frozen=True, slots=True)
class Tick:
    """A timer tick (the driver sends one every second or so)."""

    now_ns: int


Event = (
    MessageReceived
    | AntiEntropyReceived
    | FetchCompleted
    | FetchFailed
    | VerificationCompleted
    | SourceHeadAccepted
    | PeerConnected
    | PeerDisconnected
    | Tick
)
