"""Typed transfer errors. Every one leaves the local store's heads unchanged."""

from __future__ import annotations

from coordinator.errors import CONFLICT, UNAVAILABLE, VERIFICATION_FAILED, OdfNodeError


class TransferError(OdfNodeError):
    """Base of pull / publish errors."""


class SourceUnavailable(TransferError):
    """The source did not deliver an object after every retry (timeouts, 404, 5xx, drops).

    This means "unknown", not "absent": running the pull again later may succeed, and what was
    already verified is kept.
    """

    rpc_code = UNAVAILABLE

    def __init__(self, obj: str, message: str) -> None:
        super().__init__(f"{obj}: {message}")
        self.object = obj


class ObjectRejected(TransferError):
    """The source served bytes that fail verification; ``object`` names what was requested."""

    rpc_code = VERIFICATION_FAILED

    def __init__(self, obj: str, message: str) -> None:
        super().__init__(f"{obj}: {message}")
        self.object = obj


class ObjectHashMismatch(ObjectRejected):
    """The served bytes do not hash to the object's name (an altered block, part or file)."""


class ObjectSizeMismatch(ObjectRejected):
    """A data part or checkpoint has a size other than the one its block records (truncated)."""


class ObjectTooLarge(ObjectRejected):
    """An object or stream exceeds the configured cap (or its recorded size: endless stream)."""


class InvalidRemoteHead(ObjectRejected):
    """``refs/head`` is not a multibase multihash."""


class InvalidRemoteChain(ObjectRejected):
    """A block is well-hashed but does not decode, or breaks a chain rule / the dataset id."""


class DivergedHeads(TransferError):
    """Local and remote chains have diverged; pass ``force`` to replace the local chain."""

    rpc_code = CONFLICT


__all__ = [
    "DivergedHeads",
    "InvalidRemoteChain",
    "InvalidRemoteHead",
    "ObjectHashMismatch",
    "ObjectRejected",
    "ObjectSizeMismatch",
    "ObjectTooLarge",
    "SourceUnavailable",
    "TransferError",
]
