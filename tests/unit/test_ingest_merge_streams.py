"""ChangelogStream and UpsertStream merges (spec v0.37), checked against kamu-cli's own cases.

Every case of kamu-cli HEAD ``src/infra/ingest-datafusion/tests/tests/
test_merge_strategy_changelog_stream.rs`` and ``test_merge_strategy_upsert_stream.rs`` is
replayed with its inputs and expected rows: the vocabulary makes ``year`` the event-time
column, the primary key is ``(year, city)``, and the merged rows are sorted by the strategy's
sort order (key, then op) and compared with the expected rows, op codes, order and schema
(nullability included, as kamu's ``assert_dfs_equivalent(.., ignore_nullability: false, ..)``).
The worked example in the doc comment of kamu's ``upsert_stream.rs`` is a case too.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.errors import MergeError
from coordinator.ingest.merge import (
    Op,
    fold_latest,
    key_filter,
    merge_changelog_stream,
    merge_upsert_stream,
    project_upsert_state,
    sort_snapshot,
)

A, R, CF, CT = Op.APPEND, Op.RETRACT, Op.CORRECT_FROM, Op.CORRECT_TO
PK = ["year", "city"]
Row = tuple[Op, int, str, int]


def _schema(year_nullable: bool, offset: bool) -> pa.Schema:
    fields = [
        pa.field("op", pa.int32(), False),
        pa.field("year", pa.int32(), year_nullable),
        pa.field("city", pa.string(), False),
        pa.field("population", pa.int64(), False),
    ]
    if offset:
        fields.insert(0, pa.field("offset", pa.int64(), False))
    return pa.schema(fields)


def table(rows: list[Row], *, year_nullable: bool, offset: bool = False) -> pa.Table:
    """kamu's ``make_input`` (``offset=False``) / ``make_output`` (``offset=True``)."""
    cols: dict[str, list[int | str]] = {"op": [], "year": [], "city": [], "population": []}
    for o, y, c, p in rows:
        cols["op"].append(int(o))
        cols["year"].append(y)
        cols["city"].append(c)
        cols["population"].append(p)
    data = dict(cols)
    if offset:
        data = {"offset": list(range(len(rows))), **cols}
    return pa.table(data, schema=_schema(year_nullable, offset))


def rows_of(t: pa.Table) -> list[Row]:
    return [
        (Op(o), y, c, p)
        for o, y, c, p in zip(
            t.column("op").to_pylist(),
            t.column("year").to_pylist(),
            t.column("city").to_pylist(),
            t.column("population").to_pylist(),
            strict=True,
        )
    ]


# -- ChangelogStream: test_merge_strategy_changelog_stream.rs ---------------------------------


def changelog_case(ledger: list[Row], new: list[Row], expected: list[Row]) -> None:
    # The strategy ignores the previous data; kamu's cases pass it anyway (``ledger``).
    del ledger
    out = sort_snapshot(merge_changelog_stream(table(new, year_nullable=False), PK), PK)
    assert out.schema == _schema(year_nullable=False, offset=False)
    assert rows_of(out) == expected


def test_changelog_merge_to_empty() -> None:
    changelog_case(
        [],
        [
            (A, 2020, "vancouver", 1),
            (A, 2020, "seattle", 2),
            (A, 2020, "kyiv", 3),
            (CF, 2020, "vancouver", 1),
            (CT, 2020, "vancouver", 2),
        ],
        [
            (A, 2020, "kyiv", 3),
            (A, 2020, "seattle", 2),
            (A, 2020, "vancouver", 1),
            (CF, 2020, "vancouver", 1),
            (CT, 2020, "vancouver", 2),
        ],
    )


def test_changelog_merge_unseen() -> None:
    changelog_case(
        [(A, 2020, "vancouver", 1), (A, 2020, "seattle", 2), (A, 2020, "kyiv", 3)],
        [(A, 2020, "odessa", 4), (CF, 2020, "vancouver", 1), (CT, 2020, "vancouver", 2)],
        [(A, 2020, "odessa", 4), (CF, 2020, "vancouver", 1), (CT, 2020, "vancouver", 2)],
    )


def test_changelog_op_column_is_moved_to_the_front_and_cast() -> None:
    t = pa.table(
        {
            "city": ["b", "a"],
            "op": pa.array([3, 2], pa.int8()),
            "v": [2, 1],
        }
    )
    out = merge_changelog_stream(t, ["city"])
    assert out.column_names == ["op", "city", "v"]
    assert out.schema.field("op").type == pa.int32()
    assert sort_snapshot(out, ["city"]).column("op").to_pylist() == [2, 3]


def test_changelog_equal_key_and_op_keep_input_order() -> None:
    # kamu leaves ties to DataFusion's sort; here they keep their input order (a stable sort).
    t = pa.table({"op": pa.array([0, 0, 0], pa.int32()), "k": [1, 1, 0], "v": [10, 20, 30]})
    assert sort_snapshot(merge_changelog_stream(t, ["k"]), ["k"]).column("v").to_pylist() == [
        30,
        10,
        20,
    ]


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (pa.array([0, None], pa.int32()), "is null in row 2"),
        (pa.array([0, 4], pa.int32()), "has 4 in row 2"),
        (pa.array([-1, 0], pa.int32()), "has -1 in row 1"),
        (pa.array(["+A", "-R"]), "must be an integer column"),
    ],
)
def test_stream_op_codes_are_checked(op: pa.Array, message: str) -> None:
    t = pa.table({"op": op, "k": [1, 2]})
    with pytest.raises(MergeError, match=message):
        merge_changelog_stream(t, ["k"])
    with pytest.raises(MergeError, match=message):
        merge_upsert_stream(t, None, ["k"])


def test_changelog_needs_key_and_op_columns() -> None:
    with pytest.raises(MergeError, match="primary key column"):
        merge_changelog_stream(pa.table({"op": pa.array([0], pa.int32()), "a": [1]}), ["k"])
    with pytest.raises(MergeError, match="must carry the op column 'op'"):
        merge_changelog_stream(pa.table({"k": [1]}), ["k"])


# -- UpsertStream: test_merge_strategy_upsert_stream.rs ---------------------------------------


def upsert_case(ledger: list[Row], new: list[Row], expected: list[Row]) -> None:
    prev = None
    if ledger:
        prev = project_upsert_state(table(ledger, year_nullable=True, offset=True), PK)
    diff = merge_upsert_stream(table(new, year_nullable=True), prev, PK, event_time_column="year")
    out = sort_snapshot(diff, PK)
    assert out.schema == _schema(year_nullable=True, offset=False)
    assert rows_of(out) == expected


SEEN: list[Row] = [(A, 2020, "vancouver", 1), (A, 2020, "seattle", 2), (A, 2020, "kyiv", 3)]


def test_upsert_merge_to_empty_as_is() -> None:
    upsert_case(
        [],
        [(A, 2020, "vancouver", 1), (A, 2020, "seattle", 2), (A, 2020, "kyiv", 3)],
        [(A, 2020, "kyiv", 3), (A, 2020, "seattle", 2), (A, 2020, "vancouver", 1)],
    )


def test_upsert_merge_to_empty_inter_batch_upserts() -> None:
    upsert_case(
        [],
        [
            (A, 2020, "vancouver", 1),
            (A, 2020, "vancouver", 2),
            (CT, 2020, "vancouver", 3),
            (A, 2020, "seattle", 2),
            (A, 2020, "kyiv", 3),
            (R, 2020, "seattle", 2),
        ],
        [(A, 2020, "kyiv", 3), (A, 2020, "vancouver", 3)],
    )


def test_upsert_merge_unseen() -> None:
    upsert_case(SEEN, [(A, 2020, "odessa", 4)], [(A, 2020, "odessa", 4)])


def test_upsert_merge_noop_upsert_ordered() -> None:
    upsert_case(SEEN, [(A, 2020, "seattle", 2), (A, 2020, "kyiv", 3)], [])


def test_upsert_merge_noop_upsert_unordered() -> None:
    upsert_case(SEEN, [(A, 2020, "kyiv", 3), (A, 2020, "seattle", 2)], [])


def test_upsert_merge_update_in_separate_batch() -> None:
    upsert_case(
        SEEN,
        [(A, 2020, "vancouver", 2), (CT, 2020, "kyiv", 4)],
        [
            (CF, 2020, "kyiv", 3),
            (CT, 2020, "kyiv", 4),
            (CF, 2020, "vancouver", 1),
            (CT, 2020, "vancouver", 2),
        ],
    )


def test_upsert_merge_update_in_same_batch() -> None:
    upsert_case(
        SEEN,
        [(A, 2020, "vancouver", 2), (A, 2020, "vancouver", 3)],
        [(CF, 2020, "vancouver", 1), (CT, 2020, "vancouver", 3)],
    )


def test_upsert_merge_delete_in_separate_batch() -> None:
    upsert_case(SEEN, [(R, 2020, "seattle", 0)], [(R, 2020, "seattle", 2)])


def test_upsert_merge_delete_in_same_batch() -> None:
    upsert_case(
        SEEN, [(CT, 2020, "seattle", 3), (R, 2020, "seattle", 0)], [(R, 2020, "seattle", 2)]
    )


def test_upsert_doc_example_of_kamu_upsert_stream_rs() -> None:
    """The worked SQL example in the doc comment of ``upsert_to_changelog_stream``."""
    old = pa.table(
        {
            "offset": list(range(7)),
            "op": pa.array([A, A, A, A, R, CF, CT], pa.int32()),
            "year": pa.array([2020] * 7, pa.int32()),
            "city": ["vancouver", "seattle", "kyiv", "bakhmut", "bakhmut", "kyiv", "kyiv"],
            "population": [1, 2, 3, 4, 4, 3, 4],
        }
    )
    new = pa.table(
        {
            "op": pa.array([A, A, A, A, R], pa.int32()),
            "year": pa.array([2020, 2020, 2021, 2021, 2020], pa.int32()),
            "city": ["odessa", "kyiv", "vancouver", "bakhmut", "seattle"],
            "population": [5, 4, 2, 1, 2],
        }
    )
    state = project_upsert_state(old, ["city"])
    out = sort_snapshot(merge_upsert_stream(new, state, ["city"]), ["city"])
    assert rows_of(out) == [
        (A, 2021, "bakhmut", 1),
        (A, 2020, "odessa", 5),
        (R, 2020, "seattle", 2),
        (CF, 2020, "vancouver", 1),
        (CT, 2021, "vancouver", 2),
    ]


# -- UpsertStream: details of kamu's query -----------------------------------------------------


def test_upsert_without_op_column_is_all_upserts() -> None:
    prev = pa.table({"k": [1, 2], "v": ["a", "b"]})
    new = pa.table({"k": [2, 3], "v": ["B", "c"]})
    out = sort_snapshot(merge_upsert_stream(new, prev, ["k"]), ["k"])
    assert out.to_pylist() == [
        {"op": CF, "k": 2, "v": "b"},
        {"op": CT, "k": 2, "v": "B"},
        {"op": A, "k": 3, "v": "c"},
    ]


def test_upsert_retract_of_unknown_key_is_dropped() -> None:
    new = pa.table({"op": pa.array([R], pa.int32()), "k": [9], "v": ["x"]})
    assert merge_upsert_stream(new, pa.table({"k": [1], "v": ["a"]}), ["k"]).num_rows == 0
    assert merge_upsert_stream(new, None, ["k"]).num_rows == 0


def test_upsert_event_time_counts_only_when_new_value_present() -> None:
    ts = pa.timestamp("ms", tz="UTC")
    prev = pa.table({"k": [1, 2], "event_time": pa.array([1000, 1000], ts), "v": [1, 1]})
    new = pa.table({"k": [1, 2], "event_time": pa.array([None, 2000], ts), "v": [1, 1]})
    out = sort_snapshot(merge_upsert_stream(new, prev, ["k"]), ["k"])
    # key 1: a null new event time alone is no change; key 2: a new event time is.
    assert out.column("k").to_pylist() == [2, 2]
    assert out.column("op").to_pylist() == [CF, CT]


def test_upsert_null_keys_never_match_and_collapse_to_the_last_row() -> None:
    prev = pa.table({"k": pa.array([None, 1], pa.int64()), "v": ["old", "a"]})
    new = pa.table({"k": pa.array([None, None], pa.int64()), "v": ["n1", "n2"]})
    out = merge_upsert_stream(new, prev, ["k"])
    # kamu partitions the input by key (nulls are one partition) and left-joins on the key
    # (a null never matches): one +A with the last null-key row.
    assert out.to_pylist() == [{"op": A, "k": None, "v": "n2"}]


def test_upsert_retract_takes_the_previous_values() -> None:
    prev = pa.table({"k": [1], "v": ["a"], "w": [7]})
    new = pa.table({"op": pa.array([R], pa.int32()), "k": [1], "v": ["ignored"], "w": [0]})
    assert merge_upsert_stream(new, prev, ["k"]).to_pylist() == [
        {"op": R, "k": 1, "v": "a", "w": 7}
    ]


def test_upsert_key_only_columns_only_retract() -> None:
    # With no column besides the key and op, kamu's change filter is ``false`` (an empty OR):
    # even an upsert of a new key yields nothing, only retractions of known keys remain. (In
    # an ingest the event-time column is always there, unless it is part of the key.)
    prev = pa.table({"k": [1, 2]})
    new = pa.table({"op": pa.array([A, A, R], pa.int32()), "k": [1, 3, 2]})
    out = sort_snapshot(merge_upsert_stream(new, prev, ["k"]), ["k"])
    assert out.to_pylist() == [{"op": R, "k": 2}]


def test_upsert_state_keeps_a_trailing_correct_from_but_not_a_retract() -> None:
    ledger = pa.table(
        {
            "offset": [0, 1, 2, 3],
            "op": pa.array([A, A, CF, R], pa.int32()),
            "k": [1, 2, 1, 2],
            "v": ["a", "b", "a", "b"],
        }
    )
    assert project_upsert_state(ledger, ["k"]).to_pylist() == [{"k": 1, "v": "a"}]


def test_upsert_schema_evolution_is_refused() -> None:
    with pytest.raises(MergeError, match="not in the previous data"):
        merge_upsert_stream(pa.table({"k": [1], "z": [1]}), pa.table({"k": [1], "v": [1]}), ["k"])


@pytest.mark.parametrize("composite", [False, True])
def test_fold_latest_for_keys_equals_the_full_fold_restricted(composite: bool) -> None:
    pk = ["d", "k"] if composite else ["k"]
    slices = [
        pa.table({"d": ["x", "x", "y"], "k": [1, 2, None], "v": [1, 2, 3]}),
        pa.table({"d": ["x", "y", "x"], "k": [2, 1, 3], "v": [4, 5, 6]}),
    ]
    keys = pa.table({"d": ["x", "x", None], "k": [2, 3, 1]}).select(pk)
    full = fold_latest(slices, pk)
    some = fold_latest(slices, pk, keys)
    assert full is not None and some is not None
    assert key_filter(full, keys, pk).sort_by("v").to_pylist() == some.sort_by("v").to_pylist()
    assert len(some) == (2 if composite else 3)


# -- UpsertStream: applying its changelog gives the upserted state -----------------------------


def apply(state: dict[int, int], changelog: pa.Table) -> dict[int, int]:
    out = dict(state)
    for row in changelog.to_pylist():
        if row["op"] in (R, CF):
            assert out.pop(row["k"]) == row["v"]
        else:
            assert row["k"] not in out
            out[row["k"]] = row["v"]
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.integers(0, 6), st.integers(0, 3), max_size=6),
    st.lists(st.tuples(st.booleans(), st.integers(0, 6), st.integers(0, 3)), max_size=12),
)
def test_upsert_changelog_applied_to_the_state_gives_the_upserted_state(
    state: dict[int, int], upserts: list[tuple[bool, int, int]]
) -> None:
    i64 = pa.int64()
    prev = pa.table({"k": pa.array(list(state), i64), "v": pa.array(list(state.values()), i64)})
    new = pa.table(
        {
            "op": pa.array([R if d else A for d, _, _ in upserts], pa.int32()),
            "k": pa.array([k for _, k, _ in upserts], i64),
            "v": pa.array([v for _, _, v in upserts], i64),
        }
    )
    expected = dict(state)
    for delete, k, v in upserts:
        if delete:
            expected.pop(k, None)
        else:
            expected[k] = v
    out = sort_snapshot(merge_upsert_stream(new, prev, ["k"]), ["k"])
    assert apply(state, out) == expected
    # Each key changes at most once, and every -C comes right before its +C.
    ops = out.column("op").to_pylist()
    for i, o in enumerate(ops):
        if o == CF:
            assert ops[i + 1] == CT
