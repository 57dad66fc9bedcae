"""Unit and property tests of ``coordinator.metadata.arrow_schema``.

Byte-exactness against kamu / arrow-rs is covered by ``tests/golden/test_arrow_schema.py``;
here: schema -> bytes -> schema round trips for every supported type (hand-picked and
generated), decoding buffers built in a different order than arrow-rs's, and robustness of the
decoder against malformed input.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flatbuffers
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.errors import DecodeError, EncodeError, UnsupportedArrowType
from coordinator.metadata.arrow_schema import decode_arrow_schema, encode_arrow_schema

GOLDEN = json.loads(
    (Path(__file__).parent.parent / "golden" / "data" / "arrow_schemas.json").read_text()
)
KAMU_VECTORS = [base64.b64decode(v["base64"]) for v in GOLDEN if v["kind"] == "kamu-written"]


def _round_trip(schema: pa.Schema) -> pa.Schema:
    data = encode_arrow_schema(schema)
    decoded = decode_arrow_schema(data)
    assert decoded.equals(schema, check_metadata=True), (decoded, schema)
    # Encoding is a function of the schema: decode -> encode gives the same bytes again.
    assert encode_arrow_schema(decoded) == data
    return decoded


# --- Hand-picked types -----------------------------------------------------------------------

LEAF_TYPES: list[pa.DataType] = [
    pa.null(),
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float16(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.binary(0),
    pa.binary(1),
    pa.binary(32),
    pa.date32(),
    pa.date64(),
    pa.time32("s"),
    pa.time32("ms"),
    pa.time64("us"),
    pa.time64("ns"),
    *(pa.duration(unit) for unit in ("s", "ms", "us", "ns")),
    pa.month_day_nano_interval(),
    pa.decimal128(1, 0),
    pa.decimal128(38, 38),
    pa.decimal128(10, -3),
    pa.decimal256(1, 0),
    pa.decimal256(76, 10),
    pa.decimal256(50, -128),
]

TIMEZONES = [None, "UTC", "Etc/UTC", "Africa/Johannesburg", "+05:30", "-08:00"]
TIMESTAMP_TYPES = [pa.timestamp(u, tz=tz) for u in ("s", "ms", "us", "ns") for tz in TIMEZONES]

NESTED_TYPES: list[pa.DataType] = [
    pa.list_(pa.int32()),
    pa.list_(pa.field("element", pa.string(), nullable=False)),
    pa.large_list(pa.field("item", pa.timestamp("ms", tz="UTC"))),
    pa.list_(pa.field("v", pa.float64()), 0),
    pa.list_(pa.field("v", pa.float64(), nullable=False), 4),
    pa.struct([]),
    pa.struct([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string())]),
    pa.struct([pa.field("same", pa.int8()), pa.field("same", pa.int8())]),
    pa.list_(pa.struct([pa.field("x", pa.list_(pa.large_list(pa.date32())))])),
    pa.map_(pa.string(), pa.int64()),
    pa.map_(
        pa.field("keys", pa.string(), nullable=False),
        pa.field("values", pa.struct([pa.field("q", pa.bool_())]), nullable=False),
        keys_sorted=True,
    ),
    pa.sparse_union([pa.field("a", pa.int32()), pa.field("b", pa.string())]),
    pa.dense_union([pa.field("a", pa.int32()), pa.field("b", pa.string())], type_codes=[3, 127]),
    pa.sparse_union([]),
]


TYPE_CASES = [
    pytest.param(data_type, nullable, id=f"{data_type}-{'null' if nullable else 'notnull'}")
    for data_type in LEAF_TYPES + TIMESTAMP_TYPES + NESTED_TYPES
    for nullable in (True, False)
    if nullable or data_type != pa.null()  # pyarrow refuses non-nullable Null fields
]


@pytest.mark.parametrize(("data_type", "nullable"), TYPE_CASES)
def test_every_supported_type_round_trips(data_type: pa.DataType, nullable: bool) -> None:
    _round_trip(pa.schema([pa.field("col", data_type, nullable=nullable)]))


def test_all_types_in_one_schema_round_trip() -> None:
    types = LEAF_TYPES + TIMESTAMP_TYPES + NESTED_TYPES
    schema = pa.schema(
        [pa.field(f"f{i}", t, nullable=i % 3 != 0 or t == pa.null()) for i, t in enumerate(types)]
    )
    _round_trip(schema)


def test_empty_schema_round_trips() -> None:
    _round_trip(pa.schema([]))


def test_timestamp_timezone_variants() -> None:
    for tz in TIMEZONES:
        decoded = _round_trip(pa.schema([pa.field("t", pa.timestamp("us", tz=tz))]))
        assert decoded.field("t").type.tz == tz


def test_timestamp_without_timezone_still_writes_empty_string() -> None:
    """arrow-rs creates the timezone string even when there is none (4-byte length + NUL)."""
    with_tz = encode_arrow_schema(pa.schema([pa.field("t", pa.timestamp("ms", tz="UTC"))]))
    without = encode_arrow_schema(pa.schema([pa.field("t", pa.timestamp("ms"))]))
    assert b"UTC\x00" in with_tz
    # An unreferenced empty string: a zero u32 length followed by the NUL and padding.
    assert len(without) == len(with_tz) - 8 + 4


def test_unicode_names_and_metadata_round_trip() -> None:
    schema = pa.schema(
        [
            pa.field("\u00e9t\u00e9 \U0001f600", pa.int32(), metadata={"k\u00e9y": "v\u00e4l"}),
            pa.field("", pa.string(), metadata={"": ""}),
            pa.field(
                "s",
                pa.struct([pa.field("inner", pa.int8(), metadata={"a": "1", "b": "2"})]),
                metadata={"outer": "x"},
            ),
        ],
        metadata={"pandas": "{}", "z": "last", "a": "first"},
    )
    _round_trip(schema)


def test_metadata_is_written_sorted_so_insertion_order_does_not_matter() -> None:
    first = pa.schema(
        [pa.field("a", pa.int8(), metadata={"x": "1", "y": "2"})], metadata={"b": "", "a": ""}
    )
    second = pa.schema(
        [pa.field("a", pa.int8(), metadata={"y": "2", "x": "1"})], metadata={"a": "", "b": ""}
    )
    assert encode_arrow_schema(first) == encode_arrow_schema(second)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = KAMU_VECTORS[0]
    expected = decode_arrow_schema(data)
    assert decode_arrow_schema(bytearray(data)) == expected
    assert decode_arrow_schema(memoryview(data)) == expected


def test_encode_rejects_non_schema() -> None:
    with pytest.raises(TypeError):
        encode_arrow_schema(pa.int32())


# --- Unsupported types -----------------------------------------------------------------------


class _UuidType(pa.ExtensionType):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(pa.binary(16), "test.uuid")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _UuidType:
        return cls()


def _optional_types(*names: str) -> list[Callable[[], pa.DataType]]:
    """pyarrow factories that exist only in some pyarrow versions."""
    factories: dict[str, Callable[[], pa.DataType]] = {
        "string_view": pa.string_view,
        "binary_view": pa.binary_view,
        "list_view": lambda: pa.list_view(pa.int32()),
        "large_list_view": lambda: pa.large_list_view(pa.int32()),
        "decimal32": lambda: pa.decimal32(5, 2),
        "decimal64": lambda: pa.decimal64(12, 2),
        "run_end_encoded": lambda: pa.run_end_encoded(pa.int32(), pa.string()),
    }
    return [factories[n] for n in names if hasattr(pa, n)]


UNSUPPORTED: list[Callable[[], pa.DataType]] = [
    lambda: pa.dictionary(pa.int32(), pa.string()),
    _UuidType,
    lambda: pa.struct(
        [pa.field("ok", pa.int8()), pa.field("bad", pa.dictionary(pa.int8(), pa.utf8()))]
    ),
    lambda: pa.list_(pa.dictionary(pa.int16(), pa.utf8())),
    lambda: pa.decimal256(76, 200),  # arrow-rs keeps the scale in an i8
    *_optional_types(
        "string_view",
        "binary_view",
        "list_view",
        "large_list_view",
        "decimal32",
        "decimal64",
        "run_end_encoded",
    ),
]


@pytest.mark.parametrize("factory", UNSUPPORTED)
def test_unsupported_types_raise_unsupported_arrow_type(
    factory: Callable[[], pa.DataType],
) -> None:
    schema = pa.schema([pa.field("ok", pa.int64()), pa.field("col", factory())])
    with pytest.raises(UnsupportedArrowType):
        encode_arrow_schema(schema)


def test_non_utf8_metadata_raises_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_arrow_schema(pa.schema([pa.field("a", pa.int8())], metadata={b"\xff": b"x"}))
    with pytest.raises(EncodeError):
        encode_arrow_schema(pa.schema([pa.field("a", pa.int8(), metadata={b"k": b"\xfe"})]))


# --- Buffers built in another order ----------------------------------------------------------


class _Table:
    """A tiny generic FlatBuffers table writer for hand-built test buffers."""

    def __init__(self, builder: flatbuffers.Builder, nslots: int) -> None:
        self.builder = builder
        self.nslots = nslots
        self.slots: list[tuple[str, int, Any]] = []

    def add(self, kind: str, slot: int, value: Any) -> _Table:
        self.slots.append((kind, slot, value))
        return self

    def end(self) -> int:
        b = self.builder
        b.StartObject(self.nslots)
        for kind, slot, value in self.slots:
            if kind == "offset":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            elif kind == "bool":
                b.PrependBoolSlot(slot, value, not value)  # force it to be written
            elif kind == "u8":
                b.PrependUint8Slot(slot, value, value + 1)
            elif kind == "i16":
                b.PrependInt16Slot(slot, value, value + 1)
            elif kind == "i32":
                b.PrependInt32Slot(slot, value, value + 1)
            elif kind == "i64":
                b.PrependInt64Slot(slot, value, value + 1)
            else:
                raise AssertionError(kind)
        result: int = b.EndObject()
        return result


def _vector(builder: flatbuffers.Builder, offsets: list[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    result: int = builder.EndVector()
    return result


def _kv(builder: flatbuffers.Builder, key: str, value: str) -> int:
    v = builder.CreateString(value)
    k = builder.CreateString(key)
    return _Table(builder, 2).add("offset", 1, v).add("offset", 0, k).end()


def _alt_field(
    builder: flatbuffers.Builder,
    name: str,
    type_code: int,
    type_table: int,
    nullable: bool,
    children: list[int] | None = None,
    metadata: list[int] | None = None,
    dictionary: int | None = None,
) -> int:
    """A Field with slots written in reverse order and defaults written explicitly."""
    name_offset = builder.CreateString(name)
    children_offset = _vector(builder, children) if children is not None else None
    metadata_offset = _vector(builder, metadata) if metadata is not None else None
    table = _Table(builder, 7)
    if metadata_offset is not None:
        table.add("offset", 6, metadata_offset)
    if children_offset is not None:
        table.add("offset", 5, children_offset)
    if dictionary is not None:
        table.add("offset", 4, dictionary)
    table.add("offset", 3, type_table).add("u8", 2, type_code).add("bool", 1, nullable)
    table.add("offset", 0, name_offset)
    return table.end()


def _alt_schema(
    build_fields: Callable[[flatbuffers.Builder], list[int]],
    endianness: int = 0,
    metadata: list[tuple[str, str]] | None = None,
) -> bytes:
    builder = flatbuffers.Builder(0)
    kvs = [_kv(builder, k, v) for k, v in metadata or []]
    metadata_vector = _vector(builder, kvs) if metadata else None
    # A features vector (ignored by readers of the schema).
    builder.StartVector(8, 1, 8)
    builder.PrependInt64(1)
    features = builder.EndVector()
    fields = _vector(builder, build_fields(builder))
    table = _Table(builder, 4).add("i16", 0, endianness).add("offset", 3, features)
    if metadata_vector is not None:
        table.add("offset", 2, metadata_vector)
    root = table.add("offset", 1, fields).end()
    builder.Finish(root)
    return bytes(builder.Output())


def _alt_fields(builder: flatbuffers.Builder) -> list[int]:
    def int_type(bits: int, signed: bool) -> int:
        return _Table(builder, 2).add("i32", 0, bits).add("bool", 1, signed).end()

    # a: Int32 not null, with all defaults written explicitly.
    a = _alt_field(builder, "a", 2, int_type(32, True), nullable=False, children=[])
    # ts: Timestamp(us, "Europe/Berlin"), no children vector at all.
    tz = builder.CreateString("Europe/Berlin")
    ts_type = _Table(builder, 2).add("offset", 1, tz).add("i16", 0, 2).end()
    ts = _alt_field(builder, "ts", 10, ts_type, nullable=True)
    # naive: Timestamp(s) with an explicitly present empty timezone.
    empty_tz = builder.CreateString("")
    naive_type = _Table(builder, 2).add("offset", 1, empty_tz).add("i16", 0, 0).end()
    naive = _alt_field(builder, "naive", 10, naive_type, nullable=True)
    # l: List<item: Utf8 not null> with metadata on the child.
    item = _alt_field(
        builder,
        "item",
        5,
        _Table(builder, 0).end(),
        nullable=False,
        metadata=[_kv(builder, "m", "1")],
    )
    lst = _alt_field(builder, "l", 12, _Table(builder, 0).end(), nullable=True, children=[item])
    # d: Date(DAY) and t: Time(us, 64).
    d = _alt_field(builder, "d", 8, _Table(builder, 1).add("i16", 0, 0).end(), nullable=True)
    t_type = _Table(builder, 2).add("i16", 0, 2).add("i32", 1, 64).end()
    t = _alt_field(builder, "t", 9, t_type, nullable=False)
    # u: Union without typeIds -> type codes 0..n-1.
    u_members = [
        _alt_field(builder, "x", 6, _Table(builder, 0).end(), nullable=True),
        _alt_field(builder, "y", 4, _Table(builder, 0).end(), nullable=True),
    ]
    u = _alt_field(
        builder,
        "u",
        14,
        _Table(builder, 2).add("i16", 0, 1).end(),
        nullable=True,
        children=u_members,
    )
    return [a, ts, naive, lst, d, t, u]


ALT_EXPECTED = pa.schema(
    [
        pa.field("a", pa.int32(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="Europe/Berlin")),
        pa.field("naive", pa.timestamp("s")),
        pa.field("l", pa.list_(pa.field("item", pa.string(), nullable=False, metadata={"m": "1"}))),
        pa.field("d", pa.date32()),
        pa.field("t", pa.time64("us"), nullable=False),
        pa.field("u", pa.dense_union([pa.field("x", pa.bool_()), pa.field("y", pa.binary())])),
    ],
    metadata={"k": "v", "dup": "last"},
)


def test_decodes_buffer_built_in_another_order() -> None:
    data = _alt_schema(_alt_fields, metadata=[("k", "v"), ("dup", "first"), ("dup", "last")])
    decoded = decode_arrow_schema(data)
    assert decoded.equals(ALT_EXPECTED, check_metadata=True)
    assert decoded.field("l").type.value_field.metadata == {b"m": b"1"}
    # Re-encoding gives arrow-rs's canonical bytes, not the input's.
    canonical = encode_arrow_schema(decoded)
    assert canonical != data
    assert decode_arrow_schema(canonical).equals(ALT_EXPECTED, check_metadata=True)


def test_big_endian_schema_is_rejected() -> None:
    with pytest.raises(DecodeError, match="big-endian"):
        decode_arrow_schema(_alt_schema(_alt_fields, endianness=1))


def _single_field_schema(
    make: Callable[[flatbuffers.Builder], int],
) -> bytes:
    return _alt_schema(lambda b: [make(b)])


def _dictionary_field(builder: flatbuffers.Builder) -> int:
    index = _Table(builder, 2).add("i32", 0, 32).add("bool", 1, True).end()
    dictionary = _Table(builder, 4).add("i64", 0, 0).add("offset", 1, index).end()
    return _alt_field(builder, "d", 5, _Table(builder, 0).end(), True, dictionary=dictionary)


def _type_only(code: int, slots: list[tuple[str, int, Any]] | None = None) -> Callable[[Any], int]:
    def make(builder: flatbuffers.Builder) -> int:
        table = _Table(builder, 4)
        for kind, slot, value in slots or []:
            table.add(kind, slot, value)
        return _alt_field(builder, "f", code, table.end(), nullable=True)

    return make


UNDECODABLE: dict[str, Callable[[Any], int]] = {
    "dictionary": _dictionary_field,
    "run_end_encoded": _type_only(22),
    "utf8_view": _type_only(24),
    "unknown_type": _type_only(200),
    "type_none": _type_only(0),
    "int_bitwidth_7": _type_only(2, [("i32", 0, 7), ("bool", 1, True)]),
    "float_precision_5": _type_only(3, [("i16", 0, 5)]),
    "decimal_bitwidth_64": _type_only(7, [("i32", 0, 10), ("i32", 2, 64)]),
    "decimal_precision_0": _type_only(7, [("i32", 0, 0)]),
    "decimal128_precision_39": _type_only(7, [("i32", 0, 39)]),
    "decimal_scale_200": _type_only(7, [("i32", 0, 5), ("i32", 1, 200)]),
    "date_unit_7": _type_only(8, [("i16", 0, 7)]),
    "time_32_us": _type_only(9, [("i16", 0, 2), ("i32", 1, 32)]),
    "timestamp_unit_9": _type_only(10, [("i16", 0, 9)]),
    "duration_unit_-1": _type_only(18, [("i16", 0, -1)]),
    "interval_year_month": _type_only(11, [("i16", 0, 0)]),
    "interval_day_time": _type_only(11, [("i16", 0, 1)]),
    "fixed_size_binary_negative": _type_only(15, [("i32", 0, -1)]),
    "fixed_size_list_negative": _type_only(16, [("i32", 0, -1)]),
    "list_without_child": _type_only(12),
    "map_without_child": _type_only(17),
    "union_mode_5": _type_only(14, [("i16", 0, 5)]),
}


@pytest.mark.parametrize("name", sorted(UNDECODABLE))
def test_unsupported_or_invalid_types_raise_decode_error(name: str) -> None:
    with pytest.raises(DecodeError):
        decode_arrow_schema(_single_field_schema(UNDECODABLE[name]))


def test_missing_fields_vector_is_rejected() -> None:
    builder = flatbuffers.Builder(0)
    builder.StartObject(4)
    builder.Finish(builder.EndObject())
    with pytest.raises(DecodeError, match="fields"):
        decode_arrow_schema(bytes(builder.Output()))


def test_missing_type_table_is_rejected_for_parameterised_types() -> None:
    def make(builder: flatbuffers.Builder) -> int:
        name = builder.CreateString("f")
        return _Table(builder, 7).add("offset", 0, name).add("u8", 2, 2).end()

    with pytest.raises(DecodeError):
        decode_arrow_schema(_single_field_schema(make))


def test_backward_child_offset_is_rejected() -> None:
    """uoffsets are unsigned, so a child pointing back at its parent (a cycle) is out of range."""
    data = bytearray(encode_arrow_schema(pa.schema([pa.field("s", pa.struct([]))])))
    # Follow root -> Schema.fields[0] -> Field.children (slot 5), an empty vector.
    root = struct.unpack_from("<I", data, 0)[0]
    fields_vec = root + 4 + struct.unpack_from("<I", data, root + 4)[0]
    field_pos = fields_vec + 4 + struct.unpack_from("<I", data, fields_vec + 4)[0]
    vtable = field_pos - struct.unpack_from("<i", data, field_pos)[0]
    children_slot = field_pos + struct.unpack_from("<H", data, vtable + 4 + 2 * 5)[0]
    children_vec = children_slot + struct.unpack_from("<I", data, children_slot)[0]
    assert struct.unpack_from("<I", data, children_vec)[0] == 0
    # Append a one-element vector whose element points back to the field table.
    new_vec = len(data)
    data += struct.pack("<I", 1) + struct.pack("<i", field_pos - (new_vec + 4))
    struct.pack_into("<i", data, children_slot, new_vec - children_slot)
    with pytest.raises(DecodeError):
        decode_arrow_schema(bytes(data))


def test_shared_subtrees_cannot_cause_exponential_work() -> None:
    """Fields whose children vectors all point at the same subtree hit the work budget."""
    builder = flatbuffers.Builder(0)
    leaf = _alt_field(builder, "x", 13, _Table(builder, 0).end(), True, children=[])
    node = leaf
    for _ in range(40):  # 2**40 paths if every reference were followed
        node = _alt_field(builder, "x", 13, _Table(builder, 0).end(), True, children=[node, node])
    fields = _vector(builder, [node])
    builder.Finish(_Table(builder, 4).add("offset", 1, fields).end())
    with pytest.raises(DecodeError):
        decode_arrow_schema(bytes(builder.Output()))


# --- Garbage, truncation and mutation --------------------------------------------------------


def _decode_or_decode_error(data: bytes) -> pa.Schema | None:
    """Decode ``data``; only DecodeError may escape. A success must re-encode consistently."""
    try:
        schema = decode_arrow_schema(data)
    except DecodeError:
        return None
    encoded = encode_arrow_schema(schema)
    assert decode_arrow_schema(encoded).equals(schema, check_metadata=True)
    return schema


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\x00" * 4, b"\x00" * 8, b"\xff" * 16, b"\x0c\x00\x00\x00", b"garbage!" * 9],
)
def test_garbage_raises_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_arrow_schema(data)


def test_non_bytes_input_raises_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_arrow_schema("DAAAAA")  # type: ignore[arg-type]


@pytest.mark.parametrize("index", range(len(KAMU_VECTORS)))
def test_every_truncation_fails_cleanly(index: int) -> None:
    data = KAMU_VECTORS[index]
    for length in range(len(data)):
        _decode_or_decode_error(data[:length])


@pytest.mark.parametrize("index", range(len(KAMU_VECTORS)))
def test_every_single_byte_corruption_fails_cleanly(index: int) -> None:
    data = KAMU_VECTORS[index]
    for pos in range(len(data)):
        for value in (0x00, 0x7F, 0x80, 0xFF, data[pos] ^ 0x01):
            mutated = bytearray(data)
            mutated[pos] = value
            _decode_or_decode_error(bytes(mutated))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_fail_cleanly(data: bytes) -> None:
    _decode_or_decode_error(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(KAMU_VECTORS),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8),
)
def test_random_mutations_fail_cleanly(data: bytes, edits: list[tuple[int, int]]) -> None:
    mutated = bytearray(data)
    for pos, value in edits:
        mutated[pos % len(mutated)] = value
    _decode_or_decode_error(bytes(mutated))


# --- Generated schemas -----------------------------------------------------------------------

names = st.text(max_size=12)
metadata = st.none() | st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3)

leaf_types = st.one_of(
    st.sampled_from(LEAF_TYPES),
    st.builds(pa.binary, st.integers(0, 1 << 20)),
    st.builds(
        pa.timestamp,
        st.sampled_from(["s", "ms", "us", "ns"]),
        tz=st.sampled_from(TIMEZONES),
    ),
    st.integers(1, 38).flatmap(
        lambda p: st.builds(pa.decimal128, st.just(p), st.integers(-128, 127))
    ),
    st.integers(1, 76).flatmap(
        lambda p: st.builds(pa.decimal256, st.just(p), st.integers(-128, 127))
    ),
)


@st.composite
def _fields(draw: st.DrawFn, types: st.SearchStrategy[pa.DataType]) -> pa.Field:
    data_type = draw(types)
    nullable = True if data_type == pa.null() else draw(st.booleans())
    return pa.field(draw(names), data_type, nullable=nullable, metadata=draw(metadata))


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    fields = _fields(children)
    key_fields = _fields(leaf_types.filter(lambda t: t != pa.null())).map(
        lambda f: f.with_nullable(False)
    )

    @st.composite
    def unions(draw: st.DrawFn) -> pa.DataType:
        members = draw(st.lists(fields, max_size=4))
        codes = draw(
            st.lists(st.integers(0, 127), min_size=len(members), max_size=len(members), unique=True)
        )
        factory = draw(st.sampled_from([pa.sparse_union, pa.dense_union]))
        return factory(members, type_codes=codes)

    return st.one_of(
        fields.map(pa.list_),
        fields.map(pa.large_list),
        st.builds(pa.list_, fields, st.integers(0, 16)),
        st.lists(fields, max_size=4).map(pa.struct),
        st.builds(pa.map_, key_fields, fields, keys_sorted=st.booleans()),
        unions(),
    )


data_types = st.recursive(leaf_types, _nested, max_leaves=12)
schemas = st.builds(
    pa.schema,
    st.lists(_fields(data_types), max_size=6),
    metadata=metadata,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas)
def test_generated_schemas_round_trip(schema: pa.Schema) -> None:
    _round_trip(schema)
