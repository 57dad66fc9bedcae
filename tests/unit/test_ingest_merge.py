"""Merge strategies over Arrow tables, checked against kamu-cli's own test expectations.

The Snapshot cases replay ``test_data_writer_snapshot_orders_by_pk_and_operation_type`` and the
``cdc_diff`` / ``project`` examples of kamu-cli v0.153 ``merge_strategies/snapshot.rs``.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.errors import MergeError
from coordinator.ingest.merge import (
    Op,
    distinct_from,
    fold_latest,
    ledger_filter,
    merge_append,
    merge_ledger,
    merge_snapshot,
    project_snapshot_state,
    sort_by_event_time,
    sort_snapshot,
)
from coordinator.ingest.spool import merge_runs, spill_runs

TS = pa.timestamp("ms", tz="UTC")
E1 = 946728000000  # 2000-01-01T12:00:00Z
E2 = E1 + 86_400_000


def ops(t: pa.Table) -> list[int]:
    return t.column("op").to_pylist()


# -- Append -----------------------------------------------------------------------------------


def test_append_puts_op_first() -> None:
    t = merge_append(pa.table({"a": [1, 2]}))
    assert t.column_names == ["op", "a"]
    assert t.schema.field("op").type == pa.int32()
    assert not t.schema.field("op").nullable
    assert ops(t) == [0, 0]


def test_sort_by_event_time_is_stable_with_nulls_first() -> None:
    t = pa.table({"event_time": pa.array([E2, None, E1, E2, E1], TS), "i": [0, 1, 2, 3, 4]})
    assert sort_by_event_time(t, "event_time").column("i").to_pylist() == [1, 2, 4, 0, 3]


# -- Ledger -----------------------------------------------------------------------------------


def test_ledger_without_previous_data_keeps_everything_including_duplicates() -> None:
    new = pa.table({"k": [1, 1, 2], "v": ["a", "b", "c"]})
    out = merge_ledger(new, None, ["k"])
    assert out.column("v").to_pylist() == ["a", "b", "c"]
    assert ops(out) == [0, 0, 0]


def test_ledger_drops_seen_keys_keeps_new_duplicates_and_null_keys() -> None:
    prev = pa.table({"k": [2, 3, None]})
    new = pa.table({"k": [1, 2, 4, 4, None, 3], "v": list("abcdef")})
    out = merge_ledger(new, prev, ["k"])
    # Duplicates within the new file are both kept (kamu: plain left anti-join); a null key
    # never matches, even a null key in the previous data.
    assert out.column("v").to_pylist() == ["a", "c", "d", "e"]


def test_ledger_composite_key() -> None:
    prev = pa.table({"d": ["x", "x"], "k": [1, 2]})
    new = pa.table({"d": ["x", "y", "x", None], "k": [1, 1, 3, 2], "v": [10, 20, 30, 40]})
    assert ledger_filter(new, prev, ["d", "k"]).column("v").to_pylist() == [20, 30, 40]


def test_ledger_missing_key_column() -> None:
    with pytest.raises(MergeError, match="nope"):
        merge_ledger(pa.table({"k": [1]}), None, ["nope"])


# -- Snapshot ---------------------------------------------------------------------------------


def ledger_of(rows: list[tuple[int, int, str, int]]) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array([r[0] for r in rows], pa.int64()),
            "op": pa.array([r[1] for r in rows], pa.int32()),
            "city": [r[2] for r in rows],
            "population": [r[3] for r in rows],
        }
    )


def test_project_state_from_kamu_docs() -> None:
    # snapshot.rs `project` doc example: a=+A,-C,+C,-R; b=+A,-C,+C; c=+A.
    ledger = ledger_of(
        [
            (0, 0, "a", 1000),
            (1, 0, "b", 2000),
            (2, 0, "c", 3000),
            (3, 2, "b", 2000),
            (4, 3, "b", 2500),
            (5, 2, "a", 1000),
            (6, 3, "a", 1500),
            (7, 1, "a", 1500),
        ]
    )
    state = project_snapshot_state(ledger, ["city"])
    got = sorted(state.to_pylist(), key=lambda r: str(r["city"]))
    assert got == [{"city": "b", "population": 2500}, {"city": "c", "population": 3000}]


def test_fold_latest_matches_project_over_whole_ledger() -> None:
    ledger = ledger_of([(0, 0, "a", 1), (1, 0, "b", 2), (2, 2, "a", 1), (3, 3, "a", 5)])
    slices = [ledger.slice(0, 2).drop_columns(["offset"]), ledger.slice(2).drop_columns(["offset"])]
    folded = fold_latest(slices, ["city"])
    assert folded is not None
    a = project_snapshot_state(folded, ["city"]).sort_by("city")
    b = project_snapshot_state(ledger, ["city"]).sort_by("city")
    assert a.equals(b)


def test_snapshot_first_round_is_all_appends_sorted_by_key() -> None:
    new = pa.table({"city": ["C", "A", "D", "B"], "population": [3000, 1000, 4000, 2000]})
    out = sort_snapshot(merge_snapshot(new, None, ["city"]), ["city"])
    assert out.column("city").to_pylist() == ["A", "B", "C", "D"]
    assert ops(out) == [0, 0, 0, 0]


def test_snapshot_corrections_and_retractions_like_kamu() -> None:
    state = pa.table(
        {
            "city": ["A", "B", "C", "D"],
            "population": [1000, 2000, 3000, 4000],
            "event_time": pa.array([E1] * 4, TS),
        }
    )
    new = pa.table(
        {
            "city": ["C", "B", "D", "E"],
            "population": [3000, 4000, 5000, 6000],
            "event_time": pa.array([None] * 4, TS),
        }
    )
    out = sort_snapshot(merge_snapshot(new, state, ["city"]), ["city"])
    assert out.column_names == ["op", "city", "population", "event_time"]
    assert [(r["op"], r["city"], r["population"]) for r in out.to_pylist()] == [
        (Op.RETRACT, "A", 1000),
        (Op.CORRECT_FROM, "B", 2000),
        (Op.CORRECT_TO, "B", 4000),
        (Op.CORRECT_FROM, "D", 4000),
        (Op.CORRECT_TO, "D", 5000),
        (Op.APPEND, "E", 6000),
    ]
    # -R and -C carry the old event time; +C / +A have none (filled later by the writer).
    et = out.column("event_time").to_pylist()
    assert et[0] is not None and et[1] is not None and et[3] is not None
    assert et[2] is None and et[4] is None and et[5] is None


def test_snapshot_event_time_counts_only_when_new_value_present() -> None:
    state = pa.table({"k": [1, 2], "v": [1, 1], "event_time": pa.array([E1, E1], TS)})
    new = pa.table({"k": [1, 2], "v": [1, 1], "event_time": pa.array([None, E2], TS)})
    out = sort_snapshot(merge_snapshot(new, state, ["k"]), ["k"])
    assert [(r["op"], r["k"]) for r in out.to_pylist()] == [(2, 2), (3, 2)]


def test_snapshot_compare_columns() -> None:
    state = pa.table({"k": [1, 2], "v": [1, 1], "note": ["x", "x"]})
    new = pa.table({"k": [1, 2], "v": [1, 2], "note": ["changed", "x"]})
    out = sort_snapshot(merge_snapshot(new, state, ["k"], ["v"]), ["k"])
    assert [(r["op"], r["k"]) for r in out.to_pylist()] == [(2, 2), (3, 2)]
    with pytest.raises(MergeError):
        merge_snapshot(new, state, ["k"], ["nope"])


def test_snapshot_composite_key() -> None:
    state = pa.table({"a": ["x", "x"], "b": [1, 2], "v": [1, 1]})
    new = pa.table({"a": ["x", "x", "y"], "b": [1, 3, 1], "v": [9, 1, 1]})
    out = sort_snapshot(merge_snapshot(new, state, ["a", "b"]), ["a", "b"])
    assert [(r["op"], r["a"], r["b"], r["v"]) for r in out.to_pylist()] == [
        (2, "x", 1, 1),
        (3, "x", 1, 9),
        (1, "x", 2, 1),
        (0, "x", 3, 1),
        (0, "y", 1, 1),
    ]


def test_snapshot_null_key_reproduces_kamus_quirk() -> None:
    """kamu decides the side of a row by ``old.pk IS NULL`` / ``new.pk IS NULL`` on the first key
    column, so a new row with a null key becomes +A with the (all-null) *old* values; sorted
    with nulls first."""
    state = pa.table({"k": pa.array([1], pa.int64()), "v": ["a"]})
    new = pa.table({"k": pa.array([1, None], pa.int64()), "v": ["a", "b"]})
    out = sort_snapshot(merge_snapshot(new, state, ["k"]), ["k"])
    assert out.to_pylist() == [{"op": 0, "k": None, "v": None}]


def test_snapshot_empty_new_snapshot_retracts_everything() -> None:
    state = pa.table({"k": [1, 2], "v": ["a", "b"]})
    out = sort_snapshot(merge_snapshot(state.slice(0, 0), state, ["k"]), ["k"])
    assert [(r["op"], r["k"], r["v"]) for r in out.to_pylist()] == [(1, 1, "a"), (1, 2, "b")]


def test_snapshot_no_change_is_empty() -> None:
    state = pa.table({"k": [1, 2], "v": [0.5, math.nan]})
    assert merge_snapshot(state, state, ["k"]).num_rows == 0


def test_distinct_from_semantics() -> None:
    a = pa.array([1.0, None, None, 0.0, math.nan, 2.0])
    b = pa.array([1.0, None, 3.0, -0.0, math.nan, 2.5])
    # floats by bit pattern, like arrow-rs's total order
    assert distinct_from(a, b).to_pylist() == [False, False, True, True, False, True]
    s = distinct_from(pa.array(["a", None]), pa.array(["a", "b"]))
    assert s.to_pylist() == [False, True]


# -- External sort ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.integers(min_value=-5, max_value=40), max_size=600),
    chunk=st.integers(min_value=1, max_value=97),
    run_bytes=st.integers(min_value=64, max_value=5000),
)
def test_external_sort_is_a_stable_sort(keys: list[int], chunk: int, run_bytes: int) -> None:
    table = pa.table(
        {"k": pa.array(keys, pa.int64()), "i": pa.array(np.arange(len(keys)), pa.int64())}
    )
    with tempfile.TemporaryDirectory() as d:
        runs = spill_runs(table.to_batches(max_chunksize=chunk), "k", Path(d), run_bytes=run_bytes)
        out = pa.Table.from_batches(list(merge_runs(runs, "k", table.schema)), table.schema)
    expected = table.take(pa.array(np.argsort(np.array(keys, dtype=np.int64), kind="stable")))
    assert out.equals(expected)
