"""The decisions of one push ingest (:func:`coordinator.ingest.push.ingest_resolved`), made
before any input is read.

:func:`plan_ingest` checks the source's read schema against the vocabulary, the dataset's
schema, Parquet and the merge strategy, and fixes the schemas, the system time, the fallback
event time and the chain position the first ``AddData`` continues from. The executor in
:mod:`coordinator.ingest.push` reads, merges, writes and commits accordingly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from coordinator.chain.validation import ChainState
from coordinator.errors import MergeError, UnsupportedReadOption
from coordinator.ingest import merge as mg
from coordinator.ingest.writer import (
    Vocab,
    check_schema_compatible,
    event_time_type,
    output_schema,
    staged_schema,
    validate_input_schema,
    with_event_time,
)
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash

__all__ = ["IngestLimits", "IngestPlan", "check_merge", "check_writable", "plan_ingest"]


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """The bounds of one ingest call (see :func:`coordinator.ingest.push.ingest`)."""

    block_bytes: int
    run_bytes: int
    snapshot_bytes: int
    stream_bytes: int
    max_decompressed_bytes: int


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """What one ingest call will do, whatever its inputs hold.

    ``new`` is the read schema with the event time; ``out_schema`` the slices' schema;
    ``staged`` the merged tables' schema before offsets. ``prev_*`` are where the first
    ``AddData`` continues the chain; ``need_schema``: a ``SetDataSchema`` precedes it.
    """

    merge: m.MergeStrategy
    vocab: Vocab
    new: pa.Schema
    out_schema: pa.Schema
    staged: pa.Schema
    system_time: Timestamp
    fallback_event_time: Timestamp
    explicit_watermark: Timestamp | None
    prev_offset: int | None
    prev_watermark: Timestamp | None
    prev_checkpoint: Multihash | None
    need_schema: bool
    limits: IngestLimits


def plan_ingest(
    *,
    state: ChainState,
    merge: m.MergeStrategy,
    vocab: Vocab,
    read: pa.Schema,
    existing: pa.Schema | None,
    now: Timestamp,
    event_time: Timestamp | None,
    watermark: Timestamp | None,
    limits: IngestLimits,
    check_links: Callable[[pa.Schema], None] | None = None,
) -> IngestPlan:
    """The plan of an ingest through a source reading ``read`` into a dataset whose chain is
    at ``state`` and whose output schema is ``existing`` (None: no data yet), at ``now``.

    The system time never goes back: a clock behind the chain's last block gives that
    block's time. ``check_links`` validates the read schema's ObjectLink columns.

    Raises:
        BadInputSchema, IncompatibleSchema, UnsupportedReadOption, MergeError: as the
        schemas and the merge strategy require.
    """
    stream = isinstance(merge, m.MergeStrategyChangelogStream | m.MergeStrategyUpsertStream)
    # Stream strategies read the op column from the input (kamu: no conflict for them).
    validate_input_schema(read, vocab, input_op=stream)
    new = with_event_time(read, vocab, event_time_type(read, vocab, existing))
    out_schema = output_schema(new, vocab)
    if existing is not None:
        check_schema_compatible(existing, out_schema)
    staged = staged_schema(new, vocab)
    check_writable(out_schema)
    check_merge(merge, new, vocab)
    if check_links is not None:
        check_links(read)
    system_time = (
        now if state.system_time is None or now >= state.system_time else state.system_time
    )
    return IngestPlan(
        merge=merge,
        vocab=vocab,
        new=new,
        out_schema=out_schema,
        staged=staged,
        system_time=system_time,
        fallback_event_time=event_time if event_time is not None else system_time,
        explicit_watermark=watermark,
        prev_offset=state.last_offset,
        prev_watermark=state.watermark,
        prev_checkpoint=state.checkpoint.physical_hash if state.checkpoint is not None else None,
        need_schema=not state.has_schema,
        limits=limits,
    )


def check_writable(schema: pa.Schema) -> None:
    """Refuse column types a Parquet part cannot hold (before reading anything)."""
    for f in schema:
        if pa.types.is_interval(f.type) or pa.types.is_duration(f.type):
            raise UnsupportedReadOption(
                f"column {f.name!r} has type {f.type}, which cannot be stored in Parquet"
            )


def check_merge(merge: m.MergeStrategy, new: pa.Schema, vocab: Vocab) -> None:
    """Refuse a merge strategy the schema ``new`` cannot carry out (keys, op column, compare
    columns)."""
    if isinstance(
        merge,
        m.MergeStrategyLedger
        | m.MergeStrategySnapshot
        | m.MergeStrategyChangelogStream
        | m.MergeStrategyUpsertStream,
    ):
        mg.check_primary_key(new, merge.primary_key)
    if isinstance(merge, m.MergeStrategyChangelogStream | m.MergeStrategyUpsertStream):
        _check_op_column(merge, new, vocab.operation_type_column)
    if isinstance(merge, m.MergeStrategySnapshot) and merge.compare_columns is not None:
        names = set(new.names)
        missing = [c for c in merge.compare_columns if c not in names]
        if missing or not merge.compare_columns:
            raise MergeError(
                f"compare column(s) {', '.join(missing) or '(none)'} not found in the data"
            )


def _check_op_column(
    merge: m.MergeStrategyChangelogStream | m.MergeStrategyUpsertStream, new: pa.Schema, op: str
) -> None:
    if op not in new.names:
        if isinstance(merge, m.MergeStrategyChangelogStream):
            raise MergeError(
                f"a ChangelogStream source must read the op column {op!r} (RFC-015 "
                "operation codes); the read schema has none"
            )
    elif isinstance(merge, m.MergeStrategyChangelogStream) and new.field(op).type != mg.OP_TYPE:
        # kamu stores a changelog's op column with the type it was read with; only INT
        # (int32, the op type of RFC-015 and of every other strategy) gives the same slice.
        raise MergeError(
            f"the op column {op!r} of a ChangelogStream source must be INT (int32), "
            f"not {new.field(op).type}"
        )
    elif not pa.types.is_integer(new.field(op).type):
        raise MergeError(
            f"the op column {op!r} must be an integer column, not {new.field(op).type}"
        )
