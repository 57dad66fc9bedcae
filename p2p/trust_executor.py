"""The one place where the trust policy's decisions are carried out.

:class:`~p2p.trust.TrustPolicy` answers :data:`~p2p.trust.TrustDecision` values (``Replay``,
``Trusted``, ``Distrusted``) and does nothing itself. Both drivers, the daemon
(``node/app/trust.py``) and the discrete-event simulator (``sim/simulator.py``), hand each one
to :func:`dispatch`, which calls the method of a :class:`TrustEffects` implementation for its
type. The match is exhaustive and checked by mypy (``typing.assert_never``): a decision type
added to the policy without an effect is a type error in both drivers at once, as
``p2p/executor.py`` does for the protocol core's decisions.

The effects' return type is the driver's: the simulator's are plain calls (``None``), the
daemon's are coroutines it awaits (state writes), so one dispatcher serves both.
"""

from __future__ import annotations

from typing import Protocol, TypeVar, assert_never

from p2p.trust import Distrusted, Replay, TrustDecision, Trusted

R_co = TypeVar("R_co", covariant=True)


class TrustEffects(Protocol[R_co]):
    """What a driver does for each kind of trust decision (one method per decision type)."""

    def replay(self, d: Replay) -> R_co:
        """Verify ``d.head`` here (a replay) and report a ``LocalVerdict`` when it ends."""
        ...

    def trusted(self, d: Trusted) -> R_co:
        """``d.head`` became trusted: serve it, let derivatives read it, say so."""
        ...

    def distrusted(self, d: Distrusted) -> R_co:
        """``d.head`` became disputed or unverifiable: never serve it, say who said so."""
        ...


def dispatch(d: TrustDecision, effects: TrustEffects[R_co]) -> R_co:
    """Carry out one decision: the effect's result (a coroutine for an async driver)."""
    match d:
        case Replay():
            return effects.replay(d)
        case Trusted():
            return effects.trusted(d)
        case Distrusted():
            return effects.distrusted(d)
        case _:
            assert_never(d)
