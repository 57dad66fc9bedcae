"""Push ingest: read files -> merge -> write slices -> commit ``AddData`` blocks.

This is kamu-cli's ``PushIngestServiceImpl`` + ``DataWriterDataFusion`` for a local dataset:

1. **Source.** The dataset's active ``AddPushSource`` named ``source_name`` (or the only one)
   gives the read step, the merge strategy (any of the five of spec v0.37) and the preprocess
   query (run on an engine by :mod:`coordinator.ingest.preprocess`). The chain also gives the
   vocabulary (``SetVocab``), the previous slices, offset, watermark and checkpoint.
2. **Per file** (each file is one push, i.e. one ``AddData``): an empty (0-byte) file is a
   no-op. The rows are read in bounded batches, merged against the previous data (Ledger:
   its keys; Snapshot: its projected state; UpsertStream: the state of the file's keys),
   staged with the system columns, written as one Parquet part ``data/<physical hash>`` with
   contiguous offsets, and described by an ``AddData``. A file whose merge yields no rows
   commits nothing unless an explicit watermark advances (kamu's ``EmptyCommit`` -> "up to
   date").
3. **Commit.** ``SetDataSchema`` (the output schema, arrow-rs bytes) precedes the first data
   block when the dataset has none yet. All blocks of the call are appended at once by
   :meth:`Dataset.append_many_bytes`, which re-validates them against the current head and
   moves ``refs/head`` once, last; data files are stored before.

If anything fails, the chain is unchanged. Data parts written by the failed call are removed
(best effort); a crash can leave an unreferenced part or ``.pending-*`` file behind in
``data/``, which is harmless (``Dataset.cleanup`` removes pending files; unreferenced parts are
garbage). Linked objects stored for the call are kept (they are content-addressed and may be
shared).

Concurrency: the dataset's write lock is taken by ``append_many_bytes`` for the commit only;
if another writer moved the head in between, the commit fails with
:class:`ConcurrentModification` and nothing is committed.

Memory: Append reads, stages and writes batch by batch (an out-of-order event time falls back
to an external sort); Ledger also holds the previous keys; Snapshot holds the new snapshot and
the previous state (like kamu's in-memory join), so a new snapshot over ``snapshot_bytes``
(:data:`MAX_SNAPSHOT_BYTES`) is refused. ChangelogStream and UpsertStream hold the file (sorted
by key), so an input over ``stream_bytes`` (:data:`MAX_STREAM_BYTES`) is refused; UpsertStream
also holds the previous row of each key of the file (read a row group at a time, other keys
dropped). Limits and figures: ``docs/resource-budget.md``.
"""

from __future__ import annotations

import datetime as dt
import functools
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, ParamSpec, TypedDict, TypeVar, Unpack

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator.chain.validation import ChainState
from coordinator.clock import TimestampClock
from coordinator.errors import (
    ChainRuleViolation,
    ConcurrentModification,
    MergeError,
    PushSourceNotFound,
    UnsupportedPreprocess,
)
from coordinator.ingest import merge as mg
from coordinator.ingest.inputs import InputFile
from coordinator.ingest.linked import (
    LinkedObjects,
    LinkedObjectsSummary,
    extra_attributes_json,
    store_objects,
    summarize_links,
    validate_link_columns,
)
from coordinator.ingest.prepare import DEFAULT_MAX_DECOMPRESSED_BYTES
from coordinator.ingest.push_plan import IngestLimits, IngestPlan, plan_ingest
from coordinator.ingest.readers import (
    DEFAULT_BLOCK_BYTES,
    read_batches,
    read_parquet_as,
    read_schema,
)
from coordinator.ingest.spool import DEFAULT_RUN_BYTES
from coordinator.ingest.writer import (
    Vocab,
    WrittenSlice,
    add_data_event,
    schema_event,
    stage_batch,
    write_slice,
)
from coordinator.metadata import block_hash, encode_block
from coordinator.metadata import model as m
from coordinator.metadata.odf_schema import schema_as_arrow
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset

if TYPE_CHECKING:
    from coordinator.ingest.preprocess import PreprocessEngine

__all__ = [
    "MAX_SNAPSHOT_BYTES",
    "MAX_STREAM_BYTES",
    "PREPROCESS_UNSUPPORTED",
    "IngestOptions",
    "IngestProgress",
    "IngestResult",
    "InputFile",
    "PushSourceInfo",
    "ingest",
    "ingest_resolved",
    "resolve_push_source",
    "scan_source",
    "system_clock",
]

PREPROCESS_UNSUPPORTED: Final = (
    "the source has a preprocess query, which runs on an engine, and none was given"
)


def system_clock() -> Timestamp:
    """The current UTC time."""
    return Timestamp.from_datetime(dt.datetime.now(dt.UTC))


@dataclass(frozen=True, slots=True)
class IngestProgress:
    """A progress report: ``stage`` is ``"read"``, ``"write"`` or ``"commit"``."""

    stage: str
    file: Path | None
    file_index: int
    files_total: int
    bytes_read: int
    bytes_total: int


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest committed (``new_blocks`` empty: the dataset was up to date)."""

    old_head: Multihash | None
    new_head: Multihash | None
    new_blocks: tuple[Multihash, ...]
    slices: tuple[m.DataSlice, ...]
    num_records: int
    watermark: Timestamp | None
    linked_objects: LinkedObjectsSummary | None = None

    @property
    def up_to_date(self) -> bool:
        """True if nothing was committed."""
        return not self.new_blocks


@dataclass(frozen=True, slots=True)
class PushSourceInfo:
    """What the writer needs from the chain (kamu ``DataWriterMetadataState``).

    ``source`` is the push source, or the polling source (:mod:`coordinator.ingest.polling`),
    which reads, preprocesses and merges the same way; ``source_state`` is the newest
    ``AddData``'s ``newSourceState`` (kamu's ``SearchSourceStateVisitor``).
    """

    state: ChainState
    source: m.AddPushSource | m.SetPollingSource
    vocab: Vocab
    data_slices: tuple[Multihash, ...]
    data_schema: m.SetDataSchema | None
    source_state: m.SourceState | None = None


def resolve_push_source(dataset: Dataset, source_name: str | None) -> PushSourceInfo:
    """Scan the chain for the active push source and the writer's metadata state.

    With ``source_name`` None the dataset must have exactly one active push source.

    Raises:
        PushSourceNotFound: no such (or no unambiguous) active push source.
    """
    state = dataset.state()
    if state.is_empty:
        raise PushSourceNotFound("the dataset has no metadata chain")
    if state.dataset_kind != m.DatasetKind.ROOT:
        raise PushSourceNotFound("push ingest is only possible into root datasets")
    active = state.push_sources
    if source_name is None:
        if not active:
            raise PushSourceNotFound("the dataset has no active push source")
        if len(active) > 1:
            raise PushSourceNotFound(
                "Explicit source name is required to pick between several active push sources: "
                + ", ".join(sorted(active))
            )
        (name,) = tuple(active)
    else:
        if source_name not in active:
            raise PushSourceNotFound(f"Source '{source_name}' not found")
        name = source_name
    info = scan_source(
        dataset, state, lambda e: isinstance(e, m.AddPushSource) and e.source_name == name
    )
    if info is None:  # pragma: no cover - ChainState says it is active
        raise PushSourceNotFound(f"Source '{name}' not found")
    return info


def scan_source(
    dataset: Dataset,
    state: ChainState,
    is_source: Callable[[m.AddPushSource | m.SetPollingSource], bool],
    *,
    source_state: bool = False,
) -> PushSourceInfo | None:
    """The writer's metadata state of the source ``is_source`` picks (its newest event; None if
    the chain has none): the newest vocabulary and data schema, the data slices (oldest first)
    and, with ``source_state`` (polling sources), the newest ``AddData``'s source state."""
    source: m.AddPushSource | m.SetPollingSource | None = None
    vocab_event: m.SetVocab | None = None
    data_schema: m.SetDataSchema | None = None
    newest_state: m.SourceState | None = None
    seen_add_data = False
    slices: list[Multihash] = []
    for _, block in dataset.iter_blocks(state.head):
        e = block.event
        if isinstance(e, m.AddData):
            if source_state and not seen_add_data:
                # kamu's SearchSourceStateVisitor: the newest AddData's state, even if None.
                newest_state = e.new_source_state
                seen_add_data = True
            if e.new_data is not None:
                slices.append(e.new_data.physical_hash)
        elif isinstance(e, m.AddPushSource | m.SetPollingSource) and source is None:
            if is_source(e):
                source = e
        elif isinstance(e, m.SetVocab) and vocab_event is None:
            vocab_event = e
        elif isinstance(e, m.SetDataSchema) and data_schema is None:
            data_schema = e
    if source is None:
        return None
    slices.reverse()
    return PushSourceInfo(
        state, source, Vocab.of(vocab_event), tuple(slices), data_schema, newest_state
    )


def _existing_schema(dataset: Dataset, info: PushSourceInfo) -> pa.Schema | None:
    """The dataset's output schema: ``SetDataSchema`` decoded, else the newest part's."""
    if info.data_schema is not None:
        # An ODF schema (spec v0.37) converts with kamu's default settings, as its writer
        # does when it checks a new slice against the dataset's schema.
        return schema_as_arrow(info.data_schema)
    if info.data_slices:
        schema = pq.read_schema(dataset.data.path_of(info.data_slices[-1]))
        return schema.remove_metadata()
    return None


def _with_event_time(batch: pa.RecordBatch | pa.Table, new: pa.Schema) -> pa.Table:
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    # A set, built once: ``column_names`` is a new list on every call, and testing it for
    # every field made wide inputs quadratic (5,000 columns: 7 s).
    present = set(table.column_names)
    for f in new:
        if f.name not in present:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table


def _read_prior(
    paths: Sequence[Path], columns: Sequence[str], schema: pa.Schema
) -> Iterator[pa.Table]:
    """Previous slices, oldest first, projected to ``columns`` and cast to ``schema``."""
    for p in paths:
        t = pq.read_table(p, columns=list(columns))
        yield pa.table([t.column(f.name).cast(f.type) for f in schema], schema=schema)


def _read_prior_for_keys(
    paths: Sequence[Path], columns: Sequence[str], schema: pa.Schema
) -> Iterator[pa.Table]:
    """Like :func:`_read_prior`, a row group at a time (the caller keeps only some keys)."""
    for p in paths:
        f = pq.ParquetFile(p)
        for i in range(f.num_row_groups):
            t = f.read_row_group(i, columns=list(columns))
            yield pa.table([t.column(fl.name).cast(fl.type) for fl in schema], schema=schema)


def _whole_input(
    batches: Iterable[pa.RecordBatch], new: pa.Schema, limit: int, what: str, setting: str
) -> pa.Table:
    """All batches of one file as a table, refused past ``limit`` Arrow bytes."""
    tables = []
    size = 0
    for b in batches:
        size += b.nbytes
        if size > limit:
            raise MergeError(
                f"a {what} merge holds the whole input file in memory, and this one is larger "
                f"than {limit:,} bytes of Arrow data (the ingest's {setting})"
            )
        tables.append(_with_event_time(b, new))
    table = pa.concat_tables(tables) if tables else new.empty_table()
    return table.cast(new)


def _merged_stream(
    merge: m.MergeStrategy,
    batches: Iterable[pa.RecordBatch],
    new: pa.Schema,
    prior: Sequence[Path],
    vocab: Vocab,
    snapshot_bytes: int = 0,
    stream_bytes: int = 0,
) -> tuple[Iterator[pa.Table], bool]:
    """The merge strategy applied to the batches: (merged tables, sort by event time?)."""
    op = vocab.operation_type_column
    if isinstance(merge, m.MergeStrategyAppend):
        return (mg.merge_append(_with_event_time(b, new), op_column=op) for b in batches), True
    if isinstance(merge, m.MergeStrategyLedger):
        pk = list(merge.primary_key)
        key_schema = pa.schema([new.field(c) for c in pk])
        seen = mg.distinct_keys(_read_prior(prior, pk, key_schema), pk) if prior else None
        return _ledger(batches, new, seen, pk, op), True
    if isinstance(merge, m.MergeStrategyChangelogStream):
        return _changelog(batches, new, list(merge.primary_key), op, stream_bytes), False
    if isinstance(merge, m.MergeStrategyUpsertStream):
        return _upsert(batches, new, prior, vocab, list(merge.primary_key), stream_bytes), False
    assert isinstance(merge, m.MergeStrategySnapshot)
    return _snapshot(batches, new, prior, vocab, merge, snapshot_bytes), False


def _ledger(
    batches: Iterable[pa.RecordBatch], new: pa.Schema, seen: pa.Table | None, pk: list[str], op: str
) -> Iterator[pa.Table]:
    """Ledger: the rows whose key was not seen before, as appends."""
    for b in batches:
        t = mg.ledger_filter(_with_event_time(b, new), seen, pk)
        yield mg.prepend_op(t, mg.Op.APPEND, op)


def _changelog(
    batches: Iterable[pa.RecordBatch], new: pa.Schema, pk: list[str], op: str, limit: int
) -> Iterator[pa.Table]:
    """ChangelogStream: the whole file, checked and sorted by key."""
    setting = "stream_bytes, default push.MAX_STREAM_BYTES"
    table = _whole_input(batches, new, limit, "ChangelogStream", setting)
    yield mg.sort_snapshot(mg.merge_changelog_stream(table, pk, op_column=op), pk, op)


def _upsert(
    batches: Iterable[pa.RecordBatch],
    new: pa.Schema,
    prior: Sequence[Path],
    vocab: Vocab,
    pk: list[str],
    limit: int,
) -> Iterator[pa.Table]:
    """UpsertStream: the whole file against the previous state of its keys."""
    op = vocab.operation_type_column
    setting = "stream_bytes, default push.MAX_STREAM_BYTES"
    table = _whole_input(batches, new, limit, "UpsertStream", setting)
    state = None
    if prior:
        # Only the keys of the input can change, so the previous state is gathered for
        # those keys alone: at most one previous row per input row, whatever the history.
        data = [f for f in new if f.name != op]
        ledger_schema = pa.schema(
            [pa.field(vocab.offset_column, pa.int64()), pa.field(op, mg.OP_TYPE), *data]
        )
        keys = table.select(pk)
        latest = mg.fold_latest(
            _read_prior_for_keys(prior, ledger_schema.names, ledger_schema), pk, keys
        )
        if latest is not None:
            state = mg.project_upsert_state(
                latest, pk, offset_column=vocab.offset_column, op_column=op
            )
    diff = mg.merge_upsert_stream(
        table, state, pk, op_column=op, event_time_column=vocab.event_time_column
    )
    yield mg.sort_snapshot(diff, pk, op)


def _snapshot(
    batches: Iterable[pa.RecordBatch],
    new: pa.Schema,
    prior: Sequence[Path],
    vocab: Vocab,
    merge: m.MergeStrategySnapshot,
    limit: int,
) -> Iterator[pa.Table]:
    """Snapshot: the new snapshot against the projected previous state."""
    op = vocab.operation_type_column
    pk = list(merge.primary_key)
    compare = list(merge.compare_columns) if merge.compare_columns is not None else None
    setting = "snapshot_bytes, default push.MAX_SNAPSHOT_BYTES"
    snap = _whole_input(batches, new, limit, "Snapshot", setting)
    state = None
    if prior:
        ledger_schema = pa.schema([pa.field(op, mg.OP_TYPE), *new])
        latest = mg.fold_latest(_read_prior(prior, ledger_schema.names, ledger_schema), pk)
        if latest is not None:
            state = mg.project_snapshot_state(
                latest, pk, offset_column=vocab.offset_column, op_column=op
            )
    diff = mg.merge_snapshot(
        snap, state, pk, compare, op_column=op, event_time_column=vocab.event_time_column
    )
    yield mg.sort_snapshot(diff, pk, op)


#: Largest new snapshot (Arrow bytes of the file read) a Snapshot merge takes: the merge joins
#: the whole snapshot with the previous state in memory (about five times the data at its
#: peak), so a larger one is refused with a ``MergeError`` instead of growing without bound.
MAX_SNAPSHOT_BYTES: Final = 40 << 20

#: Largest input (Arrow bytes of one file) a ChangelogStream or UpsertStream merge takes: both
#: sort the whole input by key (and UpsertStream joins it with the previous state of its keys),
#: so the file is held in memory, like a Snapshot's.
MAX_STREAM_BYTES: Final = 40 << 20

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _returns_memory(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Hand Arrow's freed memory back to the system when ``fn`` returns or raises.

    Arrow's allocator (mimalloc) keeps freed pages for reuse, so a long-running daemon held
    on to the peak of its largest ingest (615 MB after a 1 GiB file) until the next one.
    """

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        finally:
            pa.default_memory_pool().release_unused()

    return wrapper


class IngestOptions(TypedDict, total=False):
    """The keyword options :func:`ingest` and :func:`ingest_resolved` share, described in
    :func:`ingest`; one left out takes its default (:func:`_options_limits` for the limits)."""

    clock: TimestampClock | None
    event_time: Timestamp | None
    watermark: Timestamp | None
    progress: Callable[[IngestProgress], None] | None
    linked_objects: LinkedObjects | None
    block_bytes: int
    run_bytes: int
    snapshot_bytes: int
    stream_bytes: int
    max_decompressed_bytes: int


def _options_limits(options: IngestOptions, function: str) -> IngestLimits:
    """The limits ``options`` set, defaults for those left out; an unknown option is refused
    as a misspelt keyword argument of ``function`` would be."""
    unknown = sorted(options.keys() - IngestOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword arguments {unknown}")
    return IngestLimits(
        block_bytes=options.get("block_bytes", DEFAULT_BLOCK_BYTES),
        run_bytes=options.get("run_bytes", DEFAULT_RUN_BYTES),
        snapshot_bytes=options.get("snapshot_bytes", MAX_SNAPSHOT_BYTES),
        stream_bytes=options.get("stream_bytes", MAX_STREAM_BYTES),
        max_decompressed_bytes=options.get(
            "max_decompressed_bytes", DEFAULT_MAX_DECOMPRESSED_BYTES
        ),
    )


@_returns_memory
def ingest(
    dataset: Dataset,
    files: Sequence[Path],
    *,
    source_name: str | None = None,
    engine: PreprocessEngine | None = None,
    **options: Unpack[IngestOptions],
) -> IngestResult:
    """Push ``files`` into ``dataset`` through its push source; see the module docstring.

    Args:
        dataset: a root dataset with an active ``AddPushSource``.
        files: input files, each ingested as one ``AddData`` (in order).
        source_name: the push source; None if the dataset has exactly one.
        engine: runs the source's preprocess query, if it has one
            (:mod:`coordinator.ingest.preprocess`); without one such a source is refused.

    Options (:class:`IngestOptions`):
        clock: system time source (default: the UTC wall clock); one reading per call.
        event_time: event time for rows without one (kamu's "source event time"); defaults to
            the system time.
        watermark: an explicit new watermark (must not be older than the current one);
            default: the maximum event time of the data, never decreasing.
        progress: called with :class:`IngestProgress` reports.
        linked_objects: ObjectLink columns and the object files supplied (RFC-017).
        block_bytes: input bytes per read batch (default :data:`DEFAULT_BLOCK_BYTES`).
        run_bytes: memory per sorted run if the event time needs an external sort (default
            :data:`DEFAULT_RUN_BYTES`).
        snapshot_bytes: the largest new snapshot (Arrow bytes) a Snapshot merge takes (default
            :data:`MAX_SNAPSHOT_BYTES`).
        stream_bytes: the largest input (Arrow bytes of one file) a ChangelogStream or
            UpsertStream merge takes (default :data:`MAX_STREAM_BYTES`).
        max_decompressed_bytes: the most an archive read step (``EsriShapefile``) may
            decompress to (``ingest.max_decompressed_bytes``; default
            :data:`DEFAULT_MAX_DECOMPRESSED_BYTES`).

    Raises:
        PushSourceNotFound, UnsupportedPreprocess, UnsupportedReadOption, InvalidDdlSchema,
        BadInputSchema, BadInputData, IncompatibleSchema, MergeError, DanglingObjectLink,
        InvalidObjectLink, ConcurrentModification: nothing was committed.
    """
    limits = _options_limits(options, "ingest")
    info = resolve_push_source(dataset, source_name)
    inputs = [InputFile(p) for p in files]
    transform = info.source.preprocess
    if transform is None:
        return ingest_resolved(dataset, info, inputs, **options)
    if engine is None:
        raise UnsupportedPreprocess(PREPROCESS_UNSUPPORTED)
    return _ingest_preprocessed(dataset, info, inputs, (transform, engine), limits, options)


def _ingest_preprocessed(
    dataset: Dataset,
    info: PushSourceInfo,
    inputs: Sequence[InputFile],
    query: tuple[m.TransformSql, PreprocessEngine],
    limits: IngestLimits,
    options: IngestOptions,
) -> IngestResult:
    """:func:`ingest` through the source's preprocess ``query``: the transform, run by the
    engine on each input, then its outputs ingested."""
    transform, engine = query
    from coordinator.ingest.preprocess import preprocess_inputs  # only a preprocess query needs it

    info_dir = dataset.layout.info_dir
    info_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="preprocess-", dir=info_dir) as work:
        schema, outputs = preprocess_inputs(
            info.source.read,
            transform,
            inputs,
            Path(work),
            engine,
            block_bytes=limits.block_bytes,
            max_decompressed_bytes=limits.max_decompressed_bytes,
        )
        return ingest_resolved(dataset, info, outputs, preprocessed=schema, **options)


@_returns_memory
def ingest_resolved(
    dataset: Dataset,
    info: PushSourceInfo,
    inputs: Sequence[InputFile],
    *,
    prepare: Callable[[Path, int], Path] | None = None,
    preprocessed: pa.Schema | None = None,
    **options: Unpack[IngestOptions],
) -> IngestResult:
    """:func:`ingest` from a resolved source: each input is one ``AddData`` (in order).

    An input carrying a ``source_state`` that differs from the previous one is committed even
    when it adds no data (kamu's writer: an ``AddData`` with only the new source state), so the
    next poll resumes from it. ``prepare(path, index)`` (a polling source's prepare steps)
    turns each input into the file read, just before it is read; a prepared file other than
    the input is removed once read. A preprocess query is not run here: with ``preprocessed``
    (the query's output schema), the inputs are its Parquet outputs
    (:func:`coordinator.ingest.preprocess.preprocess_inputs`), read with that schema.
    ``max_decompressed_bytes`` bounds an ``EsriShapefile`` archive (see :func:`read_batches`).
    """
    limits = _options_limits(options, "ingest_resolved")
    clock = options.get("clock") or system_clock
    progress = options.get("progress")
    linked_objects = options.get("linked_objects")
    sample = next((i.path for i in inputs if i.path.is_file() and i.path.stat().st_size), None)
    read = preprocessed if preprocessed is not None else read_schema(info.source.read, sample)
    existing = _existing_schema(dataset, info)
    links = linked_objects
    plan = plan_ingest(
        state=info.state,
        merge=info.source.merge,
        vocab=info.vocab,
        read=read,
        existing=existing,
        now=clock(),
        event_time=options.get("event_time"),
        watermark=options.get("watermark"),
        limits=limits,
        check_links=None if links is None else lambda s: validate_link_columns(s, links.columns),
    )
    run = _IngestRun(dataset, info, plan, len(inputs), progress, linked_objects)
    try:
        if linked_objects is not None and linked_objects.objects:
            store_objects(dataset.data, linked_objects.objects)
        info_dir = dataset.layout.info_dir
        info_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="ingest-", dir=info_dir) as spill:
            for index, item in enumerate(inputs):
                path = item.path if prepare is None else prepare(item.path, index)
                run.ingest_file(index, item, path, Path(spill), preprocessed)
        return run.commit()
    except BaseException:
        for w in run.written_slices:
            w.path.unlink(missing_ok=True)
        raise


class _IngestRun:
    """One ingest call carrying out an :class:`IngestPlan`: the chain position moves on with
    every committed input; the events are appended at once by :meth:`commit`."""

    def __init__(
        self,
        dataset: Dataset,
        info: PushSourceInfo,
        plan: IngestPlan,
        total_files: int,
        progress: Callable[[IngestProgress], None] | None,
        linked_objects: LinkedObjects | None,
    ) -> None:
        self.dataset, self.info, self.plan = dataset, info, plan
        self.total_files, self.progress, self.linked_objects = total_files, progress, linked_objects
        self.prev_offset = plan.prev_offset
        self.prev_watermark = plan.prev_watermark
        self.prev_source_state = info.source_state
        self.need_schema = plan.need_schema
        self.prior = [dataset.data.path_of(h) for h in info.data_slices]
        self.events: list[m.MetadataEvent] = []
        self.written_slices: list[WrittenSlice] = []
        self.link_total: LinkedObjectsSummary | None = None

    def report(self, stage: str, path: Path | None, index: int, done: int, size: int) -> None:
        """Tell ``progress`` (if any) where the call is."""
        if self.progress is not None:
            self.progress(IngestProgress(stage, path, index, self.total_files, done, size))

    def _batches(
        self, path: Path, index: int, size: int, preprocessed: pa.Schema | None
    ) -> Iterator[pa.RecordBatch]:
        def on_bytes(n: int) -> None:
            self.report("read", path, index, n, size)

        if not size:
            return iter(())
        if preprocessed is not None:
            return read_parquet_as(path, preprocessed, on_bytes)
        limits = self.plan.limits
        return read_batches(
            self.info.source.read,
            path,
            block_bytes=limits.block_bytes,
            on_bytes=on_bytes,
            max_decompressed_bytes=limits.max_decompressed_bytes,
        )

    def _write(
        self, batches: Iterator[pa.RecordBatch], fallback: Timestamp, spill: Path
    ) -> WrittenSlice | None:
        plan, limits = self.plan, self.plan.limits
        merged, by_event_time = _merged_stream(
            plan.merge,
            batches,
            plan.new,
            self.prior,
            plan.vocab,
            limits.snapshot_bytes,
            limits.stream_bytes,
        )
        staged_tables = (
            stage_batch(
                t,
                plan.staged,
                plan.vocab,
                system_time=plan.system_time,
                fallback_event_time=fallback,
            )
            for t in merged
        )
        return write_slice(
            staged_tables,
            directory=self.dataset.layout.data_dir,
            schema=plan.out_schema,
            vocab=plan.vocab,
            start_offset=0 if self.prev_offset is None else self.prev_offset + 1,
            sort_by_event_time=by_event_time,
            spill_dir=spill,
            run_bytes=limits.run_bytes,
            durable=self.dataset.data.durable,
        )

    def _summarize_links(self, written: WrittenSlice) -> str | None:
        """The ``AddData``'s extra attributes for the slice's object links (if any)."""
        if self.linked_objects is None:
            return None
        summary = summarize_links(
            written.path,
            self.linked_objects.columns,
            self.dataset.data,
            offset_column=self.plan.vocab.offset_column,
        )
        total = self.link_total
        self.link_total = LinkedObjectsSummary(
            (total.num_objects_naive if total else 0) + summary.num_objects_naive,
            (total.size_naive if total else 0) + summary.size_naive,
        )
        return extra_attributes_json(summary)

    def ingest_file(
        self, index: int, item: InputFile, path: Path, spill: Path, preprocessed: pa.Schema | None
    ) -> None:
        """Read, merge and write one input (read from ``path``) and queue its ``AddData``."""
        size = path.stat().st_size
        self.report("read", path, index, 0, size)
        if size == 0 and item.source_state in (None, self.prev_source_state):
            return  # kamu: "Early return due to an empty file"
        fallback = item.event_time if item.event_time is not None else self.plan.fallback_event_time
        batches = self._batches(path, index, size, preprocessed)
        written = self._write(batches, fallback, spill / f"file-{index}")
        self.report("write", path, index, size, size)
        if path != item.path:
            path.unlink(missing_ok=True)
        extra_json = None
        if written is not None:
            self.written_slices.append(written)
            extra_json = self._summarize_links(written)
        event = add_data_event(
            prev_offset=self.prev_offset,
            prev_checkpoint=self.plan.prev_checkpoint,
            prev_watermark=self.prev_watermark,
            written=written,
            explicit_watermark=self.plan.explicit_watermark,
            extra_json=extra_json,
            prev_source_state=self.prev_source_state,
            new_source_state=item.source_state,
        )
        if event is None:
            return  # nothing to commit for this file
        if self.need_schema:
            self.events.append(schema_event(self.plan.out_schema))
            self.need_schema = False
        self.events.append(event)
        if event.new_data is not None:
            self.prev_offset = event.new_data.offset_interval.end
            assert written is not None
            self.prior.append(written.path)
        self.prev_watermark = event.new_watermark
        self.prev_source_state = event.new_source_state

    def commit(self) -> IngestResult:
        """Append the queued events in one go (nothing queued: the dataset is up to date)."""
        state = self.info.state
        if not self.events:
            return IngestResult(state.head, state.head, (), (), 0, state.watermark, self.link_total)
        self.report("commit", None, self.total_files, 0, 0)
        blobs, hashes = _encode_blocks(state, self.plan.system_time, self.events)
        try:
            new_head = self.dataset.append_many_bytes(blobs, hashes)
        except ChainRuleViolation as e:
            if e.rule in ("prev-block-hash", "sequence-number"):
                raise ConcurrentModification(
                    f"the dataset changed while ingesting ({e}); nothing was committed"
                ) from e
            raise
        slices = tuple(e.new_data for e in self.events if isinstance(e, m.AddData) and e.new_data)
        return IngestResult(
            old_head=state.head,
            new_head=new_head,
            new_blocks=tuple(hashes),
            slices=slices,
            num_records=sum(s.offset_interval.end - s.offset_interval.start + 1 for s in slices),
            watermark=self.prev_watermark,
            linked_objects=self.link_total,
        )


def _encode_blocks(
    state: ChainState, system_time: Timestamp, events: Sequence[m.MetadataEvent]
) -> tuple[list[bytes], list[Multihash]]:
    """The blocks of ``events`` after the chain's head, encoded, and their hashes."""
    blobs: list[bytes] = []
    hashes: list[Multihash] = []
    head = state.head
    for j, ev in enumerate(events):
        block = m.MetadataBlock(
            system_time=system_time,
            prev_block_hash=head,
            sequence_number=state.sequence_number + 1 + j,
            event=ev,
        )
        data = encode_block(block)
        head = block_hash(data)
        blobs.append(data)
        hashes.append(head)
    return blobs, hashes
