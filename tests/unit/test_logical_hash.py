"""Unit and property tests for coordinator.data.hashing (kamu's arrow-digest V0 logical hash).

Sections:

* the relational assertions of arrow-digest's own test-suite (kamu-data/arrow-digest @
  f217a1d7852cc565fd6b93b84bac5affbb663a65, ``src/array_digest.rs`` and
  ``src/record_digest.rs``), each citing its source test;
* type bytes and refused types;
* a slow, literal per-value port of arrow-digest (``naive_record_digest``) used as an oracle
  for property tests of the vectorised implementation, including the struct-null OR bug;
* batch-split invariance, chunking and threading;
* the Parquet path (arrow-rs type mapping, 10,000-row batches, stale-slot refusal);
* the physical hash.
"""

from __future__ import annotations

import decimal
import hashlib
import itertools
import os
import re
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.data import (
    LogicalHasher,
    UnreproducibleLogicalHash,
    array_digest,
    kamu_parquet_schema,
    logical_hash,
    physical_hash,
    type_bytes,
)
from coordinator.data import hashing as hashing_module
from coordinator.errors import DataError, UnsupportedArrowType
from coordinator.multiformats import Multihash

ARROW_DIGEST = "kamu-data/arrow-digest@f217a1d"


def record_digest(batch: pa.RecordBatch) -> str:
    """``RecordDigestV0::<Sha3_256>::digest(batch)`` as multibase text."""
    return logical_hash(batch)


def batch_of(schema: pa.Schema, arrays: Sequence[pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(arrays), schema=schema)


# --------------------------------------------------------------------------------------------
# arrow-digest's own tests (29 assertions: the 24 relations + 5 self-consistency checks that
# docs/logical-hash.md, "arrow-digest's own tests" counts)
# --------------------------------------------------------------------------------------------


def test_ints() -> None:
    """arrow-digest src/array_digest.rs::test_ints (2 assertions)."""
    assert array_digest(pa.array([1, 2, 3], pa.int32())) == array_digest(
        pa.array([1, 2, 3], pa.int32())
    )
    assert array_digest(pa.array([1, 2, 3], pa.int32())) != array_digest(
        pa.array([1, 2, None, 3], pa.int32())
    )


def test_int_array() -> None:
    """arrow-digest src/array_digest.rs::test_int_array (2 assertions)."""
    assert array_digest(pa.array([1, 2, 3], pa.int32())) == array_digest(
        pa.array([1, 2, 3], pa.int32())
    )
    assert array_digest(pa.array([1, 2, 3], pa.int32())) != array_digest(
        pa.array([1, 2, 3], pa.uint32())
    )


def _bool_array(data: int, length: int, nulls: int | None = None) -> pa.Array:
    """``make_bool_array`` of the Rust test: raw data byte, length, optional validity byte."""
    validity = None if nulls is None else pa.py_buffer(bytes([nulls]))
    return pa.Array.from_buffers(pa.bool_(), length, [validity, pa.py_buffer(bytes([data]))])


def test_bool_array() -> None:
    """arrow-digest src/array_digest.rs::test_bool_array (5 assertions)."""
    array1 = _bool_array(0b0011_0101, 6)
    array2 = _bool_array(0b1111_0101, 6)  # differs only in the padding bits
    assert array_digest(array1) == array_digest(pa.array([True, False, True, False, True, True]))
    assert array_digest(array1) != array_digest(pa.array([True, False, True, False, True, False]))
    assert array_digest(array1) != array_digest(pa.array([False, False, True, False, True, True]))
    assert array_digest(array1) == array_digest(array2)
    array3 = _bool_array(0b1111_0101, 6, nulls=0b1110_1110)
    assert array_digest(array3) == array_digest(
        pa.array([None, False, True, False, None, True], pa.bool_())
    )


def test_string_array() -> None:
    """arrow-digest src/array_digest.rs::test_string_array (5 assertions)."""
    foo_bar_baz = ["foo", "bar", "baz"]
    assert array_digest(pa.array(foo_bar_baz)) == array_digest(pa.array(foo_bar_baz))
    assert array_digest(pa.array(foo_bar_baz)) == array_digest(
        pa.array(foo_bar_baz, pa.large_string())
    )
    assert array_digest(pa.array(foo_bar_baz)) != array_digest(pa.array(["foo", "bar", "", "baz"]))
    assert array_digest(pa.array(foo_bar_baz)) != array_digest(
        pa.array(["foo", "bar", None, "baz"])
    )
    assert array_digest(pa.array(foo_bar_baz, pa.string_view())) == array_digest(
        pa.array(foo_bar_baz)
    )


def _list(rows: list[list[int | None] | None]) -> pa.Array:
    return pa.array(rows, pa.list_(pa.int32()))


def test_list_array() -> None:
    """arrow-digest src/array_digest.rs::test_list_array (3 assertions)."""
    base: list[list[int | None] | None] = [[0, 1, 2], None, [3, None, 4, 5], [6, 7]]
    assert array_digest(_list(base)) == array_digest(_list(base))
    # Different primitive value
    assert array_digest(_list(base)) != array_digest(
        _list([[0, 1, 2], None, [3, None, 4, 100], [6, 7]])
    )
    # Value slides to the next list
    assert array_digest(_list(base)) != array_digest(
        _list([[0, 1, 2], None, [3, None, 4], [5, 6, 7]])
    )


def test_binary_array() -> None:
    """arrow-digest src/array_digest.rs::test_binary_array (6 assertions)."""
    values = [b"one", b"two", b"", b"three"]
    assert array_digest(pa.array(values, pa.binary())) == array_digest(
        pa.array(values, pa.binary())
    )
    assert array_digest(pa.array(values, pa.binary())) != array_digest(
        pa.array([b"one", b"two", b"three"], pa.binary())
    )
    # from_vec vs from_opt_vec with every value present: no validity bitmap vs all-valid.
    opt = pa.array(values, pa.binary(), mask=np.zeros(4, dtype=bool))
    assert array_digest(pa.array(values, pa.binary())) == array_digest(opt)
    assert array_digest(pa.array(values, pa.binary())) != array_digest(
        pa.array([b"one", b"two", None, b"three"], pa.binary())
    )
    fixed = pa.Array.from_buffers(pa.binary(3), 2, [None, pa.py_buffer(b"onetwo")])
    assert array_digest(pa.array([b"one", b"two"], pa.binary())) == array_digest(fixed)
    assert array_digest(pa.array(values, pa.binary_view())) == array_digest(
        pa.array(values, pa.binary())
    )


def test_batch_mixed() -> None:
    """arrow-digest src/record_digest.rs::test_batch_mixed (2 assertions)."""
    schema = pa.schema([pa.field("a", pa.int32(), False), pa.field("b", pa.string(), False)])
    a = pa.array([1, 2, 3, 4, 5], pa.int32())
    b = pa.array(["a", "b", "c", "d", "e"])
    c = pa.array([1, 2, 3, 4, 5, 6], pa.int32())
    d = pa.array(["a", "b", "c", "d", "e", "d"])
    batch1 = batch_of(schema, [a, b])
    batch2 = batch_of(schema, [a, b])
    batch3 = batch_of(schema, [c, d])
    assert record_digest(batch1) == record_digest(batch2)
    assert record_digest(batch2) != record_digest(batch3)


def _struct_cd(validity: int | None) -> pa.Array:
    c = pa.array(["a", "b", "c"])
    d = pa.array([3, 2, 1], pa.int32())
    dtype = pa.struct([pa.field("c", pa.string(), False), pa.field("d", pa.int32(), False)])
    bitmap = None if validity is None else pa.py_buffer(bytes([validity]))
    return pa.Array.from_buffers(dtype, 3, [bitmap], children=[c, d])


def test_batch_nested() -> None:
    """arrow-digest src/record_digest.rs::test_batch_nested (4 assertions)."""
    a = pa.array([1, 2, 3], pa.int32())

    def schema(name: str, nullable: bool) -> pa.Schema:
        inner = pa.struct([pa.field("c", pa.string(), False), pa.field("d", pa.int32(), False)])
        return pa.schema([pa.field("a", pa.int32(), False), pa.field(name, inner, nullable)])

    batch1 = batch_of(schema("b", False), [a, _struct_cd(None)])
    assert record_digest(batch1) == record_digest(batch1)
    # Different column name
    batch2 = batch_of(schema("bee", False), [a, _struct_cd(None)])
    assert record_digest(batch1) != record_digest(batch2)
    # Nullability - equal: an all-valid struct bitmap is the same as none
    batch3 = batch_of(schema("b", True), [a, _struct_cd(0b111)])
    assert record_digest(batch1) == record_digest(batch3)
    # Nullability - not equal
    batch4 = batch_of(schema("b", True), [a, _struct_cd(0b101)])
    assert record_digest(batch1) != record_digest(batch4)


# --------------------------------------------------------------------------------------------
# Type bytes and refused types
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (pa.int64(), "0100" + "01" + "4000000000000000"),
        (pa.uint64(), "0100" + "00" + "4000000000000000"),
        (pa.int8(), "0100" + "01" + "0800000000000000"),
        (pa.float16(), "0200" + "1000000000000000"),
        (pa.float64(), "0200" + "4000000000000000"),
        (pa.binary(), "0300"),
        (pa.binary(7), "0300"),
        (pa.large_binary(), "0300"),
        (pa.string(), "0400"),
        (pa.string_view(), "0400"),
        (pa.bool_(), "0500"),
        (pa.decimal128(5, 2), "0600" + "8000000000000000" + "0500000000000000" + "0200" + "0" * 12),
        (pa.decimal256(40, 3), "0600" + "0001000000000000" + "2800000000000000" + "03" + "0" * 14),
        (pa.date32(), "0700" + "2000000000000000" + "0000"),
        (pa.date64(), "0700" + "4000000000000000" + "0100"),
        (pa.time32("ms"), "0800" + "2000000000000000" + "0100"),
        (pa.time64("ns"), "0800" + "4000000000000000" + "0300"),
        (pa.timestamp("ms", "UTC"), "0900" + "0100" + "0300000000000000" + "555443"),
        (pa.timestamp("us"), "0900" + "0200" + "00"),
        (pa.list_(pa.int32()), "0b00" + "0100" + "01" + "2000000000000000"),
        (pa.large_list(pa.string()), "0b00" + "0400"),
        (pa.list_(pa.list_(pa.bool_()), 3), "0b00" + "0b00" + "0500"),
        (pa.null(), "0000"),
    ],
)
def test_type_bytes(dtype: pa.DataType, expected: str) -> None:
    assert type_bytes(dtype).hex() == expected


UNSUPPORTED: list[tuple[str, pa.Array]] = [
    ("dictionary", pa.array(["a", "b", "a"]).dictionary_encode()),
    ("map", pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32()))),
    ("list_of_struct", pa.array([[{"x": 1}]], pa.list_(pa.struct([("x", pa.int64())])))),
    ("duration", pa.array([1], pa.duration("ms"))),
    ("interval", pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval())),
    (
        "dense_union",
        pa.UnionArray.from_dense(
            pa.array([0], pa.int8()), pa.array([0], pa.int32()), [pa.array([1])]
        ),
    ),
    ("sparse_union", pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1])])),
    ("run_end_encoded", pa.RunEndEncodedArray.from_arrays([2], [7])),
    ("list_view", pa.array([[1]], pa.list_view(pa.int32()))),
    ("large_list_view", pa.array([[1]], pa.large_list_view(pa.int32()))),
]


@pytest.mark.parametrize(("name", "array"), [pytest.param(n, a, id=n) for n, a in UNSUPPORTED])
def test_unsupported_types_raise_naming_the_column(name: str, array: pa.Array) -> None:
    table = pa.table({"ok": pa.array([1] * len(array)), name: array})
    pattern = rf"column {re.escape(repr(name))}.*{re.escape(str(array.type))}"
    with pytest.raises(UnsupportedArrowType, match=pattern):
        logical_hash(table)
    with pytest.raises(UnsupportedArrowType):
        LogicalHasher(table.schema)


def test_unsupported_type_nested_in_struct_names_the_path() -> None:
    inner = pa.StructArray.from_arrays([pa.array([1], pa.duration("s"))], names=["late"])
    with pytest.raises(UnsupportedArrowType, match=r"column 's\.late'"):
        logical_hash(pa.table({"s": inner}))


def test_null_column_raises_once_a_batch_arrives() -> None:
    # kamu's ArrayDigestV0::update panics on DataType::Null (even for an empty batch);
    # without any batch only the type bytes (tag 0) are hashed.
    schema = pa.schema([pa.field("n", pa.null())])
    with pytest.raises(UnsupportedArrowType, match="column 'n'"):
        logical_hash(pa.table({"n": pa.nulls(3)}))
    with pytest.raises(UnsupportedArrowType):
        logical_hash([pa.RecordBatch.from_arrays([pa.nulls(0)], schema=schema)])
    assert logical_hash([], schema=schema).startswith("f9680c00120")


def test_list_of_null_raises_only_for_valid_rows() -> None:
    with pytest.raises(UnsupportedArrowType):
        logical_hash(pa.table({"l": pa.array([[None]], pa.list_(pa.null()))}))
    logical_hash(pa.table({"l": pa.array([None, None], pa.list_(pa.null()))}))


def test_struct_arrays_are_not_array_digestible() -> None:
    with pytest.raises(UnsupportedArrowType):
        array_digest(pa.array([{"x": 1}]))


def test_extension_types_hash_as_their_storage() -> None:
    uuid = pa.array([b"0123456789abcdef"], pa.binary(16))
    ext = pa.ExtensionArray.from_storage(pa.uuid(), uuid)
    assert logical_hash(pa.table({"u": ext})) == logical_hash(pa.table({"u": uuid}))


# --------------------------------------------------------------------------------------------
# A literal per-value port of arrow-digest V0, used as an oracle
# --------------------------------------------------------------------------------------------


def _bits(buf: pa.Buffer, offset: int, length: int) -> list[bool]:
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
    return [bool(b) for b in bits[offset : offset + length]]


def _own_validity(arr: pa.Array) -> list[bool] | None:
    """The array's validity, or None when it has no null (arrow-rs drops such bitmaps)."""
    if arr.null_count == 0:
        return None
    return _bits(arr.buffers()[0], arr.offset, len(arr))


def _maybe_combine(parent: list[bool] | None, own: list[bool] | None) -> list[bool] | None:
    """arrow-digest utils.rs::maybe_combine_null_buffers, OR of validity (crate >= 35)."""
    parent_nulls = parent is not None and not all(parent)
    own_nulls = own is not None and not all(own)
    if parent is None and own_nulls:
        return own
    if own is None and parent_nulls:
        return parent
    if parent is not None and own is not None and parent_nulls and own_nulls:
        return [p or o for p, o in zip(parent, own, strict=True)]
    return None


def _naive_stream(arr: pa.Array, validity: list[bool] | None, out: bytearray) -> None:
    """ArrayDigestV0::update: append the value stream of ``arr`` to ``out``, value by value."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    dt = arr.type
    t = pa.types
    n = len(arr)

    def valid(i: int) -> bool:
        return validity is None or validity[i]

    if t.is_boolean(dt):
        bits = _bits(arr.buffers()[1], arr.offset, n)
        for i in range(n):
            out += bytes([bits[i] + 1]) if valid(i) else b"\x00"
    elif t.is_fixed_size_binary(dt):
        width = dt.byte_width
        data = arr.buffers()[1].to_pybytes()
        for i in range(n):
            start = (arr.offset + i) * width
            out += struct.pack("<Q", width) + data[start : start + width] if valid(i) else b"\x00"
    elif t.is_binary_view(dt) or t.is_string_view(dt):
        for i in range(n):
            value = arr[i].as_py() if arr[i].is_valid else b""
            raw = value.encode() if isinstance(value, str) else value
            out += struct.pack("<Q", len(raw)) + raw if valid(i) else b"\x00"
    elif t.is_binary(dt) or t.is_string(dt) or t.is_large_binary(dt) or t.is_large_string(dt):
        large = t.is_large_binary(dt) or t.is_large_string(dt)
        offsets = np.frombuffer(
            arr.buffers()[1],
            np.int64 if large else np.int32,
            count=n + 1,
            offset=arr.offset * (8 if large else 4),
        )
        data = arr.buffers()[2].to_pybytes() if arr.buffers()[2] is not None else b""
        for i in range(n):
            raw = data[offsets[i] : offsets[i + 1]]
            out += struct.pack("<Q", len(raw)) + raw if valid(i) else b"\x00"
    elif t.is_list(dt) or t.is_large_list(dt) or t.is_fixed_size_list(dt):
        if t.is_fixed_size_list(dt):
            bounds = [(arr.offset + i) * dt.list_size for i in range(n + 1)]
        else:
            large = t.is_large_list(dt)
            bounds = list(
                np.frombuffer(
                    arr.buffers()[1],
                    np.int64 if large else np.int32,
                    count=n + 1,
                    offset=arr.offset * (8 if large else 4),
                )
            )
        for i in range(n):
            if valid(i):
                sub = arr.values.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))
                out += struct.pack("<Q", len(sub))
                _naive_stream(sub, _maybe_combine(None, _own_validity(sub)), out)
            else:
                out += b"\x00"
    else:
        width = dt.bit_width // 8
        data = arr.buffers()[1].to_pybytes()
        for i in range(n):
            start = (arr.offset + i) * width
            out += data[start : start + width] if valid(i) else b"\x00"


def naive_record_digest(schema: pa.Schema, batches: Sequence[pa.RecordBatch]) -> str:
    """RecordDigestV0<Sha3_256>: names/levels, per-leaf streams, then the leaf digests."""
    record = hashlib.sha3_256()
    columns: list[Any] = []

    def walk_fields(fields: Sequence[pa.Field], level: int) -> None:
        for field in fields:
            name = field.name.encode()
            record.update(struct.pack("<Q", len(name)) + name + struct.pack("<Q", level))
            if pa.types.is_struct(field.type):
                walk_fields(list(field.type), level + 1)
            else:
                columns.append(hashlib.sha3_256(type_bytes(field.type)))

    walk_fields(list(schema), 0)
    for batch in batches:
        index = 0

        def walk_columns(arrays: Sequence[pa.Array], parent: list[bool] | None) -> None:
            nonlocal index
            for arr in arrays:
                if pa.types.is_struct(arr.type):
                    combined = _maybe_combine(parent, _own_validity(arr))
                    walk_columns([arr.field(i) for i in range(arr.type.num_fields)], combined)
                else:
                    out = bytearray()
                    _naive_stream(arr, _maybe_combine(parent, _own_validity(arr)), out)
                    columns[index].update(out)
                    index += 1

        walk_columns(batch.columns, None)
    for column in columns:
        record.update(column.digest())
    return "f9680c00120" + record.hexdigest()


# --------------------------------------------------------------------------------------------
# Hypothesis strategies: tables of every supported layout, with and without nulls
# --------------------------------------------------------------------------------------------

_SCALAR_TYPES: list[tuple[pa.DataType, Callable[[np.random.Generator, int], Any]]] = [
    (pa.int8(), lambda rng, n: rng.integers(-128, 128, n).astype(np.int8)),
    (pa.uint16(), lambda rng, n: rng.integers(0, 2**16, n).astype(np.uint16)),
    (pa.int32(), lambda rng, n: rng.integers(-(2**31), 2**31, n).astype(np.int32)),
    (pa.int64(), lambda rng, n: rng.integers(-(2**62), 2**62, n)),
    (pa.float32(), lambda rng, n: rng.standard_normal(n).astype(np.float32)),
    (pa.float64(), lambda rng, n: rng.standard_normal(n)),
    (pa.bool_(), lambda rng, n: rng.random(n) < 0.5),
    (pa.timestamp("ms", "UTC"), lambda rng, n: rng.integers(0, 2**40, n)),
    (pa.date32(), lambda rng, n: rng.integers(0, 30_000, n).astype(np.int32)),
    (pa.string(), lambda rng, n: ["é" * int(k) for k in rng.integers(0, 20, n)]),
    (pa.large_binary(), lambda rng, n: [bytes(int(k)) for k in rng.integers(0, 20, n)]),
    (pa.binary(3), lambda rng, n: [bytes([int(k)] * 3) for k in rng.integers(0, 256, n)]),
    (
        pa.decimal128(12, 3),
        lambda rng, n: [
            decimal.Decimal(int(k)).scaleb(-3) for k in rng.integers(-(10**9), 10**9, n)
        ],
    ),
]


def _mask(rng: np.random.Generator, n: int, null_rate: float) -> np.ndarray | None:
    return (rng.random(n) < null_rate) if null_rate else None


def _column(rng: np.random.Generator, n: int, kind: int, null_rate: float) -> pa.Array:
    if kind < len(_SCALAR_TYPES):
        dtype, make = _SCALAR_TYPES[kind]
        return pa.array(make(rng, n), dtype, mask=_mask(rng, n, null_rate))
    if kind == len(_SCALAR_TYPES):  # list<int32> with null rows and null items
        rows = [
            None
            if rng.random() < null_rate
            else [
                None if rng.random() < 0.2 else int(v)
                for v in rng.integers(0, 9, rng.integers(0, 4))
            ]
            for _ in range(n)
        ]
        return pa.array(rows, pa.list_(pa.int32()))
    if kind == len(_SCALAR_TYPES) + 1:  # large_list<list<string>>
        nested: list[Any] = [
            None
            if rng.random() < null_rate
            else [["x" * int(k) for k in rng.integers(0, 4, rng.integers(0, 3))]]
            for _ in range(n)
        ]
        return pa.array(nested, pa.large_list(pa.list_(pa.string())))
    # fixed_size_list<int16>[2]
    values = pa.array(rng.integers(0, 100, 2 * n).astype(np.int16), mask=_mask(rng, 2 * n, 0.1))
    row_mask = _mask(rng, n, null_rate)
    return pa.FixedSizeListArray.from_arrays(
        values, 2, mask=None if row_mask is None else pa.array(row_mask)
    )


_N_KINDS = len(_SCALAR_TYPES) + 3


def _struct(
    rng: np.random.Generator, n: int, null_rate: float, *, two_level_nulls: bool
) -> pa.Array:
    """struct<x: int64, y: string, z: struct<w: bool>>; nulls on one level unless asked."""
    child_rate = null_rate if two_level_nulls else 0.0
    z = pa.StructArray.from_arrays(
        [pa.array(rng.random(n) < 0.5, pa.bool_(), mask=_mask(rng, n, child_rate))],
        names=["w"],
        mask=pa.array(rng.random(n) < child_rate) if child_rate else None,
    )
    return pa.StructArray.from_arrays(
        [
            pa.array(rng.integers(0, 9, n), pa.int64(), mask=_mask(rng, n, child_rate)),
            pa.array(
                ["q" * int(k) for k in rng.integers(0, 5, n)],
                pa.string(),
                mask=_mask(rng, n, child_rate),
            ),
            z,
        ],
        names=["x", "y", "z"],
        mask=pa.array(rng.random(n) < null_rate) if null_rate else None,
    )


@st.composite
def tables(draw: st.DrawFn, *, two_level_nulls: bool = False, max_rows: int = 40) -> pa.Table:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(0, max_rows))
    null_rate = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    kinds = draw(st.lists(st.integers(0, _N_KINDS - 1), min_size=1, max_size=4))
    columns = {f"c{i}": _column(rng, n, kind, null_rate) for i, kind in enumerate(kinds)}
    if draw(st.booleans()):
        columns["s"] = _struct(rng, n, null_rate, two_level_nulls=two_level_nulls)
    table = pa.table(columns)
    # Slice, so arrays carry non-zero offsets.
    start = draw(st.integers(0, n))
    return table.slice(start, draw(st.integers(0, n - start)))


def _split(table: pa.Table, cuts: list[int]) -> list[pa.RecordBatch]:
    """Zero-copy batches of ``table`` cut at the given row positions."""
    combined = table.combine_chunks()
    whole = combined.to_batches()[0] if combined.num_rows else None
    if whole is None:
        return []
    bounds = sorted({0, table.num_rows, *(c % (table.num_rows + 1) for c in cuts)})
    return [whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(table=tables(), cuts=st.lists(st.integers(0, 1000), max_size=5))
def test_batch_split_invariance(table: pa.Table, cuts: list[int]) -> None:
    """Same rows in one batch or in many batches hash the same (no two-level struct nulls)."""
    one = logical_hash(table)
    assert logical_hash(_split(table, cuts), schema=table.schema) == one
    assert logical_hash(_split(table, list(range(table.num_rows))), schema=table.schema) == one


@PROPERTY_SETTINGS
@given(table=tables(two_level_nulls=True), cuts=st.lists(st.integers(0, 1000), max_size=4))
def test_matches_literal_port_of_arrow_digest(table: pa.Table, cuts: list[int]) -> None:
    """The vectorised streams equal arrow-digest's per-value loops, struct-OR bug included."""
    batches = _split(table, cuts)
    assert logical_hash(batches, schema=table.schema) == naive_record_digest(table.schema, batches)


@PROPERTY_SETTINGS
@given(table=tables(two_level_nulls=True, max_rows=30))
def test_small_pieces_match_literal_port(table: pa.Table) -> None:
    """Force every chunking / piece boundary path with tiny chunk limits."""
    saved = (hashing_module._CHUNK_ROWS, hashing_module._CHUNK_BYTES)
    try:
        hashing_module._CHUNK_ROWS, hashing_module._CHUNK_BYTES = 3, 16  # type: ignore[misc]
        batches = _split(table, [])
        got = logical_hash(batches, schema=table.schema)
    finally:
        hashing_module._CHUNK_ROWS, hashing_module._CHUNK_BYTES = saved  # type: ignore[misc]
    assert got == naive_record_digest(table.schema, batches)


FIXED_WIDTH_TYPES = [
    pa.int8(),
    pa.float16(),
    pa.uint32(),
    pa.time64("us"),
    pa.decimal128(20, 4),
    pa.decimal256(50, 2),
]
NULL_PATTERNS = {
    "all_null": [True] * 9,
    "alternating": [i % 2 == 0 for i in range(9)],
    "long_runs": [False, True, True, True, True, True, False, True, True],
    "edges": [True, False, False, False, False, False, False, False, True],
}


@pytest.mark.parametrize("dtype", FIXED_WIDTH_TYPES, ids=str)
@pytest.mark.parametrize("pattern", list(NULL_PATTERNS), ids=str)
@pytest.mark.parametrize("zeroed", [False, True], ids=["garbage_slots", "zeroed_slots"])
def test_fixed_width_null_runs(dtype: pa.DataType, pattern: str, zeroed: bool) -> None:
    """Null runs of every length, with the slot bytes under nulls zero (as Parquet readers
    leave them) or not (as ``pa.array(..., mask=...)`` does): only validity may matter."""
    nulls = np.array(NULL_PATTERNS[pattern])
    width = dtype.bit_width // 8
    raw = np.random.default_rng(5).integers(1, 256, len(nulls) * width, dtype=np.uint8)
    if zeroed:
        raw.reshape(len(nulls), width)[nulls] = 0
    validity = pa.array(~nulls).buffers()[1]
    array = pa.Array.from_buffers(dtype, len(nulls), [validity, pa.py_buffer(raw)])
    table = pa.table({"x": array})
    expected = naive_record_digest(table.schema, table.to_batches())
    assert logical_hash(table) == expected
    assert logical_hash(table.slice(1)) == naive_record_digest(
        table.schema, table.slice(1).to_batches()
    )


def test_struct_or_bug_makes_hash_depend_on_batching() -> None:
    """Two levels of nulls: the child null under a valid struct row is hashed as a value
    (empty string) when the struct has a null in the same batch, as ``0x00`` otherwise."""
    child = pa.array(["a", None, "c", None], pa.string())
    struct_array = pa.StructArray.from_arrays(
        [child], names=["v"], mask=pa.array([True, False, False, False])
    )
    table = pa.table({"s": struct_array})
    whole = table.to_batches()[0]
    halves = [whole.slice(0, 2), whole.slice(2, 2)]
    assert logical_hash(whole) == naive_record_digest(table.schema, [whole])
    assert logical_hash(halves) == naive_record_digest(table.schema, halves)
    assert logical_hash(whole) != logical_hash(halves)


def test_struct_all_valid_or_result_hides_grandchild_nulls() -> None:
    """maybe_combine(Some(all-valid), _) is None: an OR that comes out all-valid drops the
    descendants' own nulls too (docs/logical-hash.md, 'Struct nulls': P has no nulls -> none)."""
    # Grandchild [null (slot holds 7), 2]; inner struct null at row 1, outer at row 0: the
    # inner/outer OR is all-valid, so the grandchild's null is hashed as the value 7.
    slots = pa.py_buffer(np.array([7, 2], dtype=np.int64).tobytes())
    grandchild = pa.Array.from_buffers(pa.int64(), 2, [pa.py_buffer(b"\x02"), slots])
    inner = pa.StructArray.from_arrays([grandchild], names=["g"], mask=pa.array([False, True]))
    outer = pa.StructArray.from_arrays([inner], names=["i"], mask=pa.array([True, False]))
    table = pa.table({"o": outer})
    assert logical_hash(table) == naive_record_digest(table.schema, table.to_batches())
    as_values = pa.table(
        {
            "o": pa.StructArray.from_arrays(
                [pa.StructArray.from_arrays([pa.array([7, 2], pa.int64())], names=["g"])],
                names=["i"],
            )
        }
    )
    assert logical_hash(table) == logical_hash(as_values)


# --------------------------------------------------------------------------------------------
# Sources, threads, API
# --------------------------------------------------------------------------------------------


def _wide_table(rows: int, null_rate: float, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "i": pa.array(rng.integers(0, 2**40, rows), mask=_mask(rng, rows, null_rate)),
            "f": pa.array(rng.standard_normal(rows), mask=_mask(rng, rows, null_rate)),
            "s": pa.array(
                [str(k) for k in rng.integers(0, 10**6, rows)], mask=_mask(rng, rows, null_rate)
            ),
            "b": pa.array(rng.random(rows) < 0.5, mask=_mask(rng, rows, null_rate)),
            "l": pa.array([[1, 2]] * rows, pa.list_(pa.int16())),
        }
    )


@pytest.mark.parametrize("null_rate", [0.0, 0.1])
def test_threads_give_the_same_hash(null_rate: float) -> None:
    table = _wide_table(100_000, null_rate)
    assert logical_hash(table, threads=2) == logical_hash(table)
    assert logical_hash(table, threads=4) == logical_hash(table)


def test_all_source_kinds_agree() -> None:
    table = _wide_table(1000, 0.1)
    expected = logical_hash(table)
    batches = table.to_batches(max_chunksize=300)
    assert logical_hash(batches) == expected
    assert logical_hash(iter(batches)) == expected
    assert logical_hash(pa.RecordBatchReader.from_batches(table.schema, batches)) == expected
    assert logical_hash(table.combine_chunks().to_batches()[0]) == expected


def test_chunked_table_with_misaligned_chunks() -> None:
    table = _wide_table(1000, 0.1)
    rechunked = pa.table(
        {
            name: pa.chunked_array(
                [table.column(name).slice(0, 17 * (i + 1)), table.column(name).slice(17 * (i + 1))]
            )
            for i, name in enumerate(table.column_names)
        }
    )
    assert logical_hash(rechunked) == logical_hash(table)


def test_empty_iterable_needs_a_schema() -> None:
    with pytest.raises(DataError):
        logical_hash([])


def test_hasher_rejects_mismatched_batches_and_reuse() -> None:
    hasher = LogicalHasher(pa.schema([pa.field("a", pa.int64())]))
    with pytest.raises(DataError):
        hasher.update(pa.RecordBatch.from_pydict({"a": pa.array(["x"])}))
    with pytest.raises(DataError):
        hasher.update(pa.RecordBatch.from_pydict({"a": [1], "b": [2]}))
    hasher.update(pa.RecordBatch.from_pydict({"a": pa.array([1], pa.int64())}))
    result = hasher.finalize()
    assert result.code == 0x300016
    with pytest.raises(DataError):
        hasher.update(pa.RecordBatch.from_pydict({"a": pa.array([1], pa.int64())}))
    with pytest.raises(DataError):
        hasher.finalize()


def test_value_compatible_batches_use_the_schema_type_bytes() -> None:
    schema = pa.schema([pa.field("s", pa.string()), pa.field("t", pa.timestamp("ms", "UTC"))])
    batch = pa.RecordBatch.from_pydict(
        {
            "s": pa.array(["x"], pa.large_string()),
            "t": pa.array([5], pa.timestamp("ms", "+00:00")),
        }
    )
    same = pa.RecordBatch.from_arrays(
        [pa.array(["x"]), pa.array([5], pa.timestamp("ms", "UTC"))], schema=schema
    )
    assert logical_hash([batch], schema=schema) == logical_hash(same)


def test_large_values_cross_piece_boundaries() -> None:
    # Values bigger than one piece, mixed with tiny ones.
    big = "z" * (hashing_module._CHUNK_BYTES + 5)
    table = pa.table({"s": pa.array(["a", big, None, "", big[:10]], pa.large_string())})
    batch = table.to_batches()[0]
    assert logical_hash(table) == naive_record_digest(table.schema, [batch])


def test_many_rows_of_strings_cross_row_pieces() -> None:
    # Strings are assembled in pieces of 64Ki rows: three pieces plus a remainder, with null
    # slots that still hold bytes (skipped) and empty values on both sides of every cut.
    rows = 3 * (1 << 16) + 17
    rng = np.random.default_rng(11)
    words = pa.array(["", "a", "kamu", "Ho Chi Minh City", "é" * 9])
    values = words.take(pa.array(rng.integers(0, len(words), rows)))
    valid = rng.random(rows) >= 0.1
    strings = pa.Array.from_buffers(
        pa.string(), rows, [pa.array(valid).buffers()[1], *values.buffers()[1:]]
    )
    table = pa.table({"s": strings, "b": values.cast(pa.large_binary())})
    batch = table.to_batches()[0]
    assert logical_hash(table) == naive_record_digest(table.schema, [batch])
    assert logical_hash(table.slice(5)) == naive_record_digest(table.schema, [batch.slice(5)])


def test_many_rows_of_fixed_width_nulls_cross_row_pieces() -> None:
    # Fixed-width columns with nulls are copied run by run from the values buffer in pieces of
    # 256Ki rows and their null bytes zeroed in the copy: slots under nulls hold bytes, null
    # runs straddle the cuts, and the buffer itself must stay untouched.
    rows = 2 * (1 << 18) + 7
    rng = np.random.default_rng(12)
    raw = rng.integers(1, 2**62, rows)
    nulls = rng.random(rows) < 0.1
    nulls[(1 << 18) - 3 : (1 << 18) + 2] = True
    nulls[-1] = True
    validity = pa.array(~nulls).buffers()[1]
    ints = pa.Array.from_buffers(pa.int64(), rows, [validity, pa.py_buffer(raw)])
    halves = pa.Array.from_buffers(
        pa.float16(), rows, [validity, pa.py_buffer(raw[: (rows + 3) // 4])]
    )
    table = pa.table({"i": ints, "h": halves})
    before = raw.copy()
    batch = table.to_batches()[0]
    assert logical_hash(table) == naive_record_digest(table.schema, [batch])
    assert logical_hash(table.slice(9)) == naive_record_digest(table.schema, [batch.slice(9)])
    assert np.array_equal(raw, before)


# --------------------------------------------------------------------------------------------
# Parquet: what arrow-rs (and so kamu) would see
# --------------------------------------------------------------------------------------------


def test_parquet_schema_follows_arrow_rs(tmp_path: Path) -> None:
    path = tmp_path / "types.parquet"
    table = pa.table(
        {
            "ts_s": pa.array([0, 1], pa.timestamp("s")),
            "ts_s_utc": pa.array([0, 1], pa.timestamp("s", "UTC")),
            "ts_ms_berlin": pa.array([0, 1], pa.timestamp("ms", "Europe/Berlin")),
            "ts_ns": pa.array([0, 1], pa.timestamp("ns")),
            "d64": pa.array([0, 86_400_000], pa.date64()),
            "t32s": pa.array([0, 1], pa.time32("s")),
            "bin": pa.array([b"x", b"y"]),
            "u16": pa.array([1, 2], pa.uint16()),
            "dec": pa.array([decimal.Decimal("1.5"), None], pa.decimal128(9, 1)),
            "dec256": pa.array([decimal.Decimal("1.5"), None], pa.decimal256(9, 1)),
            "fsb": pa.array([b"ab", b"cd"], pa.binary(2)),
            "st": pa.array([{"a": 1}, None], pa.struct([("a", pa.int64())])),
        }
    )
    pq.write_table(table, path)
    schema = kamu_parquet_schema(path)
    assert schema.field("ts_s").type == pa.timestamp("ms")  # Parquet has no seconds
    assert schema.field("ts_s_utc").type == pa.timestamp("ms", "UTC")
    assert schema.field("ts_ms_berlin").type == pa.timestamp("ms", "Europe/Berlin")
    assert schema.field("ts_ns").type == pa.timestamp("ns")
    assert schema.field("d64").type == pa.date64()  # Date32 + Date64 hint
    assert schema.field("t32s").type == pa.time32("ms")
    assert schema.field("bin").type == pa.binary()
    assert schema.field("u16").type == pa.uint16()
    assert schema.field("dec").type == pa.decimal128(9, 1)
    assert schema.field("dec256").type == pa.decimal256(9, 1)  # Decimal128 + Decimal256 hint
    assert schema.field("fsb").type == pa.binary(2)
    assert schema.field("st").type == pa.struct([("a", pa.int64())])


def test_parquet_hash_uses_arrow_rs_units_and_types(tmp_path: Path) -> None:
    path = tmp_path / "units.parquet"
    table = pa.table(
        {
            "ts": pa.array([0, 1, None], pa.timestamp("s", "UTC")),
            "d": pa.array([0, 86_400_000, 2 * 86_400_000], pa.date64()),
        }
    )
    pq.write_table(table, path)
    as_kamu_reads_it = pa.table(
        {
            "ts": pa.array([0, 1000, None], pa.timestamp("ms", "UTC")),
            "d": pa.array([0, 86_400_000, 2 * 86_400_000], pa.date64()),
        }
    )
    assert logical_hash(path) == logical_hash(as_kamu_reads_it)
    assert logical_hash(path) != logical_hash(table)


def test_parquet_without_arrow_schema_hint(tmp_path: Path) -> None:
    path = tmp_path / "nohint.parquet"
    table = pa.table({"d": pa.array([0, 86_400_000], pa.date64()), "s": pa.array(["x", None])})
    pq.write_table(table, path, store_schema=False)
    expected = pa.table({"d": pa.array([0, 1], pa.date32()), "s": pa.array(["x", None])})
    assert logical_hash(path) == logical_hash(expected)


def test_parquet_is_hashed_in_kamu_10k_row_batches(tmp_path: Path) -> None:
    rows = 25_000
    rng = np.random.default_rng(3)
    values = pa.array([f"v{i}" for i in range(rows)], mask=rng.random(rows) < 0.2)
    struct_nulls = rng.random(rows) < 0.2
    struct_nulls[20_000:] = False  # kamu's third batch: only the child has nulls
    struct_array = pa.StructArray.from_arrays([values], names=["v"], mask=pa.array(struct_nulls))
    table = pa.table({"s": struct_array, "n": pa.array(np.arange(rows))})
    path = tmp_path / "structs.parquet"
    pq.write_table(table, path, row_group_size=7_000)
    read = pq.read_table(path)
    kamu_batches = read.combine_chunks().to_batches(max_chunksize=10_000)
    assert [b.num_rows for b in kamu_batches] == [10_000, 10_000, 5_000]
    assert logical_hash(path) == logical_hash(kamu_batches)
    assert logical_hash(path) == naive_record_digest(read.schema, kamu_batches)
    assert logical_hash(path) != logical_hash(read.combine_chunks().to_batches()[0])


def test_parquet_refuses_stale_primitive_slots(tmp_path: Path) -> None:
    struct_array = pa.StructArray.from_arrays(
        [pa.array([1, None, 3], pa.int64())], names=["x"], mask=pa.array([True, False, False])
    )
    path = tmp_path / "stale.parquet"
    pq.write_table(pa.table({"s": struct_array}), path)
    with pytest.raises(UnreproducibleLogicalHash, match=r"'s\.x'"):
        logical_hash(path)
    # In memory the slot bytes are known, so the hash is defined.
    logical_hash(pa.table({"s": struct_array}))


@pytest.mark.parametrize(
    "array",
    [
        pa.array(["a", "b", "a"]).dictionary_encode(),
        pa.array([1, 2, 3], pa.duration("ms")),
    ],
)
def test_parquet_unsupported_types(tmp_path: Path, array: pa.Array) -> None:
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"x": array}), path)
    with pytest.raises(UnsupportedArrowType, match="column 'x'"):
        logical_hash(path)


def test_parquet_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    table = pa.table({"a": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    pq.write_table(table, path)
    assert logical_hash(path) == logical_hash(table)


# --------------------------------------------------------------------------------------------
# Physical hash
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 8 << 20, (8 << 20) + 12_345])
def test_physical_hash_is_sha3_of_the_file(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert physical_hash(path) == Multihash.sha3_256(data).to_multibase()
    assert physical_hash(str(path)).startswith("f1620")
