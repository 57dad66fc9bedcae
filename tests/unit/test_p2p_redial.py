"""Redialing bootstrap peers: dropped peers are redialled with capped, jittered backoff."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from p2p.errors import InvalidPeerAddress
from p2p.redial import Redialer, peer_id_of
from p2p.transport import TransportError

A = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWA"
B = "/ip4/127.0.0.1/tcp/4002/p2p/12D3KooWB"


def test_peer_id_of() -> None:
    assert peer_id_of(A) == "12D3KooWA"
    with pytest.raises(InvalidPeerAddress, match="/p2p/"):
        peer_id_of("/ip4/127.0.0.1/tcp/4001")


def test_redials_only_missing_peers_with_backoff() -> None:
    connected: set[str] = {"12D3KooWA"}
    reachable = {"12D3KooWB": False}
    slept: list[float] = []

    async def connect(addr: str) -> str:
        peer = peer_id_of(addr)
        if not reachable.get(peer, True):
            raise TransportError("refused")
        connected.add(peer)
        return peer

    async def sleep(s: float) -> None:
        slept.append(s)

    r = Redialer(
        addrs=[A, B],
        connect=connect,
        connected_peers=lambda: sorted(connected),
        sleep=sleep,
        rng=random.Random(1),
        check_interval_s=1.0,
        base_delay_s=1.0,
        max_delay_s=8.0,
    )

    async def scenario() -> list[list[str]]:
        passes = []
        for _ in range(20):
            passes.append(await r.run_once())
            await r.sleep(r.check_interval_s)
            r._now += r.check_interval_s
        return passes

    passes = asyncio.run(scenario())
    # A is connected throughout and never dialled; B is dialled with growing gaps, capped.
    assert all(A not in p for p in passes)
    attempts = [i for i, p in enumerate(passes) if B in p]
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert attempts[0] == 0
    assert gaps == sorted(gaps) and max(gaps) <= 10  # 8 s cap + 20 % jitter, 1 s checks
    assert r.failures == len(attempts)
    # B comes back: the next due dial succeeds and the backoff resets.
    reachable["12D3KooWB"] = True
    r._now += 100
    assert asyncio.run(r.run_once()) == [B]
    assert "12D3KooWB" in connected
    assert asyncio.run(r.run_once()) == []
    # Dropped again: dialled immediately (backoff was reset), no real sleeping anywhere.
    connected.discard("12D3KooWB")
    assert asyncio.run(r.run_once()) == [B]
    assert all(s == 1.0 for s in slept)
