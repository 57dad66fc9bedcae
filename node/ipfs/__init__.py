"""IPFS access: an aiohttp client for the kubo RPC API, a gateway reader and an embedded IPFS node.

* :mod:`node.ipfs.client` -- :class:`IpfsClient` (kubo ``/api/v0`` subset that the embedded
  node serves too) and :class:`GatewayReader` (read-only, plain HTTP gateway).
* :mod:`node.ipfs.embedded` -- start/stop the embedded IPFS node (Helia, ``js/helia-ipfs.mjs``).
* the embedded node starts only where ``lo`` is the only interface (:mod:`p2p.netguard`).
"""

from node.ipfs.client import GatewayReader, IpfsClient, IpfsError, IpfsReader

__all__ = ["GatewayReader", "IpfsClient", "IpfsError", "IpfsReader"]
