"""Dataset transfer: pull (IPFS, HTTP Simple Transfer Protocol, local paths), publish, serve.

* :mod:`node.transfer.pull` -- verified, incremental, resumable pulls.
* :mod:`node.transfer.sources` -- where bytes come from (HTTP, IPFS RPC / gateway, directory).
* :mod:`node.transfer.policy` -- which HTTP sources the node will contact.
* :mod:`node.transfer.publish` -- add a dataset to IPFS as kamu does.
* :mod:`node.transfer.server` -- read-only Simple Transfer Protocol HTTP server.
"""

from typing import Any

from node.transfer.errors import (
    DivergedHeads,
    InvalidRemoteChain,
    InvalidRemoteHead,
    InvalidSourceUrl,
    ObjectHashMismatch,
    ObjectRejected,
    ObjectSizeMismatch,
    ObjectTooLarge,
    SourceRefused,
    SourceTooSlow,
    SourceUnavailable,
    TransferError,
)

_PULL_NAMES = frozenset({"HeadComparison", "PullOptions", "PullOutcome", "pull_url"})


def __getattr__(name: str) -> Any:
    # Pull brings pyarrow along; importing the package (for its errors, the server or the CLI)
    # must not cost an idle daemon that memory.
    if name in _PULL_NAMES:
        from node.transfer import pull

        return getattr(pull, name)
    raise AttributeError(f"module 'node.transfer' has no attribute {name!r}")


__all__ = [
    "DivergedHeads",
    "HeadComparison",
    "InvalidRemoteChain",
    "InvalidRemoteHead",
    "InvalidSourceUrl",
    "ObjectHashMismatch",
    "ObjectRejected",
    "ObjectSizeMismatch",
    "ObjectTooLarge",
    "PullOptions",
    "PullOutcome",
    "SourceRefused",
    "SourceTooSlow",
    "SourceUnavailable",
    "TransferError",
    "pull_url",
]
