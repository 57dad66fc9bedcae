"""The IPFS port over the node's IPFS RPC endpoint (the embedded Helia node or kubo)."""

from __future__ import annotations

from typing import Any

from coordinator.storage.dataset import Dataset
from node.app.errors import Unavailable
from node.app.jsontypes import JsonObject


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
