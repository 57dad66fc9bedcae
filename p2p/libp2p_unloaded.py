"""Keep py-libp2p's optional subsystems that odf-node never runs out of the gossip process.

``import libp2p`` loads every subsystem at module level, whether a host uses it or not: mDNS
discovery (``zeroconf``), UPnP port mapping (``miniupnpc``), the AutoTLS ACME client (``httpx``,
``requests`` and, through them, ``click``, ``rich`` and ``pygments``), the OSO observability
providers (``requests``), libp2p's own Prometheus metrics (``prometheus_client``) and the
Kademlia DHT (``libp2p.kad_dht``, with bitswap and records behind it). odf-node starts its host
with all of them off (``p2p/libp2p_host.py``: no mDNS, no UPnP, no AutoTLS, no metrics, no DHT;
the network-safety rules forbid mDNS, port mapping and routing), yet loading them costs the
gossip process about 21 MB of RSS, a seventh of the node's idle budget (issue 15: 150 MB).

:func:`install` puts a finder first on ``sys.meta_path`` that answers for exactly the packages
in :data:`UNLOADED` with a placeholder module. libp2p's module-level ``from zeroconf import
Zeroconf``, ``class X(ServiceListener)`` and annotations then work, and anything that would
*run* one of these subsystems (instantiating or calling a placeholder) raises
:class:`Libp2pSubsystemUnloaded` naming the package and why it is absent, instead of doing
network I/O nobody configured. The finder is installed only in the gossip process
(``p2p/libp2p_child.py``), before it imports libp2p; the daemon keeps the real packages.

py-libp2p is pinned (``constraints.txt``); ``tests/integration/test_libp2p_process.py`` runs
real hosts through this process, so an upgrade that starts using one of these packages on the
paths odf-node runs fails there with this error, not silently.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any, NoReturn

from p2p.errors import P2PError

# Top-level package -> the py-libp2p subsystem that needs it, which odf-node never starts.
UNLOADED: dict[str, str] = {
    "zeroconf": "mDNS peer discovery (enable_mDNS=False)",
    "miniupnpc": "UPnP port mapping (enable_upnp=False)",
    "httpx": "the AutoTLS ACME client (enable_autotls=False)",
    "requests": "the AutoTLS ACME client and OSO observability providers (both off)",
    "prometheus_client": "libp2p's own Prometheus metrics (enable_metrics=False)",
    # A subpackage: the circuit-relay transport imports it, and basic_host imports the relay
    # package for a helper, but neither runs a DHT unless asked; no routing is the rule here.
    "libp2p.kad_dht": "the Kademlia DHT (no routing: odf-node never starts one)",
    # Transports odf-node never listens or dials on (TCP only: enable_quic=False, no /ws
    # address), and the persistent peerstore (the host keeps its peers in memory). libp2p
    # imports them at module level for names and ``except`` clauses only; about 4.5 MB.
    "aioquic": "the QUIC transport (enable_quic=False)",
    "libp2p.transport.quic": "the QUIC transport (enable_quic=False)",
    "libp2p.transport.websocket": "the WebSocket transport (TCP addresses only)",
    "trio_websocket": "the WebSocket transport (TCP addresses only)",
    "wsproto": "the WebSocket transport (TCP addresses only)",
    "libp2p.peer.persistent": "the persistent peerstore (peers are kept in memory)",
}


class Libp2pSubsystemUnloaded(P2PError):
    """Code in the gossip process tried to use a py-libp2p subsystem odf-node does not load."""

    def __init__(self, module: str, name: str) -> None:
        package = next((p for p in UNLOADED if module == p or module.startswith(p + ".")), module)
        super().__init__(
            f"{module}.{name} is not loaded in odf-node's gossip process: {package} is only "
            f"used by {UNLOADED.get(package, 'a subsystem odf-node does not run')}"
        )
        self.module = module
        self.name = name


class _Placeholder:
    """Base of the stand-ins for names of an unloaded package: usable in class statements and
    annotations, never constructed."""

    __placeholder_module__ = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # libp2p subclasses some of these (e.g. zeroconf's ServiceListener) at import time.
        pass

    def __new__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise Libp2pSubsystemUnloaded(cls.__placeholder_module__ or cls.__module__, cls.__name__)


class _PlaceholderModule(ModuleType):
    """A module of an unloaded package: every public attribute is a placeholder class."""

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        stand_in: type
        if name.endswith(("Error", "Exception")):
            # Named in ``except`` clauses, which need an exception class; never raised.
            stand_in = type(name, (Exception,), {"__module__": self.__name__})
        else:
            stand_in = type(name, (_Placeholder,), {"__placeholder_module__": self.__name__})
        setattr(self, name, stand_in)
        return stand_in


class _PlaceholderLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return _PlaceholderModule(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        # A package, so that ``import zeroconf.asyncio`` also gets a placeholder.
        module.__path__ = []


class UnloadedFinder(importlib.abc.MetaPathFinder):
    """Answers for the packages in :data:`UNLOADED` (and their submodules) with placeholders."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == name or fullname.startswith(name + ".") for name in UNLOADED):
            return None
        return importlib.machinery.ModuleSpec(fullname, _PlaceholderLoader(), is_package=True)


def install() -> None:
    """Install the finder (idempotent). Call before the first ``import libp2p``.

    Refuses if one of the packages is already imported: placeholders would then mix with the
    real package.
    """
    if any(isinstance(f, UnloadedFinder) for f in sys.meta_path):
        return
    present = sorted(name for name in UNLOADED if name in sys.modules)
    if present:
        raise RuntimeError(f"already imported, cannot be left unloaded: {', '.join(present)}")
    sys.meta_path.insert(0, UnloadedFinder())
