"""IPFS access: an aiohttp client for the kubo RPC API, a gateway reader and an embedded js-ipfs.

* :mod:`node.ipfs.client` -- :class:`IpfsClient` (kubo ``/api/v0`` subset that js-ipfs accepts
  too) and :class:`GatewayReader` (read-only, plain HTTP gateway).
* :mod:`node.ipfs.embedded` -- start/stop a loopback-only js-ipfs daemon from ``js/``.
* :mod:`node.ipfs.netguard` -- refuse to start a node outside a loopback-only network namespace.
"""

from node.ipfs.client import GatewayReader, IpfsClient, IpfsError, IpfsReader

__all__ = ["GatewayReader", "IpfsClient", "IpfsError", "IpfsReader"]
