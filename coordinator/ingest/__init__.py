"""Push and polling ingest: read files, apply the merge strategy, write slices, commit ``AddData``.

Byte-compatible with kamu-cli's DataFusion ingest (v0.153 era, ODF spec v0.34): the same output
columns, offsets, operation codes, ordering and watermarks, hence the same logical hashes.

Modules:

* :mod:`~coordinator.ingest.ddl` -- DDL schema strings -> Arrow schema;
* :mod:`~coordinator.ingest.readers` -- streaming CSV / NDJSON / JSON / Parquet readers;
* :mod:`~coordinator.ingest.merge` -- Append, Ledger and Snapshot over Arrow tables;
* :mod:`~coordinator.ingest.writer` -- system columns, Parquet parts, hashes, ``AddData``;
* :mod:`~coordinator.ingest.spool` -- external stable sort by event time;
* :mod:`~coordinator.ingest.linked` -- RFC-017 linked objects;
* :mod:`~coordinator.ingest.push` -- the orchestration (:func:`ingest`);
* :mod:`~coordinator.ingest.fetch`, :mod:`~coordinator.ingest.prepare`,
  :mod:`~coordinator.ingest.preprocess`, :mod:`~coordinator.ingest.polling` -- polling sources
  (``SetPollingSource``) and preprocess queries (``docs/ingest-polling.md``).
"""

from typing import TYPE_CHECKING

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
from coordinator.lazy import lazy_attributes

if TYPE_CHECKING:
    from coordinator.ingest.ddl import (
        normalize_schema,
        parse_ddl,
    )
    from coordinator.ingest.linked import (
        LinkedObjects,
        LinkedObjectsSummary,
    )
    from coordinator.ingest.push import (
        IngestProgress,
        IngestResult,
        ingest,
        resolve_push_source,
        system_clock,
    )
    from coordinator.ingest.readers import (
        read_batches,
        read_schema,
    )
    from coordinator.ingest.vocab import (
        Vocab,
    )

__all__ = [
    "BadInputData",
    "BadInputSchema",
    "ConcurrentModification",
    "DanglingObjectLink",
    "IncompatibleSchema",
    "IngestError",
    "IngestProgress",
    "IngestResult",
    "InvalidDdlSchema",
    "InvalidObjectLink",
    "LinkedObjects",
    "LinkedObjectsSummary",
    "MergeError",
    "PushSourceNotFound",
    "UnsupportedPreprocess",
    "UnsupportedReadOption",
    "Vocab",
    "ingest",
    "normalize_schema",
    "parse_ddl",
    "read_batches",
    "read_schema",
    "resolve_push_source",
    "system_clock",
]

# The submodules import pyarrow and numpy: they load when one of their names is first used, so
# that importing a light submodule (e.g. the vocabulary) keeps an idle daemon small.
_LAZY = {
    "normalize_schema": "coordinator.ingest.ddl",
    "parse_ddl": "coordinator.ingest.ddl",
    "LinkedObjects": "coordinator.ingest.linked",
    "LinkedObjectsSummary": "coordinator.ingest.linked",
    "IngestProgress": "coordinator.ingest.push",
    "IngestResult": "coordinator.ingest.push",
    "ingest": "coordinator.ingest.push",
    "resolve_push_source": "coordinator.ingest.push",
    "system_clock": "coordinator.ingest.push",
    "read_batches": "coordinator.ingest.readers",
    "read_schema": "coordinator.ingest.readers",
    "Vocab": "coordinator.ingest.vocab",
}

if not TYPE_CHECKING:  # mypy sees the imports above, and reports unknown names as usual
    __getattr__ = lazy_attributes(__name__, _LAZY, globals())
