"""An inbound libp2p connection's handler ends with its connection (p2p/inbound_conns.py).

py-libp2p 0.8.1 keeps each accepted connection's handler task (and its raw connection) until
the swarm stops; a node that peers keep dialing grew by one per connection. Two real hosts on
loopback (TCP, noise, yamux): a peer dials, then hangs up, five times; the listener's handler
tasks for those connections must be gone, and one is live only while its peer is connected.
Without the correction the count is the number of connections ever accepted.
"""

from __future__ import annotations

from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr

from p2p.inbound_conns import end_inbound_handlers_with_their_connections


def _handler_tasks() -> int:
    """trio tasks running ``serve_listeners``' per-connection handler, anywhere in this run."""
    count = 0
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task.coro.cr_code.co_name == "_run_handler":
            count += 1
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return count


def _host(seed: int) -> Any:
    return new_host(
        key_pair=create_new_key_pair(bytes([seed]) * 32),
        listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")],
        enable_mDNS=False,
        enable_upnp=False,
        enable_autotls=False,
        enable_quic=False,
        bootstrap=None,
    )


async def _dial_and_hang_up(seed: int, target: str) -> int:
    """A fresh peer connects to ``target``; the listener's live handlers while it is connected."""
    peer = _host(seed)
    async with peer.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        await peer.connect(info_from_p2p_addr(multiaddr.Multiaddr(target)))
        await trio.sleep(0.2)
        live = _handler_tasks()
        await peer.disconnect(info_from_p2p_addr(multiaddr.Multiaddr(target)).peer_id)
    return live


def _run(corrected: bool) -> tuple[list[int], int]:
    async def main() -> tuple[list[int], int]:
        listener = _host(1)
        if corrected:
            end_inbound_handlers_with_their_connections(listener.get_network())
        async with listener.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            target = f"{listener.get_addrs()[0]}"
            while_connected = [await _dial_and_hang_up(10 + i, target) for i in range(5)]
            with trio.fail_after(10):
                while corrected and _handler_tasks() > 0:
                    await trio.sleep(0.05)
            await trio.sleep(0.3)
            after = _handler_tasks()
            listener.get_network().manager.cancel()
            return while_connected, after

    return trio.run(main)


def test_handlers_end_with_their_connections() -> None:
    while_connected, after = _run(corrected=True)
    # The dialer's own listener accepts nothing; the listener serves exactly its one peer.
    assert while_connected == [1, 1, 1, 1, 1]
    assert after == 0


def test_the_uncorrected_swarm_keeps_every_handler() -> None:
    """Flags a py-libp2p release that changes this (the correction is then not needed)."""
    while_connected, after = _run(corrected=False)
    assert while_connected == [1, 2, 3, 4, 5]
    assert after == 5
