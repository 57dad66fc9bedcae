"""The one place where the protocol core's decisions are carried out.

:class:`~p2p.core.ProtocolCore` returns :data:`~p2p.core.Decision` values and does nothing itself.
Every driver — the libp2p daemon (through :class:`~p2p.service.GossipService`) and the
discrete-event simulator (``sim/simulator.py``) — hands each decision to :func:`execute`, which
dispatches it to a method of a :class:`DecisionEffects` implementation. The match is exhaustive
and checked by mypy (``typing.assert_never``): adding a decision type to the core without giving
it an effect is a type error, so no driver can silently drop a decision another driver honours.

Effects are synchronous: a driver that needs IO for an effect (a pull, a publish) starts a task
and reports the outcome to the core later as an event (:class:`~p2p.core.FetchCompleted`, ...).
"""

from __future__ import annotations

from typing import Protocol, assert_never

from p2p.core import (
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


class DecisionEffects(Protocol):
    """What a driver does for each kind of decision (one method per decision type)."""

    def accepted(self, d: Accept) -> None:
        """A message passed every check (announcements still await their fetch)."""
        ...

    def ignored(self, d: Ignore) -> None:
        """A message was dropped without blame."""
        ...

    def penalised(self, d: Penalise) -> None:
        """A peer misbehaved (the core already lowered its score)."""
        ...

    def forward(self, d: Forward) -> None:
        """Propagate an envelope to other peers."""
        ...

    def fetch(self, d: RequestFetch) -> None:
        """Start fetching a chain; report ``FetchCompleted`` / ``FetchFailed`` later."""
        ...

    def abandon_fetch(self, d: AbandonFetch) -> None:
        """Cancel a running fetch the core stopped waiting for; nothing of it may commit."""
        ...

    def head_accepted(self, d: HeadAccepted) -> None:
        """A head became the accepted head of its dataset: persist it and verify it."""
        ...

    def head_rejected(self, d: RejectHead) -> None:
        """An owner-signed head failed its ancestry check."""
        ...

    def equivocation(self, d: EmitEquivocationProof) -> None:
        """The core built an equivocation proof: store and publish it."""
        ...

    def anti_entropy(self, d: RequestAntiEntropy) -> None:
        """Ask a peer for its latest heads; report ``AntiEntropyReceived`` later."""
        ...

    def disconnect(self, d: DisconnectPeer) -> None:
        """A peer's score fell below the graylist threshold."""
        ...

    def attest(self, d: PublishAttestation) -> None:
        """Sign and publish an attestation for a head this node verified."""
        ...

    def dispute(self, d: PublishDispute) -> None:
        """Sign and publish a dispute for a head whose verification failed."""
        ...

    def poll_source(self, d: PollSource) -> None:
        """Poll a followed source now (a peer observed it showing another head)."""
        ...


def execute(decision: Decision, effects: DecisionEffects) -> None:
    """Carry out one decision through ``effects`` (exhaustive over :data:`Decision`)."""
    match decision:
        case Accept():
            effects.accepted(decision)
        case Ignore():
            effects.ignored(decision)
        case Penalise():
            effects.penalised(decision)
        case Forward():
            effects.forward(decision)
        case RequestFetch():
            effects.fetch(decision)
        case AbandonFetch():
            effects.abandon_fetch(decision)
        case HeadAccepted():
            effects.head_accepted(decision)
        case RejectHead():
            effects.head_rejected(decision)
        case EmitEquivocationProof():
            effects.equivocation(decision)
        case RequestAntiEntropy():
            effects.anti_entropy(decision)
        case DisconnectPeer():
            effects.disconnect(decision)
        case PublishAttestation():
            effects.attest(decision)
        case PublishDispute():
            effects.dispute(decision)
        case PollSource():
            effects.poll_source(decision)
        case _:
            assert_never(decision)


def execute_all(decisions: list[Decision], effects: DecisionEffects) -> None:
    """Carry out ``decisions`` in order."""
    for d in decisions:
        execute(d, effects)


class NullEffects:
    """Effects that do nothing: a base class for drivers that care about a few decisions.

    Subclasses override what they act on; everything else is an explicit no-op here, so a
    reader sees in one place which decisions a driver deliberately leaves alone.
    """

    def accepted(self, d: Accept) -> None:
        """No-op."""

    def ignored(self, d: Ignore) -> None:
        """No-op."""

    def penalised(self, d: Penalise) -> None:
        """No-op."""

    def forward(self, d: Forward) -> None:
        """No-op."""

    def fetch(self, d: RequestFetch) -> None:
        """No-op."""

    def abandon_fetch(self, d: AbandonFetch) -> None:
        """No-op."""

    def head_accepted(self, d: HeadAccepted) -> None:
        """No-op."""

    def head_rejected(self, d: RejectHead) -> None:
        """No-op."""

    def equivocation(self, d: EmitEquivocationProof) -> None:
        """No-op."""

    def anti_entropy(self, d: RequestAntiEntropy) -> None:
        """No-op."""

    def disconnect(self, d: DisconnectPeer) -> None:
        """No-op."""

    def attest(self, d: PublishAttestation) -> None:
        """No-op."""

    def dispute(self, d: PublishDispute) -> None:
        """No-op."""

    def poll_source(self, d: PollSource) -> None:
        """No-op."""


__all__ = ["DecisionEffects", "NullEffects", "execute", "execute_all"]
