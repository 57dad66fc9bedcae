"""Arrow schemas as the bare ``Schema`` FlatBuffer that ODF's ``SetDataSchema.schema`` holds.

ODF stores a dataset's Arrow schema in ``SetDataSchema.schema`` as **a standalone FlatBuffer whose
root table is** ``org.apache.arrow.flatbuf.Schema`` (``format/Schema.fbs``). kamu-cli writes it
with arrow-rs ``arrow_ipc::convert::schema_to_fb`` (arrow-rs 48.x at kamu v0.153), and the bytes
go into the metadata block, so they are part of the block hash.

This is **not** what ``pyarrow.Schema.serialize()`` produces. pyarrow writes an IPC *message*: a
``0xFFFFFFFF`` continuation marker, a length prefix and a ``Message`` table whose header union
holds the ``Schema`` table, built in C++'s builder order. The bare ``Schema`` buffer has none of
that wrapping, and to get hash-identical blocks its bytes must also come out of the FlatBuffers
builder in arrow-rs's exact call order. :func:`encode_arrow_schema` therefore replays arrow-rs's
``schema_to_fb_offset`` / ``build_field`` / ``get_fb_field_type`` calls on the Python
``flatbuffers.Builder`` (whose layout rules match the Rust builder's, see
``docs/odf-wire-format.md``, "Layout rules" and "Arrow schema in SetDataSchema";
``flatbuffers>=25.12.19`` is required for identical vtable deduplication):

* **Schema:** every field in order, then the ``fields`` offsets vector, then ``custom_metadata``
  if non-empty. ``endianness`` (Little) is the default and is never written.
* **Field:** the ``custom_metadata`` vector (if any), the name string, the type object(s), then
  the ``Field`` table with slots added in the order name, type_type, nullable (omitted when
  false), children, type, custom_metadata.
* **Type objects:** every type gets a ``children`` vector (empty for non-nested types), but the
  order of that vector relative to the type table differs per type: ``Int`` and
  ``FloatingPoint`` create it *before* the type table, all other types after it. Nested types
  build their child fields first. ``Timestamp`` always creates its timezone string, even when
  empty, but only references it from the table when non-empty. Scalars equal to the schema
  default are omitted (``push_slot``), e.g. ``Date`` unit ``DAY`` is written but ``MILLISECOND``
  is not, and ``Decimal`` bit width 128 is not written.

Custom metadata: arrow-rs 48 iterates a ``HashMap``, so the order of key/value pairs (and thus
the bytes and block hashes) of schemas with metadata is not deterministic even in kamu. Here
pairs are written sorted by key; hashes of schemas with metadata can never be compared with
kamu's. kamu's own schemas carry no metadata.

:func:`decode_arrow_schema` reads any valid ``Schema`` FlatBuffer, whatever order it was built
in, with a bounds-checked reader: malformed input raises :class:`~coordinator.errors.DecodeError`
and never an ``IndexError`` or ``struct.error``.

Supported types (both directions): Null, Boolean, Int8/16/32/64, UInt8/16/32/64,
Float16/32/64, Utf8, LargeUtf8, Binary, LargeBinary, FixedSizeBinary, Date32, Date64,
Time32(s, ms), Time64(us, ns), Timestamp (all units, with or without timezone), Duration (all
units), Interval(MonthDayNano), Decimal128, Decimal256, List, LargeList, FixedSizeList, Struct,
Map and sparse/dense Union. Not supported: dictionary-encoded fields, run-end encoding, view
types, Decimal32/64, extension types and the YearMonth/DayTime intervals (pyarrow cannot build
them); arrow-rs 48 cannot represent the pyarrow-only ones either.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import flatbuffers
import pyarrow as pa

from coordinator.errors import DecodeError, EncodeError, UnsupportedArrowType

__all__ = ["decode_arrow_schema", "encode_arrow_schema"]

# --- Schema.fbs constants ------------------------------------------------------------------

# ``union Type`` codes.
_T_NULL: Final = 1
_T_INT: Final = 2
_T_FLOATING_POINT: Final = 3
_T_BINARY: Final = 4
_T_UTF8: Final = 5
_T_BOOL: Final = 6
_T_DECIMAL: Final = 7
_T_DATE: Final = 8
_T_TIME: Final = 9
_T_TIMESTAMP: Final = 10
_T_INTERVAL: Final = 11
_T_LIST: Final = 12
_T_STRUCT: Final = 13
_T_UNION: Final = 14
_T_FIXED_SIZE_BINARY: Final = 15
_T_FIXED_SIZE_LIST: Final = 16
_T_MAP: Final = 17
_T_DURATION: Final = 18
_T_LARGE_BINARY: Final = 19
_T_LARGE_UTF8: Final = 20
_T_LARGE_LIST: Final = 21

# ``enum Precision``, ``DateUnit``, ``TimeUnit``, ``IntervalUnit``, ``UnionMode``.
_PRECISION_HALF: Final = 0
_PRECISION_SINGLE: Final = 1
_PRECISION_DOUBLE: Final = 2
_DATE_DAY: Final = 0
_DATE_MILLISECOND: Final = 1
_TIME_UNITS: Final = ("s", "ms", "us", "ns")  # index = TimeUnit code
_TIME_MILLISECOND: Final = 1
_INTERVAL_MONTH_DAY_NANO: Final = 2
_UNION_SPARSE: Final = 0
_UNION_DENSE: Final = 1

# Table slot numbers (field ids) and slot counts.
_SCHEMA_NSLOTS: Final = 4
_SCHEMA_ENDIANNESS: Final = 0
_SCHEMA_FIELDS: Final = 1
_SCHEMA_CUSTOM_METADATA: Final = 2

_FIELD_NSLOTS: Final = 7
_FIELD_NAME: Final = 0
_FIELD_NULLABLE: Final = 1
_FIELD_TYPE_TYPE: Final = 2
_FIELD_TYPE: Final = 3
_FIELD_DICTIONARY: Final = 4
_FIELD_CHILDREN: Final = 5
_FIELD_CUSTOM_METADATA: Final = 6

_KV_KEY: Final = 0
_KV_VALUE: Final = 1

# Nesting deeper than this is rejected (keeps recursion bounded; real schemas are shallow).
_MAX_DEPTH: Final = 64

_DECODE_PYARROW_ERRORS: Final = (pa.ArrowException, ValueError, TypeError, OverflowError)


# --- Encoding ------------------------------------------------------------------------------


def encode_arrow_schema(schema: pa.Schema) -> bytes:
    """Encode ``schema`` as the bare Arrow ``Schema`` FlatBuffer arrow-rs 48 writes.

    The result is byte-identical to ``arrow_ipc::convert::schema_to_fb(schema)`` (as stored by
    kamu in ``SetDataSchema.schema``) for schemas without custom metadata; metadata pairs are
    written sorted by key (see the module docstring).

    Raises:
        UnsupportedArrowType: the schema contains a type arrow-rs 48 / this codec cannot write
            (dictionary, view, run-end-encoded, Decimal32/64, extension types, ...).
        EncodeError: a metadata key or value is not valid UTF-8, or a name cannot be encoded.
        TypeError: ``schema`` is not a :class:`pyarrow.Schema`.
    """
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"expected pyarrow.Schema, got {type(schema).__name__}")
    builder = flatbuffers.Builder(1024)
    field_offsets = [_build_field(builder, field, 0) for field in schema]
    fields_vector = _offsets_vector(builder, field_offsets)
    metadata_vector = _metadata_vector(builder, schema.metadata) if schema.metadata else None

    builder.StartObject(_SCHEMA_NSLOTS)
    builder.PrependUOffsetTRelativeSlot(_SCHEMA_FIELDS, fields_vector, 0)
    if metadata_vector is not None:
        builder.PrependUOffsetTRelativeSlot(_SCHEMA_CUSTOM_METADATA, metadata_vector, 0)
    root: int = builder.EndObject()
    builder.Finish(root)
    return bytes(builder.Output())


def _utf8(value: str | bytes, what: str) -> bytes:
    """Return ``value`` as UTF-8 bytes, rejecting what arrow-rs's ``String`` could not hold."""
    try:
        if isinstance(value, bytes):
            value.decode("utf-8")
            return value
        return value.encode("utf-8")
    except UnicodeError as exc:
        raise EncodeError(f"{what} is not valid UTF-8: {value!r}") from exc


def _offsets_vector(builder: flatbuffers.Builder, offsets: list[int]) -> int:
    """``create_vector`` of table offsets."""
    return _vector(builder, offsets, builder.PrependUOffsetTRelative)


def _int32_vector(builder: flatbuffers.Builder, values: list[int]) -> int:
    """``create_vector::<i32>``."""
    return _vector(builder, values, builder.PrependInt32)


def _vector(builder: flatbuffers.Builder, items: list[int], prepend: Callable[[int], None]) -> int:
    """A vector of 4-byte ``items``, each written by ``prepend``, last first (the builder
    grows downwards)."""
    builder.StartVector(4, len(items), 4)
    for item in reversed(items):
        prepend(item)
    result: int = builder.EndVector()
    return result


def _empty_table(builder: flatbuffers.Builder) -> int:
    builder.StartObject(0)
    result: int = builder.EndObject()
    return result


def _metadata_vector(builder: flatbuffers.Builder, metadata: Mapping[bytes, bytes]) -> int:
    """arrow-rs ``metadata_to_fb``: per pair key string, value string, KeyValue; then vector."""
    pairs = sorted(
        (_utf8(k, "metadata key"), _utf8(v, "metadata value")) for k, v in metadata.items()
    )
    offsets = []
    for key, value in pairs:
        key_offset = builder.CreateString(key)
        value_offset = builder.CreateString(value)
        builder.StartObject(2)
        builder.PrependUOffsetTRelativeSlot(_KV_KEY, key_offset, 0)
        builder.PrependUOffsetTRelativeSlot(_KV_VALUE, value_offset, 0)
        offsets.append(builder.EndObject())
    return _offsets_vector(builder, offsets)


def _build_field(builder: flatbuffers.Builder, field: pa.Field, depth: int) -> int:
    """arrow-rs ``build_field``: metadata, name, type objects, then the Field table."""
    if depth > _MAX_DEPTH:
        raise UnsupportedArrowType(f"type nesting deeper than {_MAX_DEPTH} levels")
    metadata_vector = _metadata_vector(builder, field.metadata) if field.metadata else None
    name_offset = builder.CreateString(_utf8(field.name, "field name"))
    type_code, type_offset, children_offset = _build_type(builder, field.type, depth)

    builder.StartObject(_FIELD_NSLOTS)
    builder.PrependUOffsetTRelativeSlot(_FIELD_NAME, name_offset, 0)
    builder.PrependUint8Slot(_FIELD_TYPE_TYPE, type_code, 0)
    builder.PrependBoolSlot(_FIELD_NULLABLE, bool(field.nullable), False)
    builder.PrependUOffsetTRelativeSlot(_FIELD_CHILDREN, children_offset, 0)
    builder.PrependUOffsetTRelativeSlot(_FIELD_TYPE, type_offset, 0)
    if metadata_vector is not None:
        builder.PrependUOffsetTRelativeSlot(_FIELD_CUSTOM_METADATA, metadata_vector, 0)
    result: int = builder.EndObject()
    return result


# Parameterless types whose type table is empty; arrow-rs builds the table, then the empty
# children vector.
_EMPTY_TABLE_TYPES: Final[dict[pa.DataType, int]] = {
    pa.null(): _T_NULL,
    pa.bool_(): _T_BOOL,
    pa.binary(): _T_BINARY,
    pa.large_binary(): _T_LARGE_BINARY,
    pa.string(): _T_UTF8,
    pa.large_string(): _T_LARGE_UTF8,
}
_EMPTY_TABLE_TYPE_OF: Final[dict[int, pa.DataType]] = {
    code: t for t, code in _EMPTY_TABLE_TYPES.items()
}

# Integer types: (bit width, signed).
_INT_TYPES: Final[dict[pa.DataType, tuple[int, bool]]] = {
    pa.int8(): (8, True),
    pa.int16(): (16, True),
    pa.int32(): (32, True),
    pa.int64(): (64, True),
    pa.uint8(): (8, False),
    pa.uint16(): (16, False),
    pa.uint32(): (32, False),
    pa.uint64(): (64, False),
}

_FLOAT_TYPES: Final[dict[pa.DataType, int]] = {
    pa.float16(): _PRECISION_HALF,
    pa.float32(): _PRECISION_SINGLE,
    pa.float64(): _PRECISION_DOUBLE,
}

# Time32/Time64: unit string -> (bit width, TimeUnit code).
_TIME_TYPES: Final[dict[str, tuple[int, int]]] = {
    "s": (32, 0),
    "ms": (32, 1),
    "us": (64, 2),
    "ns": (64, 3),
}


def _build_type(
    builder: flatbuffers.Builder, data_type: pa.DataType, depth: int
) -> tuple[int, int, int]:
    """arrow-rs ``get_fb_field_type``: returns (type code, type table offset, children vector).

    The order of builder calls is per type exactly as in arrow-rs 48; see the module docstring.
    """

    def empty_children() -> int:
        return _offsets_vector(builder, [])

    def then_children(code: int, table: int) -> tuple[int, int, int]:
        # Type table first, then the (empty) children vector.
        return code, table, empty_children()

    def scalar_table(slots: Iterable[tuple[Callable[[int, Any, Any], None], int, Any, Any]]) -> int:
        builder.StartObject(3)
        for prepend, slot, value, default in slots:
            prepend(slot, value, default)
        result: int = builder.EndObject()
        return result

    if isinstance(data_type, pa.BaseExtensionType):
        raise UnsupportedArrowType(f"extension type {data_type} is not supported")

    simple = _EMPTY_TABLE_TYPES.get(data_type)
    if simple is not None:
        return then_children(simple, _empty_table(builder))

    int_type = _INT_TYPES.get(data_type)
    if int_type is not None:
        bit_width, signed = int_type
        children = empty_children()
        table = scalar_table(
            [
                (builder.PrependBoolSlot, 1, signed, False),  # is_signed
                (builder.PrependInt32Slot, 0, bit_width, 0),  # bitWidth
            ]
        )
        return _T_INT, table, children

    precision = _FLOAT_TYPES.get(data_type)
    if precision is not None:
        children = empty_children()
        table = scalar_table([(builder.PrependInt16Slot, 0, precision, _PRECISION_HALF)])
        return _T_FLOATING_POINT, table, children

    if isinstance(data_type, pa.Decimal128Type | pa.Decimal256Type):
        bit_width = 128 if isinstance(data_type, pa.Decimal128Type) else 256
        scale = int(data_type.scale)
        if not -128 <= scale <= 127:
            raise UnsupportedArrowType(f"{data_type}: arrow-rs decimal scale must fit in i8")
        table = scalar_table(
            [
                (builder.PrependInt32Slot, 0, int(data_type.precision), 0),
                (builder.PrependInt32Slot, 1, scale, 0),
                (builder.PrependInt32Slot, 2, bit_width, 128),
            ]
        )
        return then_children(_T_DECIMAL, table)

    if type(data_type) is pa.FixedSizeBinaryType:  # not its Decimal subclasses
        table = scalar_table([(builder.PrependInt32Slot, 0, int(data_type.byte_width), 0)])
        return then_children(_T_FIXED_SIZE_BINARY, table)

    if data_type in (pa.date32(), pa.date64()):
        unit = _DATE_DAY if data_type == pa.date32() else _DATE_MILLISECOND
        table = scalar_table([(builder.PrependInt16Slot, 0, unit, _DATE_MILLISECOND)])
        return then_children(_T_DATE, table)

    if isinstance(data_type, pa.Time32Type | pa.Time64Type):
        bit_width, unit = _TIME_TYPES[data_type.unit]
        table = scalar_table(
            [
                (builder.PrependInt32Slot, 1, bit_width, 32),  # bitWidth
                (builder.PrependInt16Slot, 0, unit, _TIME_MILLISECOND),  # unit
            ]
        )
        return then_children(_T_TIME, table)

    if isinstance(data_type, pa.TimestampType):
        tz = data_type.tz or ""
        tz_offset = builder.CreateString(_utf8(tz, "timezone"))  # always created, even if empty
        builder.StartObject(2)
        builder.PrependInt16Slot(0, _TIME_UNITS.index(data_type.unit), 0)
        if tz:
            builder.PrependUOffsetTRelativeSlot(1, tz_offset, 0)
        table = builder.EndObject()
        return then_children(_T_TIMESTAMP, table)

    if isinstance(data_type, pa.DurationType):
        unit = _TIME_UNITS.index(data_type.unit)
        table = scalar_table([(builder.PrependInt16Slot, 0, unit, _TIME_MILLISECOND)])
        return then_children(_T_DURATION, table)

    if data_type == pa.month_day_nano_interval():
        table = scalar_table([(builder.PrependInt16Slot, 0, _INTERVAL_MONTH_DAY_NANO, 0)])
        return then_children(_T_INTERVAL, table)

    if isinstance(data_type, pa.ListType | pa.LargeListType):
        child = _build_field(builder, data_type.value_field, depth + 1)
        code = _T_LIST if isinstance(data_type, pa.ListType) else _T_LARGE_LIST
        return code, _empty_table(builder), _offsets_vector(builder, [child])

    if isinstance(data_type, pa.FixedSizeListType):
        child = _build_field(builder, data_type.value_field, depth + 1)
        table = scalar_table([(builder.PrependInt32Slot, 0, int(data_type.list_size), 0)])
        return _T_FIXED_SIZE_LIST, table, _offsets_vector(builder, [child])

    if isinstance(data_type, pa.StructType):
        members = _build_members(builder, data_type, depth)
        return _T_STRUCT, _empty_table(builder), _offsets_vector(builder, members)

    if isinstance(data_type, pa.MapType):
        child = _build_field(builder, data_type.field(0), depth + 1)
        table = scalar_table([(builder.PrependBoolSlot, 0, bool(data_type.keys_sorted), False)])
        return _T_MAP, table, _offsets_vector(builder, [child])

    if isinstance(data_type, pa.UnionType):
        members = _build_members(builder, data_type, depth)
        type_ids = _int32_vector(builder, [int(code) for code in data_type.type_codes])
        mode = _UNION_DENSE if data_type.mode == "dense" else _UNION_SPARSE
        builder.StartObject(2)
        builder.PrependInt16Slot(0, mode, _UNION_SPARSE)
        builder.PrependUOffsetTRelativeSlot(1, type_ids, 0)
        table = builder.EndObject()
        return _T_UNION, table, _offsets_vector(builder, members)

    raise UnsupportedArrowType(f"Arrow type {data_type} cannot be written as an ODF schema")


def _build_members(builder: flatbuffers.Builder, data_type: pa.DataType, depth: int) -> list[int]:
    """Build the child fields of a struct or union, in order."""
    return [
        _build_field(builder, data_type.field(i), depth + 1) for i in range(data_type.num_fields)
    ]


# --- Decoding ------------------------------------------------------------------------------


class _FlatBufferReader:
    """Bounds-checked access to a FlatBuffer, with a budget against shared offsets and cycles.

    Every object read is charged the bytes it must occupy on its own in a buffer where nothing is
    shared: a table 4 (its vtable offset; vtables are shared legitimately), a vector 4 plus its
    elements, a string 4 plus its bytes. A builder never lets two objects overlap, so an honest
    buffer costs at most its size, and the budget is exactly that: whatever the offsets, decoding
    reads and builds no more than the buffer holds (the same rule as the block decoder,
    ``coordinator/metadata/flatbuffers_serde.py``).
    """

    __slots__ = ("budget", "data", "size")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.budget = len(data)

    def spend(self, units: int) -> None:
        self.budget -= units
        if self.budget < 0:
            raise DecodeError(
                "Arrow schema: shared offsets make the buffer decode to more than its own size "
                f"({self.size} bytes)"
            )

    def unpack(self, fmt: str, pos: int, size: int) -> int:
        if pos < 0 or pos + size > self.size:
            raise DecodeError(f"Arrow schema: read of {size} bytes at {pos} is out of bounds")
        value: int = struct.unpack_from(fmt, self.data, pos)[0]
        return value

    def u8(self, pos: int) -> int:
        return self.unpack("<B", pos, 1)

    def i16(self, pos: int) -> int:
        return self.unpack("<h", pos, 2)

    def u16(self, pos: int) -> int:
        return self.unpack("<H", pos, 2)

    def i32(self, pos: int) -> int:
        return self.unpack("<i", pos, 4)

    def u32(self, pos: int) -> int:
        return self.unpack("<I", pos, 4)

    def deref(self, pos: int) -> int:
        """Follow the uoffset stored at ``pos``."""
        target = pos + self.u32(pos)
        if target + 4 > self.size:
            raise DecodeError(f"Arrow schema: offset at {pos} points outside the buffer")
        return target

    def table(self, pos: int) -> _Table:
        return _Table(self, pos)

    def vector(self, pos: int, elem_size: int) -> tuple[int, int]:
        """Return (first element position, count) of the vector at ``pos``."""
        count = self.u32(pos)
        start = pos + 4
        if start + count * elem_size > self.size:
            raise DecodeError(f"Arrow schema: vector at {pos} overruns the buffer")
        self.spend(4 + count * elem_size)
        return start, count

    def string(self, pos: int) -> str:
        start, length = self.vector(pos, 1)
        try:
            # Decoded straight from the buffer: a long name costs no transient copy.
            with memoryview(self.data) as view:
                return str(view[start : start + length], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"Arrow schema: string at {pos} is not valid UTF-8") from exc


class _Table:
    """A table: its position plus its validated vtable."""

    __slots__ = ("object_len", "pos", "reader", "vtable", "vtable_len")

    def __init__(self, reader: _FlatBufferReader, pos: int) -> None:
        reader.spend(4)
        self.reader = reader
        self.pos = pos
        self.vtable = pos - reader.i32(pos)
        self.vtable_len = reader.u16(self.vtable)
        self.object_len = reader.u16(self.vtable + 2)
        if (
            self.vtable_len < 4
            or self.vtable_len % 2
            or self.vtable + self.vtable_len > reader.size
        ):
            raise DecodeError(f"Arrow schema: bad vtable for table at {pos}")
        if self.object_len < 4 or pos + self.object_len > reader.size:
            raise DecodeError(f"Arrow schema: bad object length for table at {pos}")

    def field(self, slot: int, size: int) -> int | None:
        """Absolute position of ``slot``'s value, or None when the slot is absent."""
        entry = 4 + 2 * slot
        if entry >= self.vtable_len:
            return None
        offset = self.reader.u16(self.vtable + entry)
        if offset == 0:
            return None
        if offset < 4 or offset + size > self.object_len:
            raise DecodeError(f"Arrow schema: slot {slot} of table at {self.pos} overruns it")
        return self.pos + offset

    def bool_(self, slot: int, default: bool = False) -> bool:
        pos = self.field(slot, 1)
        return default if pos is None else self.reader.u8(pos) != 0

    def u8(self, slot: int, default: int = 0) -> int:
        pos = self.field(slot, 1)
        return default if pos is None else self.reader.u8(pos)

    def i16(self, slot: int, default: int = 0) -> int:
        pos = self.field(slot, 2)
        return default if pos is None else self.reader.i16(pos)

    def i32(self, slot: int, default: int = 0) -> int:
        pos = self.field(slot, 4)
        return default if pos is None else self.reader.i32(pos)

    def ref(self, slot: int) -> int | None:
        pos = self.field(slot, 4)
        return None if pos is None else self.reader.deref(pos)

    def table(self, slot: int) -> _Table | None:
        pos = self.ref(slot)
        return None if pos is None else self.reader.table(pos)

    def string(self, slot: int) -> str | None:
        pos = self.ref(slot)
        return None if pos is None else self.reader.string(pos)

    def tables(self, slot: int) -> Iterator[_Table] | None:
        """The tables of a vector, read one at a time as they are consumed (``None``: absent).

        Lazily, so that the budget stops a hostile vector at the first object past it rather
        than after a view of every element was built.
        """
        pos = self.ref(slot)
        if pos is None:
            return None
        start, count = self.reader.vector(pos, 4)
        reader = self.reader
        return (reader.table(reader.deref(start + 4 * i)) for i in range(count))

    def int32s(self, slot: int) -> list[int] | None:
        pos = self.ref(slot)
        if pos is None:
            return None
        start, count = self.reader.vector(pos, 4)
        return [self.reader.i32(start + 4 * i) for i in range(count)]


def decode_arrow_schema(data: bytes | bytearray | memoryview) -> pa.Schema:
    """Decode a bare Arrow ``Schema`` FlatBuffer (``SetDataSchema.schema``) into a pyarrow schema.

    Accepts any valid ``org.apache.arrow.flatbuf.Schema`` root buffer, whatever builder order
    produced it. For buffers written by arrow-rs (kamu), ``encode_arrow_schema`` of the result
    reproduces the input bytes exactly (metadata order aside).

    Raises:
        DecodeError: the bytes are not a well-formed Schema FlatBuffer, or they describe a type
            this codec does not support (dictionary encoding, run-end encoding, view types,
            YearMonth/DayTime intervals, big-endian schemas, ...).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"Arrow schema must be bytes, got {type(data).__name__}")
    reader = _FlatBufferReader(bytes(data))
    if reader.size < 8:
        raise DecodeError(f"Arrow schema: buffer of {reader.size} bytes is too short")
    root = reader.table(reader.deref(0))
    if root.i16(_SCHEMA_ENDIANNESS) != 0:
        raise DecodeError("Arrow schema: big-endian schemas are not supported")
    field_tables = root.tables(_SCHEMA_FIELDS)
    if field_tables is None:
        raise DecodeError("Arrow schema: Schema.fields is missing")
    fields = [_decode_field(table, 0) for table in field_tables]
    metadata = _decode_metadata(root.tables(_SCHEMA_CUSTOM_METADATA))
    try:
        return pa.schema(fields, metadata=metadata)
    except _DECODE_PYARROW_ERRORS as exc:
        raise DecodeError(f"Arrow schema: {exc}") from exc


def _decode_metadata(pairs: Iterator[_Table] | None) -> dict[str, str] | None:
    """Custom metadata; like arrow-rs, pairs missing a key or value are skipped, last wins."""
    if pairs is None:
        return None
    metadata: dict[str, str] = {}
    for pair in pairs:
        key = pair.string(_KV_KEY)
        value = pair.string(_KV_VALUE)
        if key is not None and value is not None:
            metadata[key] = value
    return metadata or None


def _decode_field(table: _Table, depth: int) -> pa.Field:
    if depth > _MAX_DEPTH:
        raise DecodeError(f"Arrow schema: type nesting deeper than {_MAX_DEPTH} levels")
    name = table.string(_FIELD_NAME) or ""
    if table.ref(_FIELD_DICTIONARY) is not None:
        raise DecodeError(f"Arrow schema: field {name!r} is dictionary-encoded (unsupported)")
    data_type = _decode_type(table, name, depth)
    metadata = _decode_metadata(table.tables(_FIELD_CUSTOM_METADATA))
    try:
        return pa.field(name, data_type, nullable=table.bool_(_FIELD_NULLABLE), metadata=metadata)
    except _DECODE_PYARROW_ERRORS as exc:
        raise DecodeError(f"Arrow schema: field {name!r}: {exc}") from exc


def _decode_type(field: _Table, name: str, depth: int) -> pa.DataType:
    code = field.u8(_FIELD_TYPE_TYPE)
    type_table = field.table(_FIELD_TYPE)

    def params() -> _Table:
        if type_table is None:
            raise DecodeError(f"Arrow schema: field {name!r} lacks its type table")
        return type_table

    def children() -> list[pa.Field]:
        return [_decode_field(child, depth + 1) for child in field.tables(_FIELD_CHILDREN) or []]

    def single_child(kind: str) -> pa.Field:
        kids = children()
        if len(kids) != 1:
            raise DecodeError(f"Arrow schema: {kind} field {name!r} must have exactly one child")
        return kids[0]

    def bad(what: str) -> DecodeError:
        return DecodeError(f"Arrow schema: field {name!r}: {what}")

    try:
        plain = _EMPTY_TABLE_TYPE_OF.get(code)
        if plain is not None:
            return plain
        if code == _T_INT:
            bits, signed = params().i32(0), params().bool_(1)
            for int_type, int_params in _INT_TYPES.items():
                if (bits, signed) == int_params:
                    return int_type
            raise bad(f"unsupported Int(bitWidth={bits}, is_signed={signed})")
        if code == _T_FLOATING_POINT:
            precision = params().i16(0, _PRECISION_HALF)
            for float_type, float_precision in _FLOAT_TYPES.items():
                if precision == float_precision:
                    return float_type
            raise bad(f"unsupported FloatingPoint precision {precision}")
        if code == _T_DECIMAL:
            table = params()
            precision, scale, bits = table.i32(0), table.i32(1), table.i32(2, 128)
            if not (0 <= precision <= 255 and -128 <= scale <= 127):
                raise bad(f"decimal precision/scale out of range ({precision}, {scale})")
            if bits == 128:
                return pa.decimal128(precision, scale)
            if bits == 256:
                return pa.decimal256(precision, scale)
            raise bad(f"unsupported Decimal bitWidth {bits}")
        if code == _T_FIXED_SIZE_BINARY:
            width = params().i32(0)
            if width < 0:
                raise bad(f"negative FixedSizeBinary width {width}")
            return pa.binary(width)
        if code == _T_DATE:
            unit = params().i16(0, _DATE_MILLISECOND)
            if unit == _DATE_DAY:
                return pa.date32()
            if unit == _DATE_MILLISECOND:
                return pa.date64()
            raise bad(f"unsupported Date unit {unit}")
        if code == _T_TIME:
            unit, bits = params().i16(0, _TIME_MILLISECOND), params().i32(1, 32)
            for unit_name, time_type in _TIME_TYPES.items():
                if time_type == (bits, unit):
                    return pa.time32(unit_name) if bits == 32 else pa.time64(unit_name)
            raise bad(f"unsupported Time(unit={unit}, bitWidth={bits})")
        if code == _T_TIMESTAMP:
            unit = params().i16(0, 0)
            if not 0 <= unit < len(_TIME_UNITS):
                raise bad(f"unsupported Timestamp unit {unit}")
            return pa.timestamp(_TIME_UNITS[unit], tz=params().string(1) or None)
        if code == _T_DURATION:
            unit = params().i16(0, _TIME_MILLISECOND)
            if not 0 <= unit < len(_TIME_UNITS):
                raise bad(f"unsupported Duration unit {unit}")
            return pa.duration(_TIME_UNITS[unit])
        if code == _T_INTERVAL:
            unit = params().i16(0, 0)
            if unit == _INTERVAL_MONTH_DAY_NANO:
                return pa.month_day_nano_interval()
            raise bad(f"unsupported Interval unit {unit} (only MONTH_DAY_NANO)")
        if code == _T_LIST:
            return pa.list_(single_child("List"))
        if code == _T_LARGE_LIST:
            return pa.large_list(single_child("LargeList"))
        if code == _T_FIXED_SIZE_LIST:
            size = params().i32(0)
            if size < 0:
                raise bad(f"negative FixedSizeList size {size}")
            return pa.list_(single_child("FixedSizeList"), size)
        if code == _T_STRUCT:
            return pa.struct(children())
        if code == _T_MAP:
            return _decode_map(single_child("Map"), params().bool_(0), bad)
        if code == _T_UNION:
            table = params()
            mode = table.i16(0, _UNION_SPARSE)
            kids = children()
            type_ids = table.int32s(1)
            if type_ids is None:
                type_ids = list(range(len(kids)))
            if len(type_ids) != len(kids):
                raise bad("Union typeIds and children differ in length")
            if mode == _UNION_SPARSE:
                return pa.sparse_union(kids, type_codes=type_ids)
            if mode == _UNION_DENSE:
                return pa.dense_union(kids, type_codes=type_ids)
            raise bad(f"unsupported Union mode {mode}")
    except _DECODE_PYARROW_ERRORS as exc:
        raise bad(str(exc)) from exc
    raise bad(f"unsupported Arrow type code {code}")


def _decode_map(
    entries: pa.Field, keys_sorted: bool, bad: Callable[[str], DecodeError]
) -> pa.DataType:
    """Map(entries: Struct<key, value>); pyarrow fixes the entries field's name and nullability."""
    entries_type = entries.type
    if (
        not isinstance(entries_type, pa.StructType)
        or entries_type.num_fields != 2
        or entries.name != "entries"
        or entries.nullable
        or entries.metadata
    ):
        raise bad("Map entries must be a non-null, metadata-free struct 'entries' of 2 fields")
    key_field, item_field = entries_type.field(0), entries_type.field(1)
    if key_field.nullable:
        raise bad("Map keys must not be nullable")
    return pa.map_(key_field, item_field, keys_sorted=keys_sorted)
