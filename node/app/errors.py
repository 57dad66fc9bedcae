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


class QueryError(OdfNodeError):
    """A query over the node's data cannot be answered (the subclasses say why)."""

    rpc_code = INVALID_INPUT


class QueryRejected(QueryError):
    """The sandbox refused the SQL (reads a file, calls a disallowed function, writes, is
    too long...); ``reason`` says what."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class QueryDeadlineExceeded(QueryError):
    """The query ran past ``[query] deadline_s`` and its worker was killed."""

    rpc_code = UNAVAILABLE


class QueryTooLarge(QueryError):
    """The answer is over ``[query] max_rows`` / ``max_bytes`` or the query needed more than
    ``[query] memory_bytes``: narrow it or page with ``skip``/``limit``."""


class QueryBusy(QueryError):
    """The client already runs ``[query] concurrency_per_client`` queries (or the node
    ``concurrency_total``): retry when one finishes."""

    rpc_code = UNAVAILABLE


class HeadNotTrusted(QueryError):
    """The dataset has no trusted head yet (docs/trust.md); ``--untrusted`` (``untrusted``)
    reads the accepted head instead and says so."""

    rpc_code = CONFLICT


__all__ = [
    "HeadNotTrusted",
    "InvalidArgument",
    "NotOwner",
    "QueryBusy",
    "QueryDeadlineExceeded",
    "QueryError",
    "QueryRejected",
    "QueryTooLarge",
    "RetryLater",
    "Unavailable",
    "UntrustedInput",
]
