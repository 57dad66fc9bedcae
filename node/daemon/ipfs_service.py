"""The daemon's IPFS node (``[ipfs] mode``): the embedded Helia node it starts
(``node/daemon/ipfs_process.py``) or a kubo-compatible RPC endpoint it was pointed at, as the
``ipfs`` service.

The embedded node starts on its first use (``[ipfs] start = "lazy"``, the default:
``node/ipfs/lazy.py``; an idle node saves its ~100 MB) or with the daemon (``"eager"``).
On start it learns the node's peer id and addresses (what peers should dial: the advertised
host, and no loopback address in open mode) and reconnects the swarm peers configured and
remembered; :attr:`IpfsService.port` is the IPFS port of the use cases from then on
(:class:`~node.adapters.ipfs.NoIpfs` before, and on a node with ``mode = "none"``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from node.adapters.ipfs import IpfsAdapter, LazyIpfs, NoIpfs
from node.app.ports import IpfsPort, StatePort
from node.config import NodeConfig
from node.daemon.addresses import advertised_multiaddrs
from node.daemon.reachability import start_warnings, withheld_ipfs
from node.home import NodeHome

if TYPE_CHECKING:
    from node.ipfs.client import IpfsClient
    from node.ipfs.lazy import LazyStart

log = logging.getLogger("odf_node.daemon")

_SWARM_CONNECT_S = 15


class IpfsService:
    """The ``ipfs`` service (see the module docstring)."""

    name = "ipfs"

    def __init__(self, *, config: NodeConfig, home: NodeHome, state: StatePort) -> None:
        self._config = config
        self._home = home
        self._state = state
        self._node: Any = None
        self._lazy: LazyStart | None = None
        self._adapter: IpfsAdapter | None = None
        self._port: IpfsPort = NoIpfs()

    @property
    def port(self) -> IpfsPort:
        """The IPFS port: the node's adapter once started (a :class:`LazyIpfs` from the start
        of an embedded node that starts on first use), else :class:`NoIpfs`."""
        return self._port

    @property
    def api_shown(self) -> str | None:
        """The API URL as the ready line shows it: before a lazy node's first use, its state
        (its API URL is then a placeholder on port 0, which read as a node listening there)."""
        if self._lazy is not None and not self._lazy.started:
            return self._lazy.state
        return self._port.api_url

    async def start(self) -> None:
        """Start (embedded, ``[ipfs] start = "eager"``) or reach (external) the IPFS node, then
        connect its swarm peers; with ``start = "lazy"`` the embedded node starts on first use."""
        cfg = self._config.ipfs
        if cfg.mode == "embedded" and cfg.start == "lazy":
            from node.ipfs.lazy import LazyStart, register

            self._lazy = LazyStart(self._start_node, asyncio.get_running_loop())
            register(self._lazy)
            self._port = LazyIpfs(self._lazy, lambda: self._adapter)
            log.info('the IPFS node starts on its first use ([ipfs] start = "lazy")')
            return
        await self._start_node()
        assert self._adapter is not None
        self._port = self._adapter

    async def _start_node(self) -> str:
        """Start or reach the node, connect its swarm peers; its API URL."""
        from node.ipfs.client import IpfsClient

        cfg = self._config.ipfs
        if cfg.mode == "embedded":
            self._node = await asyncio.to_thread(self._start_embedded)
            api: str = self._node.api_url
        else:
            api = cfg.api_url
        try:
            async with IpfsClient(api) as client:
                ident = await client.id()
                info = self._describe(ident, api)
                await self._connect_peers(client)
        except BaseException:
            await self._stop_embedded()
            raise
        self._adapter = IpfsAdapter(api, info)
        if self._lazy is not None:
            log.info("IPFS node started on first use: api=%s peer=%s", api, info["peer_id"])
            await self._warn_unreachable(info)
        return api

    async def _connect_peers(self, client: IpfsClient) -> None:
        """Configured peers, then the ones an operator connected earlier (remembered)."""
        remembered = [
            str(e.data["multiaddr"])
            for e in await self._state.events(0, 1000, "ipfs.connect")
            if "multiaddr" in e.data
        ]
        for addr in dict.fromkeys([*self._config.ipfs.swarm_peers, *remembered]):
            try:
                await asyncio.wait_for(client.swarm_connect(addr), _SWARM_CONNECT_S)
            except Exception as e:  # a peer being down must not stop the node
                log.warning("IPFS swarm connect to %s failed: %s", addr, e)

    async def _warn_unreachable(self, info: dict[str, Any]) -> None:
        """What the daemon's start-up warnings say of an IPFS node, for one started later:
        logged and recorded (``node.reachability``) as they are."""
        warnings = start_warnings(
            open_mode=not self._config.network.loopback_only,
            ipfs_mode=self._config.ipfs.mode,
            ipfs_advertised=[str(a) for a in info.get("addresses") or []],
            ipfs_withheld=[str(a) for a in info.get("withheld_addresses") or []],
            http_url="",
            gossip_advertised=None,
        )
        for w in warnings:
            log.warning("reachability: %s", w["message"])
            await self._state.log_event("node.reachability", None, w)

    async def stop(self) -> None:
        """Stop the embedded node (an external one is left running); a start under way is
        waited for first."""
        if self._lazy is not None:
            await self._lazy.close()
        self._adapter = None
        await self._stop_embedded()

    async def _stop_embedded(self) -> None:
        if self._node is not None:
            from node.daemon.ipfs_process import stop_embedded_ipfs

            await asyncio.to_thread(stop_embedded_ipfs, self._node, self._home.path / "ipfs")
            self._node = None

    def _start_embedded(self) -> Any:
        from node.daemon.ipfs_process import start_embedded_ipfs

        cfg = self._config.ipfs
        adv = self._config.network.advertise_host
        announce = (
            tuple(
                advertised_multiaddrs(
                    [f"/ip4/0.0.0.0/tcp/{cfg.swarm_port}"], adv, loopback_only=False
                )
            )
            if adv and cfg.swarm_port
            else ()
        )
        return start_embedded_ipfs(
            self._home.path / "ipfs",
            self._config.network.loopback_only,
            swarm_host=cfg.swarm_host,
            swarm_port=cfg.swarm_port,
            announce=announce,
        )

    def _describe(self, ident: dict[str, Any], api: str) -> dict[str, Any]:
        """The IPFS node as ``status`` shows it and discovery records advertise it."""
        net = self._config.network
        peer_id = ident.get("ID") or ident.get("id")
        listening = [str(a) for a in ident.get("Addresses") or ident.get("addresses") or []]
        # What peers should dial: the advertised host, and no loopback address in open mode.
        addresses = advertised_multiaddrs(
            listening, net.advertise_host, loopback_only=net.loopback_only
        )
        info: dict[str, Any] = {
            "peer_id": peer_id,
            "addresses": [a if "/p2p/" in a else f"{a}/p2p/{peer_id}" for a in addresses],
            "api": api,
            "mode": self._config.ipfs.mode,
            "state": "running",
        }
        if not net.loopback_only:
            # Listened on but advertised to nobody (loopback in open mode): named in the start
            # warning and in the discovery record, so peers can say why they wait.
            info["withheld_addresses"] = [
                a if "/p2p/" in a else f"{a}/p2p/{peer_id}"
                for a in withheld_ipfs(listening, addresses)
            ]
        return info
