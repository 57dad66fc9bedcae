"""Inbound connections that end when their connection ends (py-libp2p 0.8.1's swarm, corrected).

py-libp2p 0.8.1's ``Swarm._do_handle_inbound_connection`` runs once per accepted TCP connection,
in a task of trio's ``serve_listeners``: that task closes the socket when the handler returns,
so after upgrading the connection (security, multiplexer) the handler stays alive -- until
``self.manager.wait_finished()``, that is until the *swarm* stops, not until the connection
closes. Every inbound connection a node ever accepted therefore kept its handler task, its
frames and its raw connection in memory for the life of the process: measured with
``ODF_NODE_TRACEMALLOC=1 make bench-longrun`` (docs/operations.md), the libp2p process grew
by one such set of objects (``swarm.py``'s handler, trio's ``_run_handler``, the TCP stream) per
churned peer that dialed it -- about 200 an hour, most of that process's RSS slope.

:func:`end_inbound_handlers_with_their_connections` wraps that method on one swarm: the
library's handler runs beside a watcher that, once the connection is upgraded, waits for the
multiplexed connection's ``event_closed`` (yamux and mplex set it when the connection ends, by
either side) and then cancels the handler; its socket is already closed and nothing else holds
its objects. A handler that fails before the upgrade, or a swarm that stops, ends it as before.
Nothing in the library is edited; a py-libp2p release that fixes this makes the wrapper a no-op
in effect (the handler returns first).
"""

from __future__ import annotations

import contextvars
from typing import Any

import trio

_UPGRADED: contextvars.ContextVar[tuple[list[Any], trio.Event]] = contextvars.ContextVar(
    "odf_inbound_upgraded"
)
"""The current inbound handler's slot for its upgraded connection, and the event that says it
was filled (set by the wrapped ``upgrade_inbound_raw_conn``, which runs in the handler's task)."""


def end_inbound_handlers_with_their_connections(swarm: Any) -> None:
    """Make ``swarm``'s inbound connection handlers end when their connections close."""
    handle = swarm._do_handle_inbound_connection
    upgrade = swarm.upgrade_inbound_raw_conn

    async def upgrade_and_tell(raw_conn: Any, maddr: Any) -> Any:
        muxed = await upgrade(raw_conn, maddr)
        slot = _UPGRADED.get(None)
        if slot is not None:
            slot[0].append(muxed)
            slot[1].set()
        return muxed

    async def handle_until_closed(read_write_closer: Any, maddr: Any, failure_event: Any) -> None:
        upgraded: list[Any] = []
        done = trio.Event()
        _UPGRADED.set((upgraded, done))  # before start_soon: the child task copies the context
        async with trio.open_nursery() as nursery:

            async def library_handler() -> None:
                await handle(read_write_closer, maddr, failure_event)
                nursery.cancel_scope.cancel()

            nursery.start_soon(library_handler)
            await done.wait()
            closed = getattr(upgraded[0], "event_closed", None)
            if closed is None:  # a multiplexer without the event: the library's own barrier
                return
            await closed.wait()
            nursery.cancel_scope.cancel()

    swarm._do_handle_inbound_connection = handle_until_closed
    swarm.upgrade_inbound_raw_conn = upgrade_and_tell


__all__ = ["end_inbound_handlers_with_their_connections"]
