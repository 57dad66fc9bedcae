"""Network-safety guard: nodes started by tests may only ever see the loopback interface.

Tests (and the embedded launcher unless explicitly told otherwise) call
:func:`require_loopback_only` before starting an IPFS or libp2p node. It refuses to proceed when
any network interface other than ``lo`` exists in the *current* network namespace, i.e. outside
``unshare -rn`` (a namespace created by the test command, with only ``lo`` up).

The interfaces are read with ``if_nameindex()`` (netlink, always the caller's namespace) and
``/proc/self/net/dev``. ``/sys/class/net`` is *not* used alone: under ``unshare -rn`` without a
new mount namespace it still shows the host's interfaces (sysfs reflects the namespace of the
process that mounted it), so it is only consulted as a last resort.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

# One error for both guards (gossip and IPFS): raised when a non-loopback interface exists.
from p2p.errors import NetworkNotIsolated

_PROC_NET_DEV = Path("/proc/self/net/dev")
_SYS_NET = Path("/sys/class/net")


def _proc_interfaces(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines()[2:]:
        if ":" in line:
            names.add(line.split(":", 1)[0].strip())
    return names


def network_interfaces() -> set[str]:
    """All interface names visible in this process's network namespace."""
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
    """Names of network interfaces other than ``lo``."""
    return sorted(n for n in network_interfaces() if n != "lo")


def require_loopback_only() -> None:
    """Raise :class:`NetworkNotIsolated` unless ``lo`` is the only network interface.

    Run the command inside a loopback-only namespace, e.g.::

        unshare -rn bash -c 'ip link set lo up; .venv/bin/pytest ...'
    """
    others = non_loopback_interfaces()
    if others:
        raise NetworkNotIsolated(
            "refusing to start an IPFS/libp2p node: non-loopback network interfaces exist "
            f"({', '.join(others)}). Run inside a loopback-only network namespace: "
            "unshare -rn bash -c 'ip link set lo up; <command>'"
        )
