"""IPFS access: an aiohttp client for the kubo RPC API, a gateway reader and an embedded js-ipfs.

* :mod:`node.ipfs.client` -- :class:`IpfsClient` (kubo ``/api/v0`` subset that js-ipfs accepts
  too) and :class:`GatewayReader` (read-only, plain HTTP gateway).
* :mod:`node.ipfs.embedded` -- start/stop a loopback-only js-ipfs daemon from ``js/``.
* the embedded node starts only where ``lo`` is the only interface (:mod:`p2p.netguard`).
"""

from node.ipfs.client import GatewayReader, IpfsClient, IpfsError, IpfsReader

__all__ = ["GatewayReader", "IpfsClient", "IpfsError", "IpfsReader"]
