"""Typed transfer errors. Every one leaves the local store's heads unchanged."""

from __future__ import annotations

from coordinator.errors import (
    CONFLICT,
    INVALID_INPUT,
    UNAVAILABLE,
    VERIFICATION_FAILED,
    OdfNodeError,
)


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


class TransientSourceError(OdfNodeError):
    """The source failed to deliver this time (retryable). Here, not in
    :mod:`node.transfer.sources` (which re-exports it), so the sources it opens
    (:mod:`node.transfer.streams`) raise it without importing the module that opens them."""

    rpc_code = UNAVAILABLE


class SourceTooSlow(SourceUnavailable):
    """The source delivered an object slower than the minimum transfer rate allows.

    Every object must arrive within ``deadline_base_s + bytes / min_rate_bytes_per_s`` of its
    request (counting the bytes received so far; see :mod:`node.transfer.pull`): a source that
    trickles bytes cannot keep a pull running for ever. Not retried within the pull.
    """


class SourceHeadUnreachable(SourceUnavailable):
    """The source did not answer the pull's first request (``refs/head``) in time, or every
    attempt at it failed: nothing came from it at all (an address peers cannot reach, an IPFS
    node with no connected provider). Not retried within the pull; the next source is tried.
    """


class InvalidSourceUrl(TransferError, ValueError):
    """A pull URL this node cannot use: empty, an unsupported scheme, no host, no dataset name.

    Also a :class:`ValueError`, which is what callers of ``open_source`` caught before.
    """

    rpc_code = INVALID_INPUT


class SourceRefused(TransferError):
    """The source policy forbids contacting this address, or where a redirect leads.

    Bad input, not an outage: retrying the same URL can only give the same answer
    (:mod:`node.transfer.policy`). ``setting`` names the configuration that would allow it
    (``""``: none can).
    """

    rpc_code = INVALID_INPUT

    def __init__(self, message: str, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


class StorageBudgetExceeded(TransferError):
    """A pull would take the stored datasets over ``[storage] max_bytes`` or the disk below
    ``[storage] min_free_bytes``; refused before any data was downloaded (nothing committed)."""

    rpc_code = UNAVAILABLE

    def __init__(self, message: str, *, needed: int, allowed: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.allowed = allowed


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
    "SourceHeadUnreachable",
    "SourceRefused",
    "SourceTooSlow",
    "SourceUnavailable",
    "StorageBudgetExceeded",
    "TransferError",
    "TransientSourceError",
]
