"""Network-safety guard: the libp2p host only ever runs in a loopback-only network namespace.

Checked with ``socket.if_nameindex()``, which reflects the *current* network namespace
(``/sys/class/net`` does not when sysfs was mounted in another namespace).
"""

from __future__ import annotations

import ipaddress
import socket

from p2p.errors import NetworkNotIsolated


def non_loopback_interfaces() -> list[str]:
    """Names of network interfaces other than ``lo`` in this namespace."""
    return sorted(name for _, name in socket.if_nameindex() if name != "lo")


def assert_loopback_only() -> None:
    """Refuse to run when any interface other than ``lo`` exists.

    Raises:
        NetworkNotIsolated: with the offending interface names and how to isolate the process.
    """
    extra = non_loopback_interfaces()
    if extra:
        raise NetworkNotIsolated(
            "refusing to start the libp2p host: non-loopback interfaces present "
            f"({', '.join(extra)}); "
            "run inside a loopback-only namespace: unshare -rn bash -c 'ip link set lo up; ...'"
        )


def assert_loopback_multiaddr(addr: str) -> None:
    """Refuse any multiaddr that is not ``/ip4/127.x.x.x/...`` (listen, bootstrap, dial).

    Raises:
        NetworkNotIsolated: the address could reach beyond loopback.
    """
    parts = addr.split("/")
    if len(parts) < 3 or parts[1] != "ip4":
        raise NetworkNotIsolated(f"only /ip4/127.0.0.1 multiaddrs are allowed, got {addr!r}")
    try:
        ip = ipaddress.IPv4Address(parts[2])
    except ValueError as e:
        raise NetworkNotIsolated(f"bad IPv4 address in {addr!r}") from e
    if not ip.is_loopback:
        raise NetworkNotIsolated(f"non-loopback address refused: {addr!r}")
