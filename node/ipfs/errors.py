"""The IPFS clients' error, in a module of its own: the lazily started node raises it too."""

from __future__ import annotations

from coordinator.errors import UNAVAILABLE, OdfNodeError


class IpfsError(OdfNodeError):
    """An IPFS RPC or gateway call failed; ``status`` is the HTTP status (None: no response)."""

    rpc_code = UNAVAILABLE

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


__all__ = ["IpfsError"]
