"""The data plane: logical and physical hashes of ODF data slices."""

from coordinator.data.hashing import (
    LOGICAL_HASH_BATCH_SIZE,
    LogicalHasher,
    UnreproducibleLogicalHash,
    WrittenFileHasher,
    array_digest,
    kamu_parquet_schema,
    logical_hash,
    physical_hash,
    type_bytes,
)

__all__ = [
    "LOGICAL_HASH_BATCH_SIZE",
    "LogicalHasher",
    "UnreproducibleLogicalHash",
    "WrittenFileHasher",
    "array_digest",
    "kamu_parquet_schema",
    "logical_hash",
    "physical_hash",
    "type_bytes",
]
