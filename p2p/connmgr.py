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
* **Dial backoff, per (peer, address)**, as go-libp2p's swarm keeps it (libp2p/go-libp2p,
  ``p2p/net/swarm/swarm_dial.go``, ``DialBackoff.Backoff(peer, addr)``): an address whose dial
  failed is not dialled again for ``dial_backoff_base_s``, doubling per further failure up to
  ``dial_backoff_max_s``; an address of the same peer never tried (a discovery record with a
  relayed address, after the private one failed) is dialled at once. A successful connection
  resets every address of the peer. Protected (bootstrap) peers are exempt: ``p2p/redial.py``
  paces their redials itself. At most :data:`MAX_BACKOFF_ENTRIES` addresses are remembered
  (expired ones go first, then those whose backoff ends soonest: forgetting one only lets a
  dial through early).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

MAX_BACKOFF_ENTRIES = 4096
"""The (peer, address) dial backoffs remembered at most (bounded memory: discovery may
try thousands of addresses)."""


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
    _backoff: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    """peer -> address -> (delay of the last failure, time it may be dialled again)."""
    _entries: int = 0
    """Addresses in :attr:`_backoff`, all peers together."""

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

    def dial_wait_s(self, peer: str, addr: str) -> float:
        """Seconds before ``peer`` may be dialled again at ``addr`` (0: now)."""
        if peer in self.protected:
            return 0.0
        entry = self._backoff.get(peer, {}).get(addr)
        return max(0.0, entry[1] - self.clock()) if entry else 0.0

    def dial_failed(self, peer: str, addr: str) -> None:
        """Record a failed dial of ``peer`` at ``addr``: that address's backoff doubles."""
        addrs = self._backoff.setdefault(peer, {})
        last = addrs.get(addr)
        delay = (
            self.limits.dial_backoff_base_s
            if last is None
            else min(last[0] * 2, self.limits.dial_backoff_max_s)
        )
        if last is None:
            self._entries += 1
        addrs[addr] = (delay, self.clock() + delay)
        if self._entries > MAX_BACKOFF_ENTRIES:
            self._shrink()

    def dial_succeeded(self, peer: str) -> None:
        """``peer`` is connected: the backoff of each of its addresses is reset."""
        self._entries -= len(self._backoff.pop(peer, {}))

    def _shrink(self) -> None:
        # Expired entries go (a peer dialled once a day must not keep one for ever); if every
        # entry is still running (a flood of failing addresses), those ending soonest go until
        # a quarter of the room is free, so this runs once per many failures, not per failure.
        now = self.clock()
        flat = [
            (until, p, a) for p, addrs in self._backoff.items() for a, (_, until) in addrs.items()
        ]
        flat.sort()
        target = MAX_BACKOFF_ENTRIES * 3 // 4
        drop = [e for e in flat if e[0] <= now]
        if len(flat) - len(drop) > target:
            drop = flat[: len(flat) - target]
        for _, p, a in drop:
            addrs = self._backoff[p]
            del addrs[a]
            if not addrs:
                del self._backoff[p]
        self._entries = len(flat) - len(drop)
