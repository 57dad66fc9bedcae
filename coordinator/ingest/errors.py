"""Errors raised by push ingest (defined in :mod:`coordinator.errors`, re-exported here)."""

from __future__ import annotations

from coordinator.errors import (
    BadInputData,
    BadInputSchema,
    ConcurrentModification,
    DanglingObjectLink,
    IncompatibleSchema,
    IngestError,
    InvalidDdlSchema,
    InvalidObjectLink,
    MergeError,
    PushSourceNotFound,
    UnsupportedPreprocess,
    UnsupportedReadOption,
)

__all__ = [
    "BadInputData",
    "BadInputSchema",
    "ConcurrentModification",
    "DanglingObjectLink",
    "IncompatibleSchema",
    "IngestError",
    "InvalidDdlSchema",
    "InvalidObjectLink",
    "MergeError",
    "PushSourceNotFound",
    "UnsupportedPreprocess",
    "UnsupportedReadOption",
]
