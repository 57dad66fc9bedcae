"""Keep bootstrap peers connected: redial the ones that dropped, with capped backoff.

The loop is plain asyncio with the sleep, randomness and transport calls injected, so it is
tested without real time or sockets. Each bootstrap address must end in ``/p2p/<peer id>`` so a
missing peer can be recognised among the connected ones.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from p2p.errors import InvalidPeerAddress
from p2p.transport import TransportError

Connect = Callable[[str], Awaitable[str]]
ConnectedPeers = Callable[[], Sequence[str]]
Sleep = Callable[[float], Awaitable[None]]


def peer_id_of(multiaddr: str) -> str:
    """The peer id at the end of a ``…/p2p/<id>`` multiaddr.

    Raises:
        ValueError: the address has no ``/p2p/`` component.
    """
    _head, sep, peer = multiaddr.rpartition("/p2p/")
    if not sep or not peer or "/" in peer:
        raise InvalidPeerAddress(
            f"bootstrap address needs a /p2p/<peer id> suffix: {multiaddr!r} ([p2p] bootstrap)"
        )
    return peer


@dataclass
class Redialer:
    """Redials bootstrap peers that are not connected.

    A peer's retry delay doubles after each failed dial (from ``base_delay_s`` up to
    ``max_delay_s``, with ±20 % jitter so a restarted cluster does not dial in lock-step) and
    resets once it is connected again.
    """

    addrs: Sequence[str]
    connect: Connect
    connected_peers: ConnectedPeers
    sleep: Sleep
    rng: random.Random
    check_interval_s: float = 5.0
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    dials: int = 0
    failures: int = 0
    _next_try: dict[str, float] = field(default_factory=dict)
    _delay: dict[str, float] = field(default_factory=dict)
    _now: float = 0.0

    def __post_init__(self) -> None:
        self._peers = {peer_id_of(a): a for a in self.addrs}

    async def run_once(self) -> list[str]:
        """One pass: dial every due, disconnected bootstrap peer; returns the addresses dialled."""
        connected = set(self.connected_peers())
        dialled = []
        for peer, addr in self._peers.items():
            if peer in connected:
                self._delay.pop(peer, None)
                self._next_try.pop(peer, None)
                continue
            if self._next_try.get(peer, 0.0) > self._now:
                continue
            dialled.append(addr)
            self.dials += 1
            try:
                await self.connect(addr)
                self._delay.pop(peer, None)
                self._next_try.pop(peer, None)
            except TransportError:
                self.failures += 1
                delay = min(self._delay.get(peer, self.base_delay_s / 2) * 2, self.max_delay_s)
                self._delay[peer] = delay
                self._next_try[peer] = self._now + delay * self.rng.uniform(0.8, 1.2)
        return dialled

    async def run(self) -> None:
        """Run forever (cancel the task to stop)."""
        while True:
            await self.run_once()
            await self.sleep(self.check_interval_s)
            self._now += self.check_interval_s
