"""The error hierarchy of odf-node.

Every error the project raises on purpose derives from :class:`OdfNodeError`. Subclasses are
specific enough for callers to act on. Each class says which *kind* of failure it is through its
``rpc_code`` class attribute (inherited, so a family shares its base's kind and a subclass may
override it); the RPC boundary (``node/rpc/errors.py``) is the only place that reads it to build
a JSON-RPC error. The kinds and their codes are listed below and in ``docs/rpc.md``.
"""

from __future__ import annotations

from typing import ClassVar, Final

NODE_ERROR: Final = -32000
"""A deliberate node error with no more specific kind."""
NOT_FOUND: Final = -32001
"""A dataset, block, ref or push source does not exist."""
INVALID_INPUT: Final = -32002
"""Input or a query cannot be decoded, ingested or planned."""
CONFLICT: Final = -32003
"""Already exists, diverged heads, compare-and-swap failure, chain rule."""
UNAVAILABLE: Final = -32004
"""A network peer, source or the engine is unavailable: retry later."""
VERIFICATION_FAILED: Final = -32005
"""A hash, signature, proof or served object does not verify."""


class OdfNodeError(Exception):
    """Root of every error raised deliberately by odf-node."""

    rpc_code: ClassVar[int] = NODE_ERROR


class DecodeError(OdfNodeError):
    """Bytes or text could not be parsed into the expected ODF value."""

    rpc_code = INVALID_INPUT


class InvalidMultihash(DecodeError):
    """A multihash / multibase string or byte string is malformed or uses an unsupported code."""


class InvalidDatasetId(DecodeError):
    """A ``did:odf`` / ``did:key`` identifier is malformed or uses an unsupported key type."""


class InvalidResource(DecodeError):
    """A resource manifest (ODF v0.39 resource framework, RFC-018) is malformed."""


class InvalidBlock(DecodeError):
    """A metadata block's bytes are not a valid ODF manifest / block."""


class UnsupportedBlockVersion(InvalidBlock):
    """The manifest declares a block version this implementation cannot read."""


class EncodeError(OdfNodeError):
    """A value cannot be encoded (e.g. a field is out of range for its wire type)."""

    rpc_code = INVALID_INPUT


class SignatureError(OdfNodeError):
    """A signature does not verify against the claimed public key."""

    rpc_code = VERIFICATION_FAILED


class KeyFileError(OdfNodeError):
    """A key file is missing, malformed or has unsafe permissions."""


class ChainError(OdfNodeError):
    """Base of metadata-chain errors."""


class ChainRuleViolation(ChainError):
    """Appending a block would break a metadata chain rule.

    ``rule`` is a stable short identifier of the rule (e.g. ``"sequence-number"``), so callers and
    tests can branch on it without parsing the message.
    """

    rpc_code = CONFLICT

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"[{rule}] {message}")
        self.rule = rule


class BlockNotFound(ChainError):
    """A block referenced by hash is not present in the store."""

    rpc_code = NOT_FOUND


class HashMismatch(ChainError):
    """Stored or received bytes do not hash to the name they were stored/requested under."""

    rpc_code = VERIFICATION_FAILED


class RefNotFound(ChainError):
    """A named reference (e.g. ``head``) does not exist."""

    rpc_code = NOT_FOUND


class RefCASFailed(ChainError):
    """A compare-and-swap update of a reference found an unexpected current value."""

    rpc_code = CONFLICT


class DatasetError(OdfNodeError):
    """Base of dataset-repository errors."""


class DatasetNotFound(DatasetError):
    """No dataset is known under the given DID or alias."""

    rpc_code = NOT_FOUND


class DatasetAlreadyExists(DatasetError):
    """A dataset with the given DID or alias already exists."""

    rpc_code = CONFLICT


class InvalidSnapshot(DatasetError):
    """A ``DatasetSnapshot`` cannot be turned into a dataset."""

    rpc_code = INVALID_INPUT


class DataError(OdfNodeError):
    """Base of data-plane errors (data slices, hashing, ingest)."""

    rpc_code = INVALID_INPUT


class UnreproducibleLogicalHash(DataError):
    """kamu's hash of this data depends on bytes arrow-rs leaves in null slots.

    Raised for Parquet input only: a primitive or boolean value that is null while its parent
    struct row is valid, in a 10,000-row batch where the struct also has nulls, is hashed by kamu
    as whatever stale bytes arrow-rs's reader left in the slot (arrow-digest's OR bug), which
    cannot be reproduced from pyarrow.
    """


class UnsupportedArrowType(DataError):
    """An Arrow type has no defined logical-hash encoding (kamu's arrow-digest refuses it too)."""


class UnsupportedOdfSchema(DataError):
    """An ODF schema has no Arrow form, or an Arrow schema no ODF form (kamu refuses it too)."""


# -- push ingest ---------------------------------------------------------------------------


class IngestError(DataError):
    """Base of push-ingest errors; the dataset's chain is unchanged when one is raised."""


class InvalidDdlSchema(IngestError):
    """A read step's DDL schema string cannot be parsed (or uses a type kamu does not accept)."""


class UnsupportedReadOption(IngestError):
    """A read step uses a format, option or value this node cannot read (yet)."""


class UnsupportedPreprocess(IngestError):
    """The push source has a ``preprocess`` transform, which needs an engine."""


class BadInputData(IngestError):
    """An input file does not match the declared schema.

    ``column`` is the offending column (None for structural errors such as a wrong number of
    CSV fields) and ``row`` the 1-based record number in the file (data rows only: a CSV header
    is not counted; for NDJSON, ``line`` is the 1-based line number as well).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        column: str | None = None,
        row: int | None = None,
        line: int | None = None,
    ) -> None:
        where = []
        if path is not None:
            where.append(path)
        if column is not None:
            where.append(f"column {column!r}")
        if row is not None:
            where.append(f"row {row}")
        if line is not None and line != row:
            where.append(f"line {line}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.path = path
        self.column = column
        self.row = row
        self.line = line


class BadInputSchema(IngestError):
    """The input's columns conflict with system columns or have an invalid event-time type."""


class IncompatibleSchema(IngestError):
    """The new slice's schema differs from the dataset's ``SetDataSchema``."""


class MergeError(IngestError):
    """A merge strategy cannot be applied (e.g. a primary-key column is missing)."""


class PushSourceNotFound(IngestError):
    """The dataset has no (or no unambiguous) active push source with the requested name."""

    rpc_code = NOT_FOUND


class ConcurrentModification(IngestError):
    """The dataset's head moved while ingesting; nothing was committed (retry)."""

    rpc_code = CONFLICT


class DanglingObjectLink(IngestError):
    """An ObjectLink column references an object that was neither supplied nor stored."""


class InvalidObjectLink(IngestError):
    """An ObjectLink column holds a value that is not a multibase multihash."""


# -- polling sources -----------------------------------------------------------------------


class PollingError(IngestError):
    """Base of polling-source errors (fetch, prepare); nothing was committed."""


class PollingSourceNotFound(PollingError):
    """The dataset has no active polling source (``SetPollingSource``)."""

    rpc_code = NOT_FOUND


class FetchError(PollingError):
    """The polling source's fetch step failed (bad response, unusable file, event time)."""


class SourceNotFound(FetchError):
    """The polled URL answered 404, or the file / glob matched nothing."""

    rpc_code = NOT_FOUND


class SourceUnreachable(FetchError):
    """The polled URL could not be reached (connection refused, timeout, a 5xx): retry later."""

    rpc_code = UNAVAILABLE


class SourceNotRunnable(PollingError):
    """The fetch step cannot run on this node as it is set up (no container runtime, no
    Ethereum node URL, a scheme it does not fetch): the message names the setting that would
    make it run. Raised at pull time; ``dataset create`` accepts the source, as kamu does."""

    rpc_code = UNAVAILABLE


class PrepareError(PollingError):
    """A prepare step (``Decompress``, ``Pipe``) failed or is not allowed."""


class DecompressBudgetExceeded(PrepareError):
    """An archive decompresses to more than the node's budget (a zip bomb)."""


__all__ = [
    "BadInputData",
    "BadInputSchema",
    "ConcurrentModification",
    "DanglingObjectLink",
    "DecompressBudgetExceeded",
    "FetchError",
    "IncompatibleSchema",
    "IngestError",
    "InvalidDdlSchema",
    "InvalidObjectLink",
    "MergeError",
    "PollingError",
    "PollingSourceNotFound",
    "PrepareError",
    "PushSourceNotFound",
    "SourceNotFound",
    "SourceNotRunnable",
    "SourceUnreachable",
    "UnsupportedPreprocess",
    "UnsupportedReadOption",
]
