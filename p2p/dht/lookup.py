"""One iterative Kademlia lookup, sans-IO: which peers to ask next, and when it is done.

The walk of go-libp2p-kad-dht (``query.go``), without its rounds: ``alpha`` queries run at once;
a query outstanding longer than ``slow_after_ns`` stops counting against ``alpha``, so another
starts in its place (up to ``max_in_flight`` in all) and one slow or frozen peer never holds the
walk up; it fails at ``query_timeout_ns``. Each answer names closer peers (at most ``k`` taken)
and, for a provider lookup, providers (distinct, capped).

**Providers count once confirmed.** An answer naming a provider proves nothing: a Sybil can
answer with 20 self-signed records of identities that carry nothing (go-libp2p-kad-dht's
``FindProvidersAsync(count)`` counts them, so one such answer ends the walk). Here the driver
dials each named provider and reports the outcome: :meth:`Lookup.on_provider_confirmed` when the
dial authenticated the peer the record was signed by (and, for the daemon, the record verified as
that carrier's), :meth:`Lookup.on_provider_failed` otherwise. A failed provider frees its place
among the ``max_providers`` kept.

The lookup ends when it has ``want_providers`` confirmed providers; or when the ``k`` closest
peers it knows that have not failed have all answered (or nobody is left to ask) and no named
provider still awaits its dial's verdict.

The driver sends each :class:`Query` it is given, reports the answer with :meth:`on_response`
or the failure with :meth:`on_failure`, and calls :meth:`poll` when its timer fires; every call
returns the queries to send now. Peer keys are computed by the driver (``key_of`` of the peer
id it will authenticate when it dials), never taken from an answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from p2p.dht.keys import DhtKey, distance
from p2p.dht.routing import K

ALPHA = 3
MAX_IN_FLIGHT = 10
SLOW_AFTER_NS = 1_000_000_000
QUERY_TIMEOUT_NS = 10_000_000_000


@dataclass(frozen=True)
class LookupConfig:
    """A lookup's parameters (go-libp2p-kad-dht's defaults)."""

    k: int = K
    alpha: int = ALPHA
    max_in_flight: int = MAX_IN_FLIGHT
    slow_after_ns: int = SLOW_AFTER_NS
    query_timeout_ns: int = QUERY_TIMEOUT_NS
    want_providers: int = 0
    """Stop once the driver confirmed this many distinct providers (0: a walk to the end)."""
    max_providers: int = 64
    """Providers kept at most, not counting failed ones (an answer cannot make a lookup hold
    more)."""
    count_unconfirmed: bool = False
    """Count providers toward ``want_providers`` as soon as an answer names them, as
    go-libp2p-kad-dht's ``FindProvidersAsync(count)`` does. Only for comparisons and for
    simulations whose answers cannot lie: one Sybil answer of fake records ends such a walk."""


@dataclass(frozen=True)
class Query:
    """Ask ``peer`` for the peers closest to the target (and its providers)."""

    peer: str
    key: DhtKey


class _State(Enum):
    NEW = 0
    IN_FLIGHT = 1
    ANSWERED = 2
    FAILED = 3


class _Provider(Enum):
    NAMED = 0
    """An answer named it; the driver has not said yet whether its dial confirmed it."""
    CONFIRMED = 1
    FAILED = 2


@dataclass(slots=True)
class _Candidate:
    peer: str
    key: DhtKey
    distance: int
    state: _State = _State.NEW
    sent_ns: int = 0


@dataclass(frozen=True)
class LookupResult:
    """What a lookup found: the closest answering peers (closest first), the providers named
    and not failed (in the order named), and those the driver confirmed."""

    closest: tuple[str, ...]
    providers: tuple[str, ...]
    queried: int
    failed: int
    confirmed: tuple[str, ...] = ()
    failed_providers: int = 0


@dataclass
class Lookup:
    """One lookup of ``target`` started from ``seeds`` (the routing table's closest peers)."""

    target: DhtKey
    seeds: Iterable[tuple[str, DhtKey]]
    config: LookupConfig = field(default_factory=LookupConfig)
    _candidates: dict[str, _Candidate] = field(default_factory=dict, repr=False)
    _providers: dict[str, _Provider] = field(default_factory=dict, repr=False)
    _kept: int = 0
    """Providers named or confirmed (not failed): what ``max_providers`` caps."""
    _confirmed: int = 0
    _started: bool = False

    def __post_init__(self) -> None:
        self._learn(self.seeds)

    # ---- driver calls

    def start(self, now_ns: int) -> list[Query]:
        """The first queries."""
        self._started = True
        return self._next(now_ns)

    def on_response(
        self,
        peer: str,
        closer: Iterable[tuple[str, DhtKey]],
        providers: Iterable[str],
        now_ns: int,
    ) -> list[Query]:
        """``peer`` answered with ``closer`` peers and ``providers``; the queries to send now.

        An answer from a peer that was not asked (or already timed out) is ignored.
        """
        c = self._candidates.get(peer)
        if c is None or c.state is not _State.IN_FLIGHT:
            return self._next(now_ns)
        c.state = _State.ANSWERED
        taken = 0
        for p in providers:
            if taken >= self.config.k or self._kept >= self.config.max_providers:
                break
            if p not in self._providers:
                self._providers[p] = _Provider.NAMED
                self._kept += 1
                taken += 1
        self._learn(list(closer)[: self.config.k])
        return self._next(now_ns)

    def on_provider_confirmed(self, provider: str, now_ns: int) -> list[Query]:
        """A dial to ``provider`` authenticated it (the peer its record was signed by): it
        counts toward ``want_providers``; the queries to send now (none once done).

        A provider no answer named (or one over ``max_providers``) counts too: the dial is
        what proves it."""
        state = self._providers.get(provider)
        if state is _Provider.CONFIRMED:
            return self._next(now_ns)
        if state is not _Provider.NAMED:
            self._kept += 1
        self._providers[provider] = _Provider.CONFIRMED
        self._confirmed += 1
        return self._next(now_ns)

    def on_provider_failed(self, provider: str, now_ns: int) -> list[Query]:
        """The dial to ``provider`` failed, or reached a peer that is not the record's signer
        or carries nothing: it never counts, and frees its place among ``max_providers``.
        (A provider already confirmed stays confirmed.)"""
        state = self._providers.get(provider)
        if state is _Provider.NAMED:
            self._providers[provider] = _Provider.FAILED
            self._kept -= 1
        elif state is None:
            self._providers[provider] = _Provider.FAILED
        return self._next(now_ns)

    def on_failure(self, peer: str, now_ns: int) -> list[Query]:
        """The query to ``peer`` failed (refused, unreachable, bad answer)."""
        c = self._candidates.get(peer)
        if c is not None and c.state is _State.IN_FLIGHT:
            c.state = _State.FAILED
        return self._next(now_ns)

    def poll(self, now_ns: int) -> list[Query]:
        """The timer fired: time out overdue queries; the queries to send now (in place of
        slow ones too)."""
        for c in self._candidates.values():
            if c.state is _State.IN_FLIGHT and now_ns - c.sent_ns >= self.config.query_timeout_ns:
                c.state = _State.FAILED
        return self._next(now_ns)

    def next_deadline(self, now_ns: int) -> int | None:
        """When :meth:`poll` has work next after ``now_ns``: a query in flight turning slow or
        timing out (None: nothing in flight)."""
        cfg = self.config
        times = [
            t
            for c in self._candidates.values()
            if c.state is _State.IN_FLIGHT
            for t in (c.sent_ns + cfg.slow_after_ns, c.sent_ns + cfg.query_timeout_ns)
            if t > now_ns
        ]
        return min(times) if times else None

    # ---- outcome

    @property
    def awaiting_confirmation(self) -> tuple[str, ...]:
        """Providers named whose dial the driver has not reported yet (in the order named)."""
        return tuple(p for p, s in self._providers.items() if s is _Provider.NAMED)

    @property
    def walked(self) -> bool:
        """The walk itself is over: the ``k`` closest peers not known to have failed have all
        answered (or none is left); confirmations may still be awaited."""
        return self._started and all(c.state is _State.ANSWERED for c in self._closest_alive())

    @property
    def done(self) -> bool:
        """Nothing more to learn (see the module docstring)."""
        if not self._started:
            return False
        cfg = self.config
        want = cfg.want_providers
        if want:
            if self._confirmed >= want:
                return True
            if cfg.count_unconfirmed and self._kept >= want:
                return True
        if not self.walked:
            return False
        # Walked to the end: a provider lookup still waits for the dials it named.
        return not want or cfg.count_unconfirmed or not self.awaiting_confirmation

    def result(self) -> LookupResult:
        """The closest peers that answered and the providers found so far."""
        answered = sorted(
            (c.distance, p) for p, c in self._candidates.items() if c.state is _State.ANSWERED
        )
        return LookupResult(
            closest=tuple(p for _, p in answered[: self.config.k]),
            providers=tuple(p for p, s in self._providers.items() if s is not _Provider.FAILED),
            queried=sum(c.state is not _State.NEW for c in self._candidates.values()),
            failed=sum(c.state is _State.FAILED for c in self._candidates.values()),
            confirmed=tuple(p for p, s in self._providers.items() if s is _Provider.CONFIRMED),
            failed_providers=sum(s is _Provider.FAILED for s in self._providers.values()),
        )

    # ---- rules

    def _learn(self, peers: Iterable[tuple[str, DhtKey]]) -> None:
        for peer, key in peers:
            if peer not in self._candidates:
                self._candidates[peer] = _Candidate(peer, key, distance(key, self.target))

    def _closest_alive(self) -> list[_Candidate]:
        alive = [c for c in self._candidates.values() if c.state is not _State.FAILED]
        alive.sort(key=lambda c: c.distance)
        return alive[: self.config.k]

    def _next(self, now_ns: int) -> list[Query]:
        if self.done:
            return []
        cfg = self.config
        in_flight = [c for c in self._candidates.values() if c.state is _State.IN_FLIGHT]
        active = sum(now_ns - c.sent_ns < cfg.slow_after_ns for c in in_flight)
        total = len(in_flight)
        out: list[Query] = []
        # Only the k closest peers not yet failed are worth asking: a farther one cannot
        # change the answer.
        for c in self._closest_alive():
            if active >= cfg.alpha or total >= cfg.max_in_flight:
                break
            if c.state is _State.NEW:
                c.state, c.sent_ns = _State.IN_FLIGHT, now_ns
                active += 1
                total += 1
                out.append(Query(c.peer, c.key))
        return out


__all__ = [
    "ALPHA",
    "MAX_IN_FLIGHT",
    "QUERY_TIMEOUT_NS",
    "SLOW_AFTER_NS",
    "Lookup",
    "LookupConfig",
    "LookupResult",
    "Query",
]
