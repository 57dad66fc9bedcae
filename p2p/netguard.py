"""Network-safety guard, the one the whole node uses: nodes start only where nothing but ``lo`` is.

Every launcher that can send traffic (the libp2p host, the embedded IPFS node, simulated clusters,
test fixtures) calls :func:`assert_loopback_only` before it starts, and the libp2p host checks
each listen, bootstrap and dial address with :func:`assert_loopback_multiaddr`, unless the
operator chose another ``[network] isolation``.

The interfaces are read with ``if_nameindex()`` (netlink, always the caller's namespace) and
``/proc/self/net/dev``, and their union is used, so one source that fails or lags cannot hide an
interface. ``/sys/class/net`` is only a last resort: under ``unshare -rn`` without a new mount
namespace it still shows the host's interfaces (sysfs reflects the namespace of the process that
mounted it).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

from p2p.errors import NetworkNotIsolated

__all__ = [
    "NetworkNotIsolated",
    "assert_loopback_multiaddr",
    "assert_loopback_only",
    "network_interfaces",
    "non_loopback_interfaces",
]

_PROC_NET_DEV = Path("/proc/self/net/dev")
_SYS_NET = Path("/sys/class/net")
_HOW = "run inside a loopback-only network namespace: unshare -rn bash -c 'ip link set lo up; ...'"


def _proc_interfaces(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines()[2:]:
        if ":" in line:
            names.add(line.split(":", 1)[0].strip())
    return names


def network_interfaces() -> set[str]:
    """All interface names visible in this process's network namespace.

    Raises:
        NetworkNotIsolated: no source could list them (then isolation cannot be shown).
    """
    names: set[str] = set()
    found = False
    try:
        names |= {name for _, name in socket.if_nameindex()}
        found = True
    except OSError:
        pass
    try:
        names |= _proc_interfaces(_PROC_NET_DEV)
        found = True
    except OSError:
        pass
    if not found:
        try:
            names |= set(os.listdir(_SYS_NET))
        except OSError as e:
            raise NetworkNotIsolated("cannot list network interfaces") from e
    return names


def non_loopback_interfaces() -> list[str]:
    """Names of network interfaces other than ``lo`` in this namespace, sorted."""
    return sorted(n for n in network_interfaces() if n != "lo")


def assert_loopback_only(what: str = "a network node") -> None:
    """Refuse to start ``what`` when any interface other than ``lo`` exists.

    Raises:
        NetworkNotIsolated: with the offending interface names and how to isolate the process.
    """
    extra = non_loopback_interfaces()
    if extra:
        raise NetworkNotIsolated(
            f"refusing to start {what}: non-loopback network interfaces present "
            f"({', '.join(extra)}); {_HOW}"
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
