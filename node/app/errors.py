"""Errors the use cases raise; callers act on them (the RPC boundary maps them to codes)."""

from __future__ import annotations

from coordinator.errors import CONFLICT, INVALID_INPUT, UNAVAILABLE, OdfNodeError


class InvalidArgument(OdfNodeError):
    """A parameter is well-typed but not acceptable (bad DID, missing file...)."""

    rpc_code = INVALID_INPUT


class NotOwner(OdfNodeError):
    """This node does not hold the dataset's key, so it cannot announce it."""

    rpc_code = CONFLICT


class RetryLater(OdfNodeError):
    """A work item cannot proceed yet (input missing, source unavailable); retried later."""

    rpc_code = UNAVAILABLE


class UntrustedInput(OdfNodeError):
    """A derivative's input is a followed dataset whose stored head is not trusted yet
    (``docs/trust.md``): the transform waits until it is."""

    rpc_code = UNAVAILABLE


class Unavailable(OdfNodeError):
    """A part of the node this request needs is turned off or not running (gossip, IPFS)."""

    rpc_code = UNAVAILABLE


__all__ = ["InvalidArgument", "NotOwner", "RetryLater", "Unavailable", "UntrustedInput"]
