"""The IPFS port over the node's IPFS RPC endpoint (the embedded Helia node or kubo), and over
an embedded node that starts on its first use (:class:`LazyIpfs`, ``[ipfs] start = "lazy"``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.storage.dataset import Dataset
from node.app.errors import Unavailable
from node.app.jsontypes import JsonObject

if TYPE_CHECKING:
    from node.ipfs.lazy import LazyStart


class IpfsAdapter:
    """:class:`~node.app.ports.IpfsPort` over an IPFS RPC API URL."""

    def __init__(self, api_url: str, info: dict[str, Any]) -> None:
        self._api_url = api_url
        self._info = info

    @property
    def api_url(self) -> str | None:
        """The RPC endpoint."""
        return self._api_url

    def info(self) -> JsonObject | None:
        """Peer id, addresses, API and mode."""
        return self._info or None

    async def publish_dataset(self, dataset: Dataset) -> str:
        """Add as kamu does (no ``info/``), pin; the root CID."""
        from node.ipfs.client import IpfsClient
        from node.transfer.publish import publish_dataset

        async with IpfsClient(self._api_url) as client:
            result = await publish_dataset(client, dataset)
        return result.cid

    async def publish_ipns(self, cid: str, key: str) -> str:
        """``name publish /ipfs/<cid>`` under ``key``; the IPNS name."""
        from node.ipfs.client import IpfsClient

        async with IpfsClient(self._api_url) as client:
            name: str = await client.name_publish(f"/ipfs/{cid}", key=key)
        return name

    async def connect(self, multiaddr: str) -> None:
        """Swarm-connect."""
        from node.ipfs.client import IpfsClient

        async with IpfsClient(self._api_url) as client:
            await client.swarm_connect(multiaddr)


class LazyIpfs:
    """:class:`~node.app.ports.IpfsPort` of an embedded node that starts on its first use
    (``node/ipfs/lazy.py``): each call that needs the node starts it (once; concurrent first
    calls wait on the same start), and :attr:`api_url` stands for the API until then."""

    def __init__(self, lazy: LazyStart, started: Callable[[], IpfsAdapter | None]) -> None:
        self._lazy = lazy
        self._started = started

    @property
    def api_url(self) -> str | None:
        """The RPC endpoint, or the placeholder that starts the node on its first request."""
        return self._lazy.api_url or self._lazy.placeholder

    def info(self) -> JsonObject | None:
        """The started node's peer id, addresses, API and mode; before: that it starts on use."""
        adapter = self._started()
        if adapter is not None:
            return adapter.info()
        return {
            "mode": "embedded",
            "state": self._lazy.state,
            "peer_id": None,
            "addresses": [],
            "api": None,
        }

    async def _adapter(self) -> IpfsAdapter:
        await self._lazy.ensure()
        adapter = self._started()
        if adapter is None:  # started, then stopped with the daemon
            raise Unavailable("the IPFS node is stopping")
        return adapter

    async def publish_dataset(self, dataset: Dataset) -> str:
        """Start the node if needed, then as :meth:`IpfsAdapter.publish_dataset`."""
        return await (await self._adapter()).publish_dataset(dataset)

    async def publish_ipns(self, cid: str, key: str) -> str:
        """Start the node if needed, then as :meth:`IpfsAdapter.publish_ipns`."""
        return await (await self._adapter()).publish_ipns(cid, key)

    async def connect(self, multiaddr: str) -> None:
        """Start the node if needed, then swarm-connect."""
        await (await self._adapter()).connect(multiaddr)


class NoIpfs:
    """The IPFS port of a node with ``[ipfs] mode = "none"``."""

    @property
    def api_url(self) -> str | None:
        """None: IPFS is off."""
        return None

    def info(self) -> JsonObject | None:
        """None."""
        return None

    async def publish_dataset(self, dataset: Dataset) -> str:
        """Refused."""
        raise Unavailable("IPFS is disabled on this node")

    async def publish_ipns(self, cid: str, key: str) -> str:
        """Refused."""
        raise Unavailable("IPFS is disabled on this node")

    async def connect(self, multiaddr: str) -> None:
        """Refused."""
        raise Unavailable("IPFS is disabled on this node")
