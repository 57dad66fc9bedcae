"""Dataset transfer: pull (IPFS, HTTP Simple Transfer Protocol, local paths), publish, serve.

* :mod:`node.transfer.pull` -- verified, incremental, resumable pulls.
* :mod:`node.transfer.sources` -- where bytes come from (HTTP, IPFS RPC / gateway, directory).
* :mod:`node.transfer.publish` -- add a dataset to IPFS as kamu does.
* :mod:`node.transfer.server` -- read-only Simple Transfer Protocol HTTP server.
"""

from node.transfer.errors import (
    DivergedHeads,
    InvalidRemoteChain,
    InvalidRemoteHead,
    ObjectHashMismatch,
    ObjectRejected,
    ObjectSizeMismatch,
    ObjectTooLarge,
    SourceUnavailable,
    TransferError,
)
from node.transfer.pull import HeadComparison, PullOptions, PullResult, pull_url

__all__ = [
    "DivergedHeads",
    "HeadComparison",
    "InvalidRemoteChain",
    "InvalidRemoteHead",
    "ObjectHashMismatch",
    "ObjectRejected",
    "ObjectSizeMismatch",
    "ObjectTooLarge",
    "PullOptions",
    "PullResult",
    "SourceUnavailable",
    "TransferError",
    "pull_url",
]
