"""Whether a libp2p connection runs over a circuit relay (shared by the relay service, the
relay's hop limits, hole punching and the host's per-IP cap).

A module of its own so that ``p2p.relay`` and ``p2p.relay_hop`` can both use it without
importing each other.
"""

from __future__ import annotations

from typing import Any

RELAY_MARK = "/p2p-circuit"


def is_relayed_conn(conn: Any) -> bool:
    """Whether a libp2p connection runs over a circuit relay: its remote address is then the
    relay's, shared by every peer reached through it, so the per-IP cap must not count it."""
    import contextlib

    from libp2p.connection_types import ConnectionType

    # py-libp2p 0.8.1 tags the swarm connection of an accepted circuit; the secured layers
    # below it do not all pass the type through. Its own transport addresses only: without
    # them get_transport_addresses() falls back to the peerstore's, which may list the peer's
    # relayed address for a direct connection.
    layer: Any
    for layer in (conn, getattr(conn, "muxed_conn", None)):
        with contextlib.suppress(Exception):
            if layer.get_connection_type() == ConnectionType.RELAYED:
                return True
    addrs = getattr(conn, "_actual_transport_addresses", None) or ()
    return any(RELAY_MARK in str(a) for a in addrs)
