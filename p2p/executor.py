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

from p2p import core


class DecisionEffects(Protocol):
    """What a driver does for each kind of decision (one method per decision type).

    A driver implements it structurally (``node/app/effects.py``, ``sim/simulator.py``) and so
    defines every method. The bodies here are no-ops that only an explicit subclass inherits:
    :class:`NullEffects` is that subclass.
    """

    def accepted(self, d: core.Accept) -> None:
        """A message passed every check (announcements still await their fetch)."""
        return None

    def ignored(self, d: core.Ignore) -> None:
        """A message was dropped without blame."""
        return None

    def penalised(self, d: core.Penalise) -> None:
        """A peer misbehaved (the core already lowered its score)."""
        return None

    def forward(self, d: core.Forward) -> None:
        """Propagate an envelope to other peers."""
        return None

    def fetch(self, d: core.RequestFetch) -> None:
        """Start fetching a chain; report ``FetchCompleted`` / ``FetchFailed`` later."""
        return None

    def abandon_fetch(self, d: core.AbandonFetch) -> None:
        """Cancel a running fetch the core stopped waiting for; nothing of it may commit."""
        return None

    def head_accepted(self, d: core.HeadAccepted) -> None:
        """A head became the accepted head of its dataset: persist it and verify it."""
        return None

    def head_rejected(self, d: core.RejectHead) -> None:
        """An owner-signed head failed its ancestry check."""
        return None

    def equivocation(self, d: core.EmitEquivocationProof) -> None:
        """The core built an equivocation proof: store and publish it."""
        return None

    def anti_entropy(self, d: core.RequestAntiEntropy) -> None:
        """Ask a peer for its latest heads; report ``AntiEntropyReceived`` later."""
        return None

    def disconnect(self, d: core.DisconnectPeer) -> None:
        """A peer's score fell below the graylist threshold."""
        return None

    def attest(self, d: core.PublishAttestation) -> None:
        """Sign and publish an attestation for a head this node verified."""
        return None

    def dispute(self, d: core.PublishDispute) -> None:
        """Sign and publish a dispute for a head whose verification failed."""
        return None

    def poll_source(self, d: core.PollSource) -> None:
        """Poll a followed source now (a peer observed it showing another head)."""
        return None


def execute(decision: core.Decision, effects: DecisionEffects) -> None:
    """Carry out one decision through ``effects`` (exhaustive over :data:`Decision`)."""
    match decision:
        case core.Accept():
            effects.accepted(decision)
        case core.Ignore():
            effects.ignored(decision)
        case core.Penalise():
            effects.penalised(decision)
        case core.Forward():
            effects.forward(decision)
        case core.RequestFetch():
            effects.fetch(decision)
        case core.AbandonFetch():
            effects.abandon_fetch(decision)
        case core.HeadAccepted():
            effects.head_accepted(decision)
        case core.RejectHead():
            effects.head_rejected(decision)
        case core.EmitEquivocationProof():
            effects.equivocation(decision)
        case core.RequestAntiEntropy():
            effects.anti_entropy(decision)
        case core.DisconnectPeer():
            effects.disconnect(decision)
        case core.PublishAttestation():
            effects.attest(decision)
        case core.PublishDispute():
            effects.dispute(decision)
        case core.PollSource():
            effects.poll_source(decision)
        case _:
            assert_never(decision)


def execute_all(decisions: list[core.Decision], effects: DecisionEffects) -> None:
    """Carry out ``decisions`` in order."""
    for d in decisions:
        execute(d, effects)


class NullEffects(DecisionEffects):
    """Effects that do nothing: a base class for drivers that care about a few decisions.

    Every method is the no-op of :class:`DecisionEffects`; subclasses override what they act on.
    """


__all__ = ["DecisionEffects", "NullEffects", "execute", "execute_all"]
