"""Merge strategies (Append, Ledger, Snapshot, ChangelogStream, UpsertStream) over Arrow tables.

The semantics are those of kamu-cli v0.153 (``kamu-ingest-datafusion``
``merge_strategies/{append,ledger,snapshot}.rs``) and, for the two stream strategies of spec
v0.37, of kamu-cli HEAD (``merge_strategies/{changelog_stream,upsert_stream}.rs``); operation
codes are RFC-015's:
``0`` +A append, ``1`` -R retract, ``2`` -C correct-from, ``3`` +C correct-to, stored as
``int32`` (kamu's TODO to switch to ``u8`` was never done).

Every strategy prepends the operation-type column to the new data (``columns_to_front``);
the writer then adds the system columns and assigns offsets in the strategy's sort order:

* **Append** -- every new row is ``+A``. Sorted by event time (stable).
* **Ledger(primaryKey)** -- new rows whose key already occurs *anywhere* in the previous data
  are dropped (a left anti-join against all previous slices; rows whose key is null never
  match). Duplicate keys *within* the new data are all kept, as in kamu. Sorted by event time.
* **Snapshot(primaryKey, compareColumns)** -- the previous data (a changelog) is projected to
  its latest state (per key, the row with the highest offset, kept if its op is +A or +C),
  then diffed with the new full snapshot by a full outer join on the key:

  - key only in the new data: ``+A`` with the new values;
  - key only in the old state: ``-R`` with the old values;
  - key in both and a compared column differs: ``-C`` with the old values then ``+C`` with the
    new values;
  - compared columns are ``compareColumns`` or else every new column except the key; a
    comparison is ``IS DISTINCT FROM`` (floats by bit pattern, as arrow-rs's total order),
    except that the event-time column only counts when the new value is not null.

  The output is sorted by the key columns (ascending, nulls first) and then by op, which puts
  each ``-C`` right before its ``+C``. As in kamu, which side a row came from is decided by the
  *first* key column being null, so a row whose first key column is null is treated as
  unmatched (kamu quirk, reproduced for identical output).
* **ChangelogStream(primaryKey)** (spec v0.37) -- the input already is a changelog: it carries
  the op column itself and is passed through unchanged once the key and op columns are checked.
  The previous data is not consulted. Sorted like Snapshot (key, then op), which puts each
  ``-C`` before its ``+C``; rows equal in key and op keep their input order.
* **UpsertStream(primaryKey)** (spec v0.37) -- the input is a stream of upserts (op ``+A``, or
  absent) and deletions (op ``-R``). Per key only the input's *last* row counts; it is compared
  with the key's latest previous row (highest offset, unless that row is a ``-R``) through a
  left join on the key (a null key never matches):

  - ``-R`` for a key with a previous row: ``-R`` with the *previous* values; for a key without
    one: nothing (a deletion of an unknown key is ignored);
  - an upsert of a key without a previous row: ``+A`` with the new values;
  - an upsert that changes a column (every input column except the key and op, compared as in
    Snapshot, the event time only when the new one is not null): ``-C`` with the previous
    values then ``+C`` with the new values; an upsert that changes nothing: nothing.

  Sorted like Snapshot. Unlike Snapshot, only keys present in the input matter, so the previous
  state is gathered for those keys alone (:func:`fold_latest` with ``keys``).

Operation codes in stream input must be ``0``..``3`` and not null (kamu does not check them yet:
its ChangelogStream would store any value and its UpsertStream drops a row whose op is null);
such input is refused with :class:`MergeError` here rather than stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from coordinator.errors import MergeError
from coordinator.ingest.spool import sort_keys

__all__ = [
    "OP_TYPE",
    "Op",
    "check_op_codes",
    "check_primary_key",
    "distinct_from",
    "distinct_keys",
    "fold_latest",
    "key_filter",
    "ledger_filter",
    "merge_append",
    "merge_changelog_stream",
    "merge_ledger",
    "merge_snapshot",
    "merge_upsert_stream",
    "prepend_op",
    "project_snapshot_state",
    "project_upsert_state",
    "sort_by_event_time",
    "sort_snapshot",
]

OP_TYPE: Final = pa.int32()
_LI: Final = "__odf_left_row"
_RI: Final = "__odf_right_row"


class Op(IntEnum):
    """RFC-015 operation types (kamu ``odf::OperationType``)."""

    APPEND = 0
    RETRACT = 1
    CORRECT_FROM = 2
    CORRECT_TO = 3


def prepend_op(table: pa.Table, op: pa.Array | int, op_column: str = "op") -> pa.Table:
    """``table`` with an ``int32`` non-null op column in front (a constant or an array)."""
    if isinstance(op, int):
        op = pa.array(np.full(table.num_rows, op, dtype=np.int32), type=OP_TYPE)
    field = pa.field(op_column, OP_TYPE, nullable=False)
    return pa.table(
        [op, *table.columns], schema=pa.schema([field, *table.schema], table.schema.metadata)
    )


def check_primary_key(schema: pa.Schema, primary_key: Sequence[str], what: str = "data") -> None:
    """Raise :class:`MergeError` unless every primary-key column is in ``schema``."""
    if not primary_key:
        raise MergeError("the merge strategy's primary key is empty")
    names = set(schema.names)
    missing = [c for c in primary_key if c not in names]
    if missing:
        raise MergeError(
            f"primary key column(s) {', '.join(missing)} not found in the {what} "
            f"(columns: {', '.join(schema.names)})"
        )


# --------------------------------------------------------------------------------------------
# Append / Ledger
# --------------------------------------------------------------------------------------------


def merge_append(new: pa.Table, *, op_column: str = "op") -> pa.Table:
    """Append: every row becomes ``+A`` (op column in front)."""
    return prepend_op(new, Op.APPEND, op_column)


def _key_table(table: pa.Table, primary_key: Sequence[str], prefix: str) -> pa.Table:
    return pa.table({f"{prefix}{i}": table.column(c) for i, c in enumerate(primary_key)})


def _row_numbers(table: pa.Table) -> pa.Array:
    return pa.array(np.arange(table.num_rows, dtype=np.int64))


def _key_join(
    left_table: pa.Table,
    right_table: pa.Table,
    primary_key: Sequence[str],
    join_type: str,
    *,
    distinct_right: bool = False,
) -> pa.Table:
    """The ``join_type`` join of two tables on their primary-key columns (SQL semantics: a null
    key column never matches), with the left rows' numbers in ``_LI`` and the right rows' in
    ``_RI`` (unless ``distinct_right``: the right side is then its distinct keys only).

    The right key columns are cast to the left ones' types: the join wants equal types.
    """
    n = len(primary_key)
    left = _key_table(left_table, primary_key, "__l").append_column(_LI, _row_numbers(left_table))
    right = _key_table(right_table, primary_key, "__r")
    right = pa.table(
        [right.column(i).cast(left.column(i).type) for i in range(n)], names=right.column_names
    )
    if distinct_right:
        right = right.group_by(right.column_names, use_threads=False).aggregate([])
    else:
        right = right.append_column(_RI, _row_numbers(right_table))
    return left.join(
        right,
        keys=[f"__l{i}" for i in range(n)],
        right_keys=[f"__r{i}" for i in range(n)],
        join_type=join_type,
        coalesce_keys=False,
    )


def ledger_filter(
    new: pa.Table, seen_keys: pa.Table | None, primary_key: Sequence[str]
) -> pa.Table:
    """Rows of ``new`` whose key is not in ``seen_keys`` (a table of key columns), in order.

    Null keys never match (SQL join semantics), so rows with a null key column are kept.
    """
    check_primary_key(new.schema, primary_key)
    if seen_keys is None or seen_keys.num_rows == 0 or new.num_rows == 0:
        return new
    if len(primary_key) == 1:
        col = new.column(primary_key[0])
        value_set = seen_keys.column(0).combine_chunks()
        if value_set.type != col.type:
            value_set = value_set.cast(col.type)
        seen = pc.is_in(col, value_set=value_set, skip_nulls=True)
        return new.filter(pc.invert(seen))
    kept = _key_join(new, seen_keys, primary_key, "left anti")
    rows = np.sort(kept.column(_LI).to_numpy())
    return new.take(pa.array(rows))


def distinct_keys(tables: Iterable[pa.Table], primary_key: Sequence[str]) -> pa.Table | None:
    """The distinct primary keys of several tables (key columns only), or None if empty."""
    acc: pa.Table | None = None
    for t in tables:
        keys = t.select(list(primary_key))
        acc = keys if acc is None else pa.concat_tables([acc, keys.cast(acc.schema)])
        acc = acc.group_by(list(primary_key), use_threads=False).aggregate([])
        acc = acc.select(list(primary_key))
    return acc


def merge_ledger(
    new: pa.Table,
    prev: pa.Table | None,
    primary_key: Sequence[str],
    *,
    op_column: str = "op",
) -> pa.Table:
    """Ledger: drop rows whose key occurs in ``prev`` (all previous data); the rest are +A."""
    check_primary_key(new.schema, primary_key)
    seen = None
    if prev is not None:
        check_primary_key(prev.schema, primary_key, "previous data")
        seen = prev.select(list(primary_key))
    return prepend_op(ledger_filter(new, seen, primary_key), Op.APPEND, op_column)


def sort_by_event_time(table: pa.Table, event_time_column: str) -> pa.Table:
    """Stable sort by event time, nulls first (Append/Ledger ``sort_order``)."""
    col = table.column(event_time_column)
    keys = sort_keys(col)
    order = np.argsort(keys, kind="stable")
    return table.take(pa.array(order))


# --------------------------------------------------------------------------------------------
# Snapshot
# --------------------------------------------------------------------------------------------


def _latest_rows(table: pa.Table, primary_key: Sequence[str]) -> np.ndarray:
    """Indices of the last row of each key (rows must be in offset order)."""
    keyed = table.select(list(primary_key)).append_column(_LI, _row_numbers(table))
    last = keyed.group_by(list(primary_key), use_threads=False).aggregate([(_LI, "max")])
    return np.sort(last.column(f"{_LI}_max").to_numpy())


def key_filter(table: pa.Table, keys: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """Rows of ``table`` whose key is in ``keys`` (a table of key columns), in order.

    SQL join semantics: a row with a null key column never matches.
    """
    if table.num_rows == 0:
        return table
    if keys.num_rows == 0:
        return table.slice(0, 0)
    if len(primary_key) == 1:
        col = table.column(primary_key[0])
        value_set = keys.column(0).combine_chunks()
        if value_set.type != col.type:
            value_set = value_set.cast(col.type)
        return table.filter(pc.is_in(col, value_set=value_set, skip_nulls=True))
    kept = _key_join(table, keys, primary_key, "left semi", distinct_right=True)
    return table.take(pa.array(np.sort(kept.column(_LI).to_numpy())))


def fold_latest(
    slices: Iterable[pa.Table], primary_key: Sequence[str], keys: pa.Table | None = None
) -> pa.Table | None:
    """Fold previous slices (oldest first, rows in offset order) to the last row per key.

    Memory is bounded by the number of distinct keys plus one slice. With ``keys`` (a table of
    key columns) only rows of those keys are kept, so the state is at most one row per given
    key. Feed the result to :func:`project_snapshot_state` or :func:`project_upsert_state`.
    """
    acc: pa.Table | None = None
    for piece in slices:
        t = piece if keys is None else key_filter(piece, keys, primary_key)
        acc = t if acc is None else pa.concat_tables([acc, t.cast(acc.schema)])
        acc = acc.take(pa.array(_latest_rows(acc, primary_key)))
    return acc


def project_snapshot_state(
    ledger: pa.Table,
    primary_key: Sequence[str],
    *,
    offset_column: str = "offset",
    op_column: str = "op",
) -> pa.Table:
    """Latest state of a changelog: per key the highest-offset row, kept if it is +A or +C.

    The result has the ledger's columns minus the offset and op columns.
    """
    return _latest_state(
        ledger,
        primary_key,
        offset_column,
        op_column,
        lambda op: pc.or_(pc.equal(op, int(Op.APPEND)), pc.equal(op, int(Op.CORRECT_TO))),
    )


def project_upsert_state(
    ledger: pa.Table,
    primary_key: Sequence[str],
    *,
    offset_column: str = "offset",
    op_column: str = "op",
) -> pa.Table:
    """UpsertStream's ``latest_by_pk``: per key the highest-offset row, kept unless it is -R.

    (Snapshot keeps only +A and +C; kamu's UpsertStream only drops -R, so a -C left last by a
    hand-made changelog still counts as the key's state.) The result has the ledger's columns
    minus the offset and op columns.
    """
    return _latest_state(
        ledger,
        primary_key,
        offset_column,
        op_column,
        lambda op: pc.not_equal(op, int(Op.RETRACT)),
    )


def _latest_state(
    ledger: pa.Table,
    primary_key: Sequence[str],
    offset_column: str,
    op_column: str,
    alive: Callable[[pa.ChunkedArray], pa.Array],
) -> pa.Table:
    """Per key the highest-offset row of a changelog, kept where ``alive`` of its op is true
    (a null op: not kept); without the offset and op columns."""
    check_primary_key(ledger.schema, primary_key, "previous data")
    if offset_column in ledger.column_names:
        order = np.argsort(
            np.asarray(ledger.column(offset_column).to_numpy(zero_copy_only=False)),
            kind="stable",
        )
        ledger = ledger.take(pa.array(order))
    latest = ledger.take(pa.array(_latest_rows(ledger, primary_key)))
    state = latest.filter(pc.fill_null(alive(latest.column(op_column)), False))
    drop = [c for c in (offset_column, op_column) if c in state.column_names]
    return state.drop_columns(drop)


def distinct_from(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> pa.Array:
    """SQL ``a IS DISTINCT FROM b`` element-wise (no nulls in the result).

    Floats compare by bit pattern (arrow-rs total order: NaN equals NaN of the same payload,
    ``-0.0`` differs from ``0.0``).
    """
    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    b = b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b
    a_null = a.is_null()
    b_null = b.is_null()
    one_null = pc.xor(a_null, b_null)
    if pa.types.is_floating(a.type) and a.type == b.type:
        width = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[a.type.bit_width]
        a, b = a.view(width), b.view(width)
    try:
        ne = pc.not_equal(a, b)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        ne = pa.array(
            [x != y for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)], pa.bool_()
        )
    both = pc.and_(pc.invert(a_null), pc.invert(b_null))
    return pc.or_(one_null, pc.and_(both, pc.fill_null(ne, False)))


def _previous_as(prev_state: pa.Table, schema: pa.Schema, primary_key: Sequence[str]) -> pa.Table:
    """The previous state's columns of ``schema`` (the new data's), cast to its types.

    Raises:
        MergeError: the key or a column of the new data is missing from the previous state.
    """
    check_primary_key(prev_state.schema, primary_key, "previous data")
    # Sets, built once: a list per test made wide inputs quadratic in the number of columns.
    previous = set(prev_state.column_names)
    missing = [c for c in schema.names if c not in previous]
    if missing:
        raise MergeError(
            f"column(s) {', '.join(missing)} are not in the previous data (schema evolution is "
            "not supported)"
        )
    return pa.table(
        [prev_state.column(c).cast(schema.field(c).type) for c in schema.names], schema=schema
    )


def _full_outer_pairs(
    old: pa.Table, new: pa.Table, primary_key: Sequence[str]
) -> tuple[pa.Array, pa.Array]:
    """Row-index pairs (old, new) of a full outer join on the key (nulls: no partner).

    Ordered by new row, then old row, with unmatched old rows last (deterministic; the join
    engine's own order is not).
    """
    joined = _key_join(old, new, primary_key, "full outer")
    li = joined.column(_LI).combine_chunks()
    ri = joined.column(_RI).combine_chunks()
    big = np.iinfo(np.int64).max
    order = np.lexsort(
        (
            np.asarray(pc.fill_null(li, big).to_numpy(zero_copy_only=False)),
            np.asarray(pc.fill_null(ri, big).to_numpy(zero_copy_only=False)),
        )
    )
    idx = pa.array(order)
    return li.take(idx), ri.take(idx)


def merge_snapshot(
    new: pa.Table,
    prev_state: pa.Table | None,
    primary_key: Sequence[str],
    compare_columns: Sequence[str] | None = None,
    *,
    op_column: str = "op",
    event_time_column: str = "event_time",
) -> pa.Table:
    """Snapshot: the changelog turning ``prev_state`` into ``new`` (unsorted, op in front).

    ``prev_state`` is the projected previous state (:func:`project_snapshot_state`) with at
    least the columns of ``new``; None means "no previous data" (everything is +A).
    Sort the result with :func:`sort_snapshot`.
    """
    check_primary_key(new.schema, primary_key)
    if compare_columns is not None and not compare_columns:
        raise MergeError("Snapshot compareColumns must not be empty when given")
    if prev_state is None:
        return prepend_op(new, Op.APPEND, op_column)
    old = _previous_as(prev_state, new.schema, primary_key)
    li, ri = _full_outer_pairs(old, new, primary_key)
    o = old.take(li)  # null index -> null row
    n = new.take(ri)
    if compare_columns is not None:
        present = set(new.column_names)
        unknown = [c for c in compare_columns if c not in present]
        if unknown:
            raise MergeError(f"compare column(s) {', '.join(unknown)} not found in the data")
        compared = list(compare_columns)
    else:
        keys = set(primary_key)
        compared = [c for c in new.column_names if c not in keys]
    changed = pa.array(np.zeros(len(li), dtype=bool))
    for c in compared:
        d = distinct_from(o.column(c), n.column(c))
        if c == event_time_column:
            d = pc.and_(n.column(c).is_valid(), d)
        changed = pc.or_(changed, d)
    o, n = o.filter(changed), n.filter(changed)
    pk0 = primary_key[0]
    old_missing = o.column(pk0).is_null()
    new_missing = n.column(pk0).is_null()
    if isinstance(old_missing, pa.ChunkedArray):
        old_missing = old_missing.combine_chunks()
    if isinstance(new_missing, pa.ChunkedArray):
        new_missing = new_missing.combine_chunks()
    op = pc.if_else(
        old_missing,
        pa.scalar(int(Op.APPEND), OP_TYPE),
        pc.if_else(
            new_missing,
            pa.scalar(int(Op.RETRACT), OP_TYPE),
            pa.scalar(int(Op.CORRECT_TO), OP_TYPE),
        ),
    )
    values = [pc.if_else(new_missing, o.column(c), n.column(c)) for c in new.column_names]
    main = prepend_op(pa.table(values, schema=new.schema), op, op_column)
    both = pc.and_(pc.invert(old_missing), pc.invert(new_missing))
    before = o.filter(both)
    corrections = prepend_op(before, Op.CORRECT_FROM, op_column)
    return pa.concat_tables([main, corrections.cast(main.schema)])


def sort_snapshot(table: pa.Table, primary_key: Sequence[str], op_column: str = "op") -> pa.Table:
    """Snapshot ``sort_order``: key columns ascending with nulls first, then op (stable)."""
    if table.num_rows == 0:
        return table
    names = [*primary_key, op_column]
    try:  # pyarrow >= 25: per-key null placement
        order = pc.sort_indices(table, sort_keys=[(c, "ascending", "at_start") for c in names])
    except (TypeError, ValueError):  # pragma: no cover - older pyarrow
        order = pc.sort_indices(
            table, sort_keys=[(c, "ascending") for c in names], null_placement="at_start"
        )
    return table.take(order)


# --------------------------------------------------------------------------------------------
# ChangelogStream / UpsertStream (spec v0.37)
# --------------------------------------------------------------------------------------------


def check_op_codes(column: pa.ChunkedArray | pa.Array, op_column: str = "op") -> None:
    """Raise :class:`MergeError` unless every value is an RFC-015 operation code (0..3)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_integer(arr.type):
        raise MergeError(f"op column {op_column!r} must be an integer column, not {arr.type}")
    if arr.null_count:
        row = int(pc.index(arr.is_null(), True).as_py())
        raise MergeError(f"op column {op_column!r} is null in row {row + 1} of the input")
    if len(arr) == 0:
        return
    bad = pc.or_(pc.less(arr, int(Op.APPEND)), pc.greater(arr, int(Op.CORRECT_TO)))
    if pc.any(bad).as_py():
        row = int(pc.index(bad, True).as_py())
        raise MergeError(
            f"op column {op_column!r} has {arr[row].as_py()} in row {row + 1} of the input; "
            "operation codes are 0 (+A), 1 (-R), 2 (-C) and 3 (+C)"
        )


def _as_op(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr if arr.type == OP_TYPE else arr.cast(OP_TYPE)


def merge_changelog_stream(
    new: pa.Table, primary_key: Sequence[str], *, op_column: str = "op"
) -> pa.Table:
    """ChangelogStream: the input as it is, op column in front (sort with :func:`sort_snapshot`).

    Raises:
        MergeError: a key or the op column is missing, or an op value is not 0..3.
    """
    check_primary_key(new.schema, primary_key)
    if op_column not in new.column_names:
        raise MergeError(
            f"a ChangelogStream input must carry the op column {op_column!r} "
            f"(columns: {', '.join(new.column_names)})"
        )
    op = new.column(op_column)
    check_op_codes(op, op_column)
    return prepend_op(new.drop_columns([op_column]), _as_op(op), op_column)


def merge_upsert_stream(
    new: pa.Table,
    prev_state: pa.Table | None,
    primary_key: Sequence[str],
    *,
    op_column: str = "op",
    event_time_column: str = "event_time",
) -> pa.Table:
    """UpsertStream: the changelog that applies the upserts of ``new`` to ``prev_state``.

    ``new`` is the input (its op column optional: absent means every row is an upsert);
    ``prev_state`` the previous latest row per key (:func:`project_upsert_state`, possibly only
    for the keys of ``new``) with at least the columns of ``new``, or None. The result has the
    op column in front and the other columns of ``new``; sort it with :func:`sort_snapshot`.

    Raises:
        MergeError: a key column is missing, an op value is not 0..3, or a column of ``new`` is
            not in the previous data.
    """
    check_primary_key(new.schema, primary_key)
    if op_column in new.column_names:
        op_in = new.column(op_column)
        check_op_codes(op_in, op_column)
        data = new.drop_columns([op_column])
        retract = pc.equal(_as_op(op_in), int(Op.RETRACT))
    else:
        data = new
        retract = pa.array(np.zeros(new.num_rows, dtype=bool))
    # Only the last row of each key in the input counts (kamu's without_intermediate_updates).
    # (The copies below are skipped where they would change nothing: this merge holds the whole
    # input, and a copy of it per step is what its peak memory is made of.)
    last = _latest_rows(data, primary_key) if data.num_rows else np.zeros(0, np.int64)
    if len(last) != data.num_rows:  # some keys repeat
        data = data.take(pa.array(last))
        retract = retract.take(pa.array(last))
    if prev_state is None:
        old = data.slice(0, 0)
    else:
        old = _previous_as(prev_state, data.schema, primary_key)
    oi = _left_pairs(data, old, primary_key)  # per new row: its old row or null
    o = old.take(oi)
    matched = oi.is_valid()
    keys = set(primary_key)
    changed = pa.array(np.zeros(data.num_rows, dtype=bool))
    for c in data.column_names:
        if c in keys:
            continue
        d = distinct_from(o.column(c), data.column(c))
        if c == event_time_column:
            d = pc.and_(data.column(c).is_valid(), d)
        changed = pc.or_(changed, d)
    upsert = pc.invert(retract)
    keep = pc.or_(pc.and_(retract, matched), pc.and_(upsert, changed))
    n = data
    if pc.sum(keep).as_py() != data.num_rows:
        o, n = o.filter(keep), data.filter(keep)
        retract, matched = retract.filter(keep), matched.filter(keep)
    del data
    op = pc.if_else(
        retract,
        pa.scalar(int(Op.RETRACT), OP_TYPE),
        pc.if_else(
            matched,
            pa.scalar(int(Op.CORRECT_TO), OP_TYPE),
            pa.scalar(int(Op.APPEND), OP_TYPE),
        ),
    )
    if pc.any(retract).as_py():
        values = [pc.if_else(retract, o.column(c), n.column(c)) for c in n.column_names]
        main = prepend_op(pa.table(values, schema=n.schema), op, op_column)
    else:
        main = prepend_op(n, op, op_column)
    before = o.filter(pc.and_(pc.invert(retract), matched))
    corrections = prepend_op(before, Op.CORRECT_FROM, op_column)
    return pa.concat_tables([main, corrections.cast(main.schema)])


def _left_pairs(new: pa.Table, old: pa.Table, primary_key: Sequence[str]) -> pa.Array:
    """For each row of ``new``, the index of the ``old`` row with its key (null: none).

    ``old`` holds at most one row per key; a null key column never matches.
    """
    if old.num_rows == 0 or new.num_rows == 0:
        return pa.nulls(new.num_rows, pa.int64())
    joined = _key_join(new, old, primary_key, "left outer")
    li = np.asarray(joined.column(_LI).to_numpy(zero_copy_only=False), dtype=np.int64)
    if len(li) != new.num_rows:
        raise MergeError("the previous state holds more than one row for a key")
    order = np.argsort(li, kind="stable")
    ri = joined.column(_RI).combine_chunks()
    return ri.take(pa.array(order))
