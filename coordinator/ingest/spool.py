"""Bounded-memory stable sort of a record-batch stream by an integer-like key column.

Append and Ledger order a slice by event time (kamu: ``row_number() over (order by
event_time)``). Input is usually already in event-time order, so the writer streams batches
straight through while that holds and only falls back to this external sort when it sees the
first out-of-order row (see :func:`coordinator.ingest.writer.write_slice`).

The sort is a classic run-generation + k-way merge:

* :func:`spill_runs` cuts the stream into runs of at most ``run_bytes`` of Arrow data, sorts
  each run in memory (stable ``argsort``) and writes it to an Arrow IPC file;
* :func:`merge_runs` merges the runs, holding one small buffer per run. Each round emits every
  buffered row whose key is below the smallest "last buffered key" of the unfinished runs -- all
  rows with such keys are already buffered -- concatenating the runs' prefixes in run order
  and sorting them stably, so ties keep input order (run index, then position).

Memory is O(``run_bytes`` + runs x ``batch_rows``) whatever the input size (a pathological
number of equal keys spanning a whole run makes that run's buffer grow up to one run).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "DEFAULT_RUN_BYTES",
    "IpcRun",
    "ParquetRun",
    "Run",
    "is_nondecreasing",
    "merge_runs",
    "sort_keys",
    "spill_runs",
]

#: Arrow bytes per in-memory sorted run.
DEFAULT_RUN_BYTES: Final = 32 << 20
_RUN_BATCH_ROWS: Final = 8 * 1024
_INT64_MIN: Final = np.iinfo(np.int64).min

KeyArray = npt.NDArray[np.int64]


def sort_keys(col: pa.Array | pa.ChunkedArray) -> KeyArray:
    """int64 sort keys of a timestamp/date/integer column (nulls first)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_date32(arr.type):
        ints = arr.view(pa.int32()).cast(pa.int64())
    elif pa.types.is_timestamp(arr.type) or pa.types.is_date64(arr.type):
        ints = arr.view(pa.int64())
    else:
        ints = arr.cast(pa.int64())
    if ints.null_count:
        ints = pc.fill_null(ints, _INT64_MIN)
    return np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64)


def is_nondecreasing(keys: KeyArray) -> bool:
    """Whether ``keys`` is sorted ascending (ties allowed)."""
    return bool(keys.size < 2 or np.all(keys[1:] >= keys[:-1]))


class Run(Protocol):
    """A sorted run: its batches, in order, in the common schema."""

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the run's batches."""
        ...


@dataclass(frozen=True, slots=True)
class IpcRun:
    """A run spilled to an Arrow IPC file."""

    path: Path

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Read the batches back one by one (no memory mapping, so RSS stays bounded)."""
        with pa.OSFile(str(self.path), "rb") as f:
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


@dataclass(frozen=True, slots=True)
class ParquetRun:
    """A run stored as a Parquet file whose columns are ``drop`` plus the common schema."""

    path: Path
    schema: pa.Schema
    drop: Sequence[str] = ()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Read the file in small batches, projected and cast to ``schema``."""
        pf = pq.ParquetFile(self.path)
        for b in pf.iter_batches(batch_size=_RUN_BATCH_ROWS, columns=self.schema.names):
            cols = [b.column(i).cast(f.type) for i, f in enumerate(self.schema)]
            yield pa.RecordBatch.from_arrays(cols, schema=self.schema)


def _sorted_table(batches: list[pa.RecordBatch], key: str) -> pa.Table:
    table = pa.Table.from_batches(batches)
    order = np.argsort(sort_keys(table.column(key)), kind="stable")
    return table.take(pa.array(order))


def spill_runs(
    batches: Iterable[pa.RecordBatch],
    key: str,
    directory: Path,
    *,
    run_bytes: int = DEFAULT_RUN_BYTES,
) -> list[IpcRun]:
    """Cut ``batches`` into sorted runs written to IPC files in ``directory``."""
    runs: list[IpcRun] = []
    pending: list[pa.RecordBatch] = []
    size = 0

    def flush() -> None:
        nonlocal pending, size
        if not pending:
            return
        table = _sorted_table(pending, key)
        pending, size = [], 0
        path = directory / f"run-{len(runs):05d}-{secrets.token_hex(4)}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=_RUN_BATCH_ROWS)
        runs.append(IpcRun(path))

    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        size += batch.nbytes
        if size >= run_bytes:
            flush()
    flush()
    return runs


@dataclass
class _Cursor:
    it: Iterator[pa.RecordBatch]
    parts: list[pa.RecordBatch] = field(default_factory=list)
    keys: KeyArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    done: bool = False

    def load(self, key: str) -> None:
        """Append the run's next non-empty batch to the buffer (or mark the run done)."""
        for batch in self.it:
            if batch.num_rows == 0:
                continue
            self.parts.append(batch)
            self.keys = np.concatenate([self.keys, sort_keys(batch.column(key))])
            return
        self.done = True

    def take_below(self, bound: int | None) -> pa.Table | None:
        """Remove and return the buffered rows with key < ``bound`` (all if None)."""
        if not self.parts:
            return None
        n = len(self.keys) if bound is None else int(np.searchsorted(self.keys, bound, "left"))
        if n == 0:
            return None
        table = pa.Table.from_batches(self.parts)
        head = table.slice(0, n)
        rest = table.slice(n)
        self.parts = rest.combine_chunks().to_batches() if rest.num_rows else []
        self.keys = self.keys[n:]
        return head


def merge_runs(runs: Sequence[Run], key: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Stable k-way merge of sorted ``runs`` (earlier runs win ties), cast to ``schema``."""
    cursors = [_Cursor(iter(r.batches())) for r in runs]
    while True:
        for c in cursors:
            if not c.done and not c.keys.size:
                c.load(key)
        live = [c for c in cursors if not c.done]
        # Every unfinished run now has buffered rows; none of its future keys is below its
        # last buffered key, so everything below the smallest such key is already buffered.
        bound = min((int(c.keys[-1]) for c in live), default=None)
        pieces = [p for c in cursors if (p := c.take_below(bound)) is not None]
        if pieces:
            table = pa.concat_tables(pieces)
            order = np.argsort(sort_keys(table.column(key)), kind="stable")
            yield from (
                table.take(pa.array(order)).cast(schema).to_batches(max_chunksize=_RUN_BATCH_ROWS)
            )
        if bound is None:
            return
        # Runs whose buffer ends at the bound may hold more rows with that key: read on.
        for c in live:
            if c.keys.size and int(c.keys[-1]) == bound:
                c.load(key)
