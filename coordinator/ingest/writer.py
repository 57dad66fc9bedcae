"""Write a data slice as kamu does: system columns, offsets, Parquet part, hashes, ``AddData``.

Output layout (kamu-cli ``DataWriterDataFusion::with_system_columns``; nullability as kamu
writes it since v0.252.3 and asserts in ``test_writer.rs``, where the ``SetDataSchema`` and
file schemas agree)::

    offset       int64                   NOT NULL   (row_number + prevOffset, kamu casts to Int64)
    op           int32                   NOT NULL   (RFC-015 operation type)
    system_time  timestamp[ms, tz=UTC]   NOT NULL   (ingest time, same in every row)
    event_time   timestamp[ms, tz=UTC]   NOT NULL   (or date32 if the data's event time is a DATE)
    <data columns, in read order, as declared (top-level timestamps in ms/UTC)>

kamu v0.160-v0.197 wrote ``offset`` and ``event_time`` as nullable (its DataFusion typed
``row_number()`` and ``coalesce`` as nullable); by v0.252.2 ``offset`` was NOT NULL, and from
v0.252.3 (kamu-cli c7a15a1a9, "Improve nullability handling") ``event_time``, always filled
(``coalesce`` with the fallback event time). The logical hash ignores nullability, so hashes
are the same either way; the schema matters to what a DataFusion derivative of the dataset
declares (its query passes the input's nullability through: kamu's ``test_engine_transform.rs``
expects ``REQUIRED`` ``event_time`` and data columns). An existing dataset whose
``SetDataSchema`` says nullable accepts the NOT NULL slices (nullability is not compared).

Column names follow the dataset's ``SetVocab``. A missing event time is filled with the
fallback "source event time" (kamu: the ingest's system time for push sources). Offsets are
contiguous from the chain's next offset in the strategy's sort order.

The Parquet file is Snappy-compressed with dictionary encoding (kamu's writer properties:
``PARQUET_1_0`` pages, dictionary for ``op`` and ``system_time``); Parquet bytes are not
reproducible across writers anyway, so only the logical hash has to match kamu's. It is
written to a ``.pending-*`` file inside ``data/``, fsynced, hashed (SHA3-256 physical hash,
``arrow0-sha3-256`` logical hash) and renamed to ``data/<physical hash>``; the directory is
fsynced after the rename.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import secrets
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from coordinator.errors import BadInputSchema, IncompatibleSchema, IngestError
from coordinator.ingest.merge import OP_TYPE
from coordinator.ingest.spool import (
    DEFAULT_RUN_BYTES,
    ParquetRun,
    Run,
    is_nondecreasing,
    merge_runs,
    sort_keys,
    spill_runs,
)
from coordinator.ingest.vocab import Vocab
from coordinator.metadata import model as m
from coordinator.metadata.flatbuffers_serde import write_form
from coordinator.metadata.odf_schema import new_set_data_schema
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multicodec, Multihash
from coordinator.storage.fs import PENDING_PREFIX, fsync_dir

__all__ = [
    "MS_UTC",
    "SliceFileWriter",
    "Vocab",
    "WrittenSlice",
    "add_data_event",
    "check_schema_compatible",
    "event_time_type",
    "fill_event_time",
    "output_schema",
    "schema_event",
    "stage_batch",
    "staged_schema",
    "validate_input_schema",
    "with_event_time",
    "write_slice",
]

MS_UTC: Final = pa.timestamp("ms", tz="UTC")
_NS_PER_MS: Final = 1_000_000
_ROW_GROUP_ROWS: Final = 1 << 20  # DataFusion's default max row group size
_ROW_GROUP_BYTES: Final = 16 << 20


# --------------------------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------------------------


def validate_input_schema(schema: pa.Schema, vocab: Vocab, *, input_op: bool = False) -> None:
    """kamu's ``validate_input``: no system-column names; event time must be a date/timestamp.

    ``input_op``: the merge strategy reads the op column from the input (ChangelogStream,
    UpsertStream; spec v0.37), so that name is not a conflict.

    Raises:
        BadInputSchema: with kamu's explanation.
    """
    system = [vocab.offset_column, vocab.system_time_column]
    if not input_op:
        system.insert(1, vocab.operation_type_column)
    for name in system:
        if name in schema.names:
            raise BadInputSchema(
                "Data contains a column that conflicts with the system column name, you should "
                "either rename the data column or configure the dataset vocabulary to use a "
                f"different name: {name}"
            )
    if vocab.event_time_column in schema.names:
        t = schema.field(vocab.event_time_column).type
        if not (pa.types.is_date32(t) or pa.types.is_date64(t) or pa.types.is_timestamp(t)):
            raise BadInputSchema(
                f"Event time column '{vocab.event_time_column}' should be either Date or "
                f"Timestamp, but found: {t}"
            )


def event_time_type(
    read: pa.Schema, vocab: Vocab, existing: pa.Schema | None = None
) -> pa.DataType:
    """Type of the event-time column: the data's, else the dataset's, else ms/UTC."""
    if vocab.event_time_column in read.names:
        return read.field(vocab.event_time_column).type
    if existing is not None and vocab.event_time_column in existing.names:
        return existing.field(vocab.event_time_column).type
    return MS_UTC


def with_event_time(read: pa.Schema, vocab: Vocab, typ: pa.DataType) -> pa.Schema:
    """The merge input schema: the read schema plus a nullable event time at the end if absent."""
    if vocab.event_time_column in read.names:
        return read
    return read.append(pa.field(vocab.event_time_column, typ, nullable=True))


def staged_schema(new: pa.Schema, vocab: Vocab) -> pa.Schema:
    """The output layout without ``offset``: op, system_time, event_time, data columns."""
    et = new.field(vocab.event_time_column)
    data = [f for f in new if f.name not in (vocab.event_time_column, vocab.operation_type_column)]
    return pa.schema(
        [
            pa.field(vocab.operation_type_column, OP_TYPE, nullable=False),
            pa.field(vocab.system_time_column, MS_UTC, nullable=False),
            pa.field(vocab.event_time_column, et.type, nullable=False),
            *data,
        ]
    )


def output_schema(new: pa.Schema, vocab: Vocab) -> pa.Schema:
    """The slice schema (and ``SetDataSchema``) for merge input schema ``new``."""
    return pa.schema(
        [pa.field(vocab.offset_column, pa.int64(), nullable=False), *staged_schema(new, vocab)]
    )


def check_schema_compatible(existing: pa.Schema, new: pa.Schema) -> None:
    """kamu's ``validate_output_schema_equivalence``: same names, types and field metadata in
    the same order; nullability is ignored.

    Raises:
        IncompatibleSchema: describing the first difference.
    """
    problems: list[str] = []
    if len(existing) != len(new):
        problems.append(f"{len(existing)} columns in the dataset, {len(new)} in the new data")
    for a, b in zip(existing, new, strict=False):
        if a.name != b.name:
            problems.append(f"column {a.name!r} became {b.name!r}")
        elif a.type != b.type:
            problems.append(f"column {a.name!r} changed type from {a.type} to {b.type}")
        elif (a.metadata or {}) != (b.metadata or {}):
            problems.append(f"column {a.name!r} has different metadata")
    if problems:
        raise IncompatibleSchema(
            "Schema of the new slice differs from the schema defined by SetDataSchema event: "
            + "; ".join(problems)
            + f"\n  dataset: {_describe(existing)}\n  new:     {_describe(new)}"
        )


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def schema_event(schema: pa.Schema) -> m.SetDataSchema:
    """``SetDataSchema`` of the output ``schema`` in the configured write form.

    Form ``v0.34``: the arrow-rs flatbuffer of ``schema`` (slot 0). Form ``current``: the ODF
    schema kamu-cli HEAD records, ``DataSchema::new_from_arrow(schema).strip_encoding()``
    (kamu-cli ``transform_executor_impl.rs``, ingest ``writer.rs``).
    """
    if write_form().odf_schema:
        return new_set_data_schema(schema)
    try:
        from coordinator.metadata.arrow_schema import encode_arrow_schema
    except ImportError as e:  # pragma: no cover - depends on another module landing
        raise IngestError(
            "cannot write SetDataSchema: coordinator.metadata.arrow_schema is not available"
        ) from e
    return m.SetDataSchema(raw_arrow_schema=encode_arrow_schema(schema))


# --------------------------------------------------------------------------------------------
# Staging (system columns except offset)
# --------------------------------------------------------------------------------------------


def fill_event_time(
    col: pa.Array | pa.ChunkedArray, typ: pa.DataType, fallback: Timestamp
) -> pa.Array:
    """Replace null event times by ``fallback`` (ms precision, cast to the column's type)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.type != typ:
        arr = arr.cast(typ)
    if arr.null_count == 0:
        return arr
    value = pa.scalar(fallback.epoch_ns // _NS_PER_MS, MS_UTC).cast(typ)
    filled = pc.fill_null(arr, value)
    return filled.combine_chunks() if isinstance(filled, pa.ChunkedArray) else filled


def stage_batch(
    merged: pa.RecordBatch | pa.Table,
    staged: pa.Schema,
    vocab: Vocab,
    *,
    system_time: Timestamp,
    fallback_event_time: Timestamp,
) -> pa.Table:
    """Merged rows (op + new columns, any order) -> the staged layout (:func:`staged_schema`)."""
    n = merged.num_rows
    st = pa.array(np.full(n, system_time.epoch_ns // _NS_PER_MS, dtype=np.int64), pa.int64()).view(
        MS_UTC
    )
    et_type = staged.field(vocab.event_time_column).type
    columns: list[Any] = []
    for f in staged:
        if f.name == vocab.system_time_column:
            columns.append(st)
        elif f.name == vocab.event_time_column:
            columns.append(fill_event_time(merged.column(f.name), et_type, fallback_event_time))
        else:
            col = merged.column(f.name)
            columns.append(col if col.type == f.type else col.cast(f.type))
    return pa.table(columns, schema=staged)


# --------------------------------------------------------------------------------------------
# The Parquet part
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WrittenSlice:
    """A finished, stored data part."""

    path: Path
    physical_hash: Multihash
    logical_hash: Multihash
    size: int
    offset_interval: m.OffsetInterval
    max_event_time: Timestamp | None
    schema: pa.Schema

    @property
    def num_records(self) -> int:
        """Rows in the slice."""
        return self.offset_interval.end - self.offset_interval.start + 1

    def data_slice(self) -> m.DataSlice:
        """The ``DataSlice`` of ``AddData.newData``."""
        return m.DataSlice(
            logical_hash=self.logical_hash,
            physical_hash=self.physical_hash,
            offset_interval=self.offset_interval,
            size=self.size,
        )


def _parquet_stable(t: pa.DataType) -> bool:
    """Whether ``t`` reads back from parquet (through arrow-rs) as exactly ``t``.

    Only then may the logical hash be computed from the in-memory batches; other types (e.g.
    ``timestamp[s]``, ``time32[s]``, ``date64``) change on the round trip, and kamu hashes what
    its reader yields, so those slices are hashed from the written file instead.
    """
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _parquet_stable(t.value_type)
    if pa.types.is_timestamp(t):
        return t.unit in ("ms", "us", "ns")
    return bool(
        pa.types.is_integer(t)
        or (pa.types.is_floating(t) and not pa.types.is_float16(t))
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_date32(t)
        or pa.types.is_decimal128(t)
    )


def _has_struct(schema: pa.Schema) -> bool:
    def walk(t: pa.DataType) -> bool:
        if pa.types.is_struct(t):
            return True
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return walk(t.value_type)
        return False

    return any(walk(f.type) for f in schema)


def _event_time_ns(value: int, typ: pa.DataType) -> int:
    if pa.types.is_date32(typ):
        return value * 86_400_000_000_000
    unit = typ.unit if pa.types.is_timestamp(typ) else "ms"
    return value * {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}[unit]


class _HashingFile(io.RawIOBase):
    """A write-only file that SHA3-256-hashes everything written (the physical hash)."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "xb")  # noqa: SIM115 - closed by close()
        self.sha3 = hashlib.sha3_256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha3.update(view)
        self._f.write(view)
        self.size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def fsync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
        super().close()


_DONE: Final = object()


class SliceFileWriter:
    """Streams staged batches into a Parquet file, adding ``offset``; hashes on the way.

    Encoding, compression, the logical hash and the physical hash (SHA3 of the bytes as they
    are written) run in one background thread fed through a small bounded queue, so they
    overlap with reading and merging (hashlib and Arrow release the GIL).

    Args:
        directory: where the ``.pending-*`` file is created (the dataset's ``data/``).
        schema: the output schema (:func:`output_schema`).
        vocab: system column names.
        start_offset: offset of the first row.
        durable: fsync the file (and directory) when storing.
    """

    def __init__(
        self,
        directory: Path,
        schema: pa.Schema,
        vocab: Vocab,
        start_offset: int,
        *,
        durable: bool = True,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.schema = schema
        self.vocab = vocab
        self.start_offset = start_offset
        self.durable = durable
        self.path = directory / f"{PENDING_PREFIX}{secrets.token_hex(8)}.parquet"
        self.rows = 0
        self._max_et: int | None = None
        self._et_type = schema.field(vocab.event_time_column).type
        self._file = _HashingFile(self.path)
        self._writer: pq.ParquetWriter | None = None
        self._hasher: Any = None
        if not _has_struct(schema) and all(_parquet_stable(f.type) for f in schema):
            from coordinator.data.hashing import LogicalHasher

            self._hasher = LogicalHasher(schema)
        self._queue: queue.Queue[object] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # -- background sink ---------------------------------------------------------------------

    def _sink(self) -> None:
        pending: list[pa.RecordBatch] = []
        rows = 0
        size = 0
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    break
                if self._error is not None:
                    continue  # drain after a failure
                assert isinstance(item, pa.RecordBatch)
                if self._hasher is not None:
                    self._hasher.update(item)
                pending.append(item)
                rows += item.num_rows
                size += item.nbytes
                if rows >= _ROW_GROUP_ROWS or size >= _ROW_GROUP_BYTES:
                    self._write_group(pending)
                    pending, rows, size = [], 0, 0
            if self._error is None:
                self._write_group(pending)
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
        except BaseException as e:
            self._error = e
            while self._queue.get() is not _DONE:
                pass

    def _write_group(self, batches: list[pa.RecordBatch]) -> None:
        if not batches:
            return
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self._file,
                self.schema,
                compression="snappy",
                use_dictionary=True,
                write_statistics=True,
                data_page_version="1.0",
            )
        table = pa.Table.from_batches(batches, schema=self.schema)
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def _put(self, item: object) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._sink, name="slice-writer", daemon=True)
            self._thread.start()
        self._queue.put(item)

    def _join(self) -> None:
        if self._thread is not None:
            self._queue.put(_DONE)
            self._thread.join()
            self._thread = None
        if self._writer is not None:  # only if the sink failed half-way
            self._writer.close()
            self._writer = None
        if self._error is not None:
            raise self._error

    # -- API -----------------------------------------------------------------------------------

    def write(self, staged: pa.RecordBatch | pa.Table) -> None:
        """Append staged rows (schema = output schema minus ``offset``)."""
        if self._error is not None:
            self._join()
        batches = staged.to_batches() if isinstance(staged, pa.Table) else [staged]
        for b in batches:
            n = b.num_rows
            if n == 0:
                continue
            offsets = pa.array(
                np.arange(self.start_offset + self.rows, self.start_offset + self.rows + n),
                pa.int64(),
            )
            out = pa.RecordBatch.from_arrays([offsets, *b.columns], schema=self.schema)
            keys = sort_keys(b.column(self.vocab.event_time_column))
            top = int(keys.max())
            self._max_et = top if self._max_et is None else max(self._max_et, top)
            self.rows += n
            self._put(out)

    def close_as_run(self) -> ParquetRun | None:
        """Close the file without storing it and return it as a sorted run (None if empty)."""
        try:
            self._join()
        finally:
            self._file.close()
        if self.rows == 0:
            self.path.unlink(missing_ok=True)
            return None
        staged = pa.schema(list(self.schema)[1:])
        return ParquetRun(self.path, staged, drop=(self.vocab.offset_column,))

    def abort(self) -> None:
        """Discard the file."""
        try:
            self._join()
        except BaseException:  # discarding the file anyway
            pass
        finally:
            self._file.close()
            self.path.unlink(missing_ok=True)

    def finish(self) -> WrittenSlice | None:
        """Close, hash and store the file as ``data/<physical hash>`` (None if no rows)."""
        from coordinator.data.hashing import logical_hash

        try:
            self._join()
            if self.rows == 0:
                self._file.close()
                self.path.unlink(missing_ok=True)
                return None
            if self.durable:
                self._file.fsync()
            self._file.close()
            if self._hasher is not None:
                lh = self._hasher.finalize()
            else:
                lh = Multihash.from_multibase(logical_hash(self.path))
            ph = Multihash(Multicodec.SHA3_256, self._file.sha3.digest())
            size = self._file.size
            final = self.directory / ph.to_multibase()
            if final.exists():
                self.path.unlink()
            else:
                os.replace(self.path, final)
                if self.durable:
                    fsync_dir(self.directory)
        except BaseException:
            self._file.close()
            self.path.unlink(missing_ok=True)
            raise
        assert self._max_et is not None
        return WrittenSlice(
            path=final,
            physical_hash=ph,
            logical_hash=lh,
            size=size,
            offset_interval=m.OffsetInterval(
                start=self.start_offset, end=self.start_offset + self.rows - 1
            ),
            max_event_time=Timestamp(_event_time_ns(self._max_et, self._et_type)),
            schema=self.schema,
        )


def write_slice(
    staged: Iterable[pa.Table | pa.RecordBatch],
    *,
    directory: Path,
    schema: pa.Schema,
    vocab: Vocab,
    start_offset: int,
    sort_by_event_time: bool,
    spill_dir: Path,
    run_bytes: int = DEFAULT_RUN_BYTES,
    durable: bool = True,
) -> WrittenSlice | None:
    """Write staged rows as one data slice; None if there are no rows.

    With ``sort_by_event_time`` (Append, Ledger) rows are put in stable event-time order:
    they stream straight to the file while they arrive in order; at the first out-of-order
    row the part written so far becomes the first run of an external merge sort
    (:mod:`coordinator.ingest.spool`) whose other runs are spilled to ``spill_dir``, and the
    file is rewritten from the merge. Otherwise rows are written as given (Snapshot input is
    already sorted by key and op).
    """
    writer = SliceFileWriter(directory, schema, vocab, start_offset, durable=durable)
    try:
        batches: Iterator[pa.RecordBatch] = (
            b for t in staged for b in (t.to_batches() if isinstance(t, pa.Table) else [t])
        )
        if not sort_by_event_time:
            for b in batches:
                writer.write(b)
            return writer.finish()
        last: int | None = None
        for b in batches:
            if b.num_rows == 0:
                continue
            keys = sort_keys(b.column(vocab.event_time_column))
            if is_nondecreasing(keys) and (last is None or int(keys[0]) >= last):
                writer.write(b)
                last = int(keys[-1])
                continue
            # Out of order: fall back to an external sort.
            staged_schema_ = pa.schema(list(schema)[1:])
            prefix = writer.close_as_run()
            runs: list[Run] = [prefix] if prefix is not None else []
            spill_dir.mkdir(parents=True, exist_ok=True)
            runs.extend(
                spill_runs(
                    chain([b], batches), vocab.event_time_column, spill_dir, run_bytes=run_bytes
                )
            )
            writer = SliceFileWriter(directory, schema, vocab, start_offset, durable=durable)
            try:
                for sb in merge_runs(runs, vocab.event_time_column, staged_schema_):
                    writer.write(sb)
            finally:
                if prefix is not None:
                    prefix.path.unlink(missing_ok=True)
            break
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


# --------------------------------------------------------------------------------------------
# AddData
# --------------------------------------------------------------------------------------------


def add_data_event(
    *,
    prev_offset: int | None,
    prev_checkpoint: Multihash | None,
    prev_watermark: Timestamp | None,
    written: WrittenSlice | None,
    explicit_watermark: Timestamp | None = None,
    extra_json: str | None = None,
    prev_source_state: m.SourceState | None = None,
    new_source_state: m.SourceState | None = None,
) -> m.AddData | None:
    """The ``AddData`` for a slice (or for no data), or None if nothing would change.

    ``newWatermark`` is the explicit watermark if given, else the maximum event time of the
    slice if it advances the previous watermark, else the previous watermark (kamu's
    ``compute_offset_and_watermark``). ``prevCheckpoint`` is carried; no checkpoint is written.
    ``new_source_state`` (polling sources) is written as given; without data, a block is still
    due when it differs from ``prev_source_state`` (kamu's writer: an empty commit is one that
    changes neither the data, the watermark nor the source state). ``extra_json`` is the
    ``ExtraAttributes`` JSON (linked objects summary), written only when linked objects are
    present.

    Raises:
        IngestError: the explicit watermark is older than the current one.
    """
    if (
        explicit_watermark is not None
        and prev_watermark is not None
        and explicit_watermark < prev_watermark
    ):
        raise IngestError(
            f"watermark {explicit_watermark} is before the current watermark "
            f"{prev_watermark}; watermarks never decrease"
        )
    if written is None:
        watermark = explicit_watermark if explicit_watermark is not None else prev_watermark
        if watermark == prev_watermark and new_source_state == prev_source_state:
            return None
        return m.AddData(
            prev_checkpoint=prev_checkpoint,
            prev_offset=prev_offset,
            new_watermark=watermark,
            new_source_state=new_source_state,
        )
    if explicit_watermark is not None:
        watermark = explicit_watermark
    else:
        data_max = written.max_event_time
        if prev_watermark is None or (data_max is not None and data_max > prev_watermark):
            watermark = data_max
        else:
            watermark = prev_watermark
    kwargs: dict[str, Any] = {
        "prev_checkpoint": prev_checkpoint,
        "prev_offset": prev_offset,
        "new_data": written.data_slice(),
        "new_watermark": watermark,
        "new_source_state": new_source_state,
    }
    if extra_json is not None:
        kwargs["extra"] = _extra_attributes(extra_json)
    return m.AddData(**kwargs)


def _extra_attributes(entries: str) -> m.ExtraAttributes:
    return m.ExtraAttributes(entries=entries)
