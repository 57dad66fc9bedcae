"""The relay service under abuse, over real libp2p hosts on loopback (TCP, noise, yamux; run it
inside ``unshare -rn``): fresh identities that reserve and leave, circuits from fresh identities
held open, and bytes pushed through a circuit. The bounds are p2p/relay_hop.py's; docs/nat.md
"The relay under abuse" has the figures."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.tools.anyio_service import background_trio_service

from p2p.relay import RelayLimits, RelaySupport

SINK = "/odf-test/sink/1.0.0"


@asynccontextmanager
async def _node(seed: int, limits: RelayLimits, *, service: bool = False) -> AsyncIterator[Any]:
    host = new_host(
        key_pair=create_new_key_pair(seed.to_bytes(4, "big") * 8),
        listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")],
        enable_mDNS=False,
        enable_upnp=False,
        enable_autotls=False,
        enable_quic=False,
        bootstrap=None,
    )
    relay = RelaySupport(
        host,
        service=service,
        client=True,
        limits=limits,
        candidates=lambda: (),
        on_change=lambda _: None,
    )
    async with (
        host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]),
        background_trio_service(relay.protocol),
        trio.open_nursery() as nursery,
    ):
        relay.nursery = nursery  # type: ignore[attr-defined]
        yield relay
        nursery.cancel_scope.cancel()


def _addr(relay: RelaySupport) -> str:
    return f"{relay.host.get_addrs()[0]}"


async def _reserve(client: RelaySupport, relay_addr: str) -> bool:
    await client.host.connect(info_from_p2p_addr(multiaddr.Multiaddr(relay_addr)))
    with trio.move_on_after(10):
        await client._reserve(relay_addr, client.nursery)  # type: ignore[attr-defined]
    return bool(client.relayed)


def test_fresh_identities_that_reserve_and_leave_do_not_lock_the_relay() -> None:
    async def main() -> tuple[list[bool], bool, list[bool], bool]:
        limits = RelayLimits(max_reservations=4)
        async with _node(1, limits, service=True) as relay:
            target = _addr(relay)
            left = []
            for i in range(6):  # more fresh identities than slots, one after the other
                async with _node(100 + i, limits) as sybil:
                    left.append(await _reserve(sybil, target))
                    # Hangs up (leaving the host alone keeps its socket open in this process).
                    await sybil.host.disconnect(relay.host.get_id())
                await trio.sleep(0.3)
            async with _node(2, limits) as honest:
                after_leavers = await _reserve(honest, target)
                # Four identities that stay connected do fill the slots.
                async with (
                    _node(200, limits) as a,
                    _node(201, limits) as b,
                    _node(202, limits) as c,
                    _node(203, limits) as d,
                ):
                    held = [await _reserve(x, target) for x in (a, b, c)]
                    fifth = await _reserve(d, target)
        return left, after_leavers, held, fifth

    left, after_leavers, held, fifth = trio.run(main)
    # Before: the first four held their slots for the reservation TTL (an hour) after leaving.
    assert left == [True] * 6
    assert after_leavers
    assert held == [True] * 3
    assert not fifth


async def _sink(stream: Any) -> None:
    try:
        while await stream.read(65536):
            pass
    except Exception:
        pass


def test_circuits_from_fresh_identities_are_bounded_and_end_at_their_duration() -> None:
    async def main() -> tuple[list[bool], int, int, float]:
        limits = RelayLimits(max_circuits=16, max_circuits_per_peer=3, circuit_duration_s=4)
        async with _node(1, limits, service=True) as relay, _node(3, limits) as dest:
            target = _addr(relay)
            assert await _reserve(dest, target)
            circuit = dest.relayed[relay.host.get_id().to_string()]
            dials = []
            async with trio.open_nursery() as n:
                sources = []
                for i in range(6):
                    src = await n.start(_source, 300 + i, limits)
                    sources.append(src)
                for src in sources:
                    try:
                        with trio.fail_after(10):
                            await src.dial(circuit)
                        dials.append(True)
                    except Exception:
                        dials.append(False)
                await trio.sleep(0.5)
                open_now = relay.protocol.accounts.open_total
                t0 = time.monotonic()
                while relay.protocol.accounts.open_total and time.monotonic() - t0 < 15:
                    await trio.sleep(0.1)
                ended_after = time.monotonic() - t0
                open_later = relay.protocol.accounts.open_total
                n.cancel_scope.cancel()
        return dials, open_now, open_later, ended_after

    dials, open_now, open_later, ended_after = trio.run(main)
    # Before: the library capped circuits per destination at max_circuit_conns (16 by default)
    # and never closed an idle circuit.
    assert dials.count(True) == 3
    assert open_now == 3
    assert open_later == 0 and ended_after < 6


async def _source(
    seed: int, limits: RelayLimits, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    async with _node(seed, limits) as src:
        task_status.started(src)
        await trio.sleep_forever()


def test_bytes_pushed_through_a_circuit_stop_at_the_peer_budget() -> None:
    async def main() -> tuple[int, int]:
        limits = RelayLimits(peer_bytes=1 << 20, circuit_bytes=64 << 20)
        received = [0]

        async def count(stream: Any) -> None:
            try:
                while data := await stream.read(65536):
                    received[0] += len(data)
            except Exception:
                pass

        async with (
            _node(1, limits, service=True) as relay,
            _node(3, limits) as dest,
            _node(4, limits) as src,
        ):
            dest.host.set_stream_handler(SINK, count)
            assert await _reserve(dest, _addr(relay))
            await src.dial(dest.relayed[relay.host.get_id().to_string()])
            stream = await src.host.new_stream(dest.host.get_id(), [SINK])
            sent = 0
            with trio.move_on_after(20):
                try:
                    for _ in range(64):
                        await stream.write(b"z" * 65536)
                        sent += 65536
                except Exception:
                    pass
            await trio.sleep(1)
        return sent, received[0]

    sent, received = trio.run(main)
    assert received <= 1 << 20
    assert sent < 4 << 20


def test_fresh_identities_from_one_ip_address_hold_at_most_the_per_ip_reservations() -> None:
    """Fresh peer ids that stay connected from one address (loopback here) get at most
    ``max_reservations_per_ip`` slots of a relay with room for more (before: all 16); one that
    leaves frees its address's slot."""

    async def main() -> tuple[list[bool], bool]:
        limits = RelayLimits(max_reservations=16, max_reservations_per_ip=2)
        async with _node(3, limits, service=True) as relay:
            target = _addr(relay)
            async with (
                _node(300, limits) as a,
                _node(301, limits) as b,
                _node(302, limits) as c,
                _node(303, limits) as d,
            ):
                held = [await _reserve(x, target) for x in (a, b, c, d)]
                await a.host.disconnect(relay.host.get_id())
                await trio.sleep(0.3)
                async with _node(304, limits) as e:
                    after_one_left = await _reserve(e, target)
        return held, after_one_left

    held, after_one_left = trio.run(main)
    assert held == [True, True, False, False]
    assert after_one_left
