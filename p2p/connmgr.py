"""The gossip host's connection manager: peer high/low water, a per-IP cap and dial backoff.

py-libp2p 0.8.1 has a go-libp2p style pruner (``libp2p/network/connection_pruner.py``), but it
never closes a connection that has an open stream, and gossipsub keeps one open to every peer,
so it would never trim a gossip node; it has no per-IP cap, and its dial backoff is a fixed
60 s. This module decides instead, with the clock injected so it is tested without time or
sockets; :class:`p2p.libp2p_host.Libp2pTransport` applies the decisions on its trio thread
(docs/libp2p.md, "Connection manager"):

* **High/low water.** Above ``high_water`` connected peers, peers are disconnected down to
  ``low_water``: inbound before outbound (the peers this node chose: bootstrap, discovered
  carriers of what it follows), newest first (an established peer is worth more than one that
  just arrived, and a flood of fresh connections trims itself), never a protected peer
  (bootstrap) nor one connected less than ``grace_s`` ago.
* **Per-IP cap.** A new inbound peer whose IP address already has ``max_per_ip`` connected
  peers is disconnected at once (protected peers exempt): one machine cannot take every slot.
  A relayed connection has no IP of its own (its address is the relay's: every peer reached
  through one relay would share it), so it is never capped.
* **Relay reservations** (``p2p/relay.py``) are protected while held: a private node's
  connection to its relay, and on a relay the connections of the peers holding a slot.
* **Dial backoff.** A peer whose dial failed is not dialled again for ``dial_backoff_base_s``,
  doubling per further failure up to ``dial_backoff_max_s``; a successful connection resets it.
  Protected (bootstrap) peers are exempt: ``p2p/redial.py`` paces their redials itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ConnLimits:
    """The manager's bounds (``[p2p]`` keys of the same names, docs/libp2p.md)."""

    high_water: int = 96
    low_water: int = 64
    max_per_ip: int = 0
    """0: no per-IP cap."""
    grace_s: float = 20.0
    dial_backoff_base_s: float = 5.0
    dial_backoff_max_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.low_water <= self.high_water:
            raise ValueError(
                f"need 0 < low_water <= high_water, got {self.low_water} / {self.high_water}"
            )
        if self.max_per_ip < 0 or self.grace_s < 0:
            raise ValueError("max_per_ip and grace_s must be >= 0")
        if not 0 < self.dial_backoff_base_s <= self.dial_backoff_max_s:
            raise ValueError("need 0 < dial_backoff_base_s <= dial_backoff_max_s")


@dataclass(frozen=True, slots=True)
class PeerConn:
    """One connected peer as the manager sees it."""

    peer: str
    ip: str | None
    """The remote IP address (None: unknown, never capped)."""
    inbound: bool


@dataclass
class ConnectionManager:
    """Decides which peers to disconnect and which dials to hold back."""

    limits: ConnLimits
    clock: Callable[[], float]
    protected: frozenset[str] = frozenset()
    trimmed: int = 0
    """Peers disconnected for being over high water, so far."""
    refused_per_ip: int = 0
    """Inbound peers disconnected for the per-IP cap, so far."""
    _since: dict[str, float] = field(default_factory=dict)
    _backoff: dict[str, tuple[float, float]] = field(default_factory=dict)
    """peer -> (delay of the last failure, time it may be dialled again)."""

    def update(self, conns: Iterable[PeerConn], keep: Collection[str] = ()) -> list[str]:
        """Take the current connected peers; the peers to disconnect now, each once. ``keep``:
        peers protected for now besides :attr:`protected` (relay reservations, whose holders
        are reachable only through that connection)."""
        now = self.clock()
        protected = self.protected | frozenset(keep) if keep else self.protected
        current = {c.peer: c for c in conns}
        for peer in list(self._since):
            if peer not in current:
                del self._since[peer]
        new = [c for c in current.values() if c.peer not in self._since]
        for c in current.values():
            self._since.setdefault(c.peer, now)
        drop: list[str] = []
        if self.limits.max_per_ip:
            per_ip: dict[str, int] = {}
            for c in current.values():
                if c.ip is not None and c not in new:
                    per_ip[c.ip] = per_ip.get(c.ip, 0) + 1
            for c in new:
                if c.ip is None:
                    continue
                if (
                    c.inbound
                    and c.peer not in protected
                    and per_ip.get(c.ip, 0) >= self.limits.max_per_ip
                ):
                    drop.append(c.peer)
                    self.refused_per_ip += 1
                else:
                    per_ip[c.ip] = per_ip.get(c.ip, 0) + 1
        remaining = [c for c in current.values() if c.peer not in drop]
        if len(remaining) > self.limits.high_water:
            excess = len(remaining) - self.limits.low_water
            candidates = sorted(
                (
                    c
                    for c in remaining
                    if c.peer not in protected and now - self._since[c.peer] >= self.limits.grace_s
                ),
                # inbound first, then the newest first
                key=lambda c: (not c.inbound, -self._since[c.peer]),
            )
            trim = [c.peer for c in candidates[:excess]]
            self.trimmed += len(trim)
            drop += trim
        for peer in drop:
            # Forgotten now: if it reconnects it is a new arrival again.
            self._since.pop(peer, None)
        return drop

    def dial_wait_s(self, peer: str) -> float:
        """Seconds before ``peer`` may be dialled again (0: now)."""
        if peer in self.protected:
            return 0.0
        entry = self._backoff.get(peer)
        return max(0.0, entry[1] - self.clock()) if entry else 0.0

    def dial_failed(self, peer: str) -> None:
        """Record a failed dial of ``peer``: its backoff doubles."""
        last = self._backoff.get(peer)
        delay = (
            self.limits.dial_backoff_base_s
            if last is None
            else min(last[0] * 2, self.limits.dial_backoff_max_s)
        )
        self._backoff[peer] = (delay, self.clock() + delay)
        # Bounded: expired entries go (a peer dialled once a day must not keep one for ever).
        if len(self._backoff) > 4096:
            now = self.clock()
            for p, (_, until) in list(self._backoff.items()):
                if until <= now:
                    del self._backoff[p]

    def dial_succeeded(self, peer: str) -> None:
        """``peer`` is connected: its backoff is reset."""
        self._backoff.pop(peer, None)
