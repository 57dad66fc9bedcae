"""ODF schema (RFC-016, spec v0.37) <-> Arrow schema, exactly as kamu converts them.

A port of kamu-cli ``src/odf/metadata/src/data/arrow_conversions.rs`` (``DataSchema::to_arrow``,
``DataSchema::new_from_arrow``, ``strip_encoding``), ``arrow_encoding.rs`` (the
``arrow.apache.org/*Encoding`` extra attributes) and ``dtos/dtos_extra.rs``
(``SetDataSchema::upgrade`` / ``schema_as_arrow``):

* ODF types are *logical*: every type is NOT NULL unless wrapped in ``Option``; how Arrow lays
  the values out (``Utf8`` vs ``LargeUtf8`` vs ``Utf8View``, ``Date32`` vs ``Date64``, the
  decimal width) lives in the field's ``extra`` attributes, or, absent those, in
  :class:`ToArrowSettings` (defaults: ``Utf8``, ``Binary``, ``List``, ``Date32``, the
  narrowest of ``Decimal128``/``Decimal256``).
* Defaults of the types: ``Timestamp`` is milliseconds in ``UTC``; ``Time`` and ``Duration``
  are milliseconds.
* :func:`upgrade` turns a spec v0.34 ``SetDataSchema`` (Arrow bytes) into an ODF schema the way
  kamu does: Arrow -> ODF, then every encoding stripped (older kamu wrote the engine's output
  schema, view types included; the ODF schema keeps logical types only).

Conversions that kamu refuses (intervals, unions, dictionaries, unknown encodings) raise
:class:`~coordinator.errors.UnsupportedOdfSchema`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Final

import pyarrow as pa

from coordinator.errors import UnsupportedOdfSchema
from coordinator.metadata import model as m

KEY_BUFFER_ENCODING: Final = "arrow.apache.org/bufferEncoding"
KEY_DATE_ENCODING: Final = "arrow.apache.org/dateEncoding"
KEY_DECIMAL_ENCODING: Final = "arrow.apache.org/decimalEncoding"
#: The extra attributes :func:`strip_encoding` removes (kamu ``ArrowEncoding::KEYS``).
ENCODING_KEYS: Final = (KEY_BUFFER_ENCODING, KEY_DATE_ENCODING, KEY_DECIMAL_ENCODING)

#: kamu ``ArrowDecimalEncoding::MAX_PRECISION_128`` (39, one more than Arrow allows).
_MAX_PRECISION_128: Final = 39
_MAX_PRECISION_256: Final = 77

_UNIT: Final = {
    m.TimeUnit.SECOND: "s",
    m.TimeUnit.MILLISECOND: "ms",
    m.TimeUnit.MICROSECOND: "us",
    m.TimeUnit.NANOSECOND: "ns",
}
_UNIT_OF: Final = {v: k for k, v in _UNIT.items()}


@dataclass(frozen=True, slots=True)
class BufferEncoding:
    """``arrow.apache.org/bufferEncoding``: ``kind`` Contiguous / View / RunEnd."""

    kind: str
    bit_width: int | None = None


@dataclass(frozen=True, slots=True)
class ArrowEncoding:
    """The Arrow layout hints of one field (kamu ``ArrowEncoding``)."""

    buffer: BufferEncoding | None = None
    date_unit: str | None = None  # "Day" | "Millisecond"
    decimal_bit_width: int | None = None

    @property
    def is_empty(self) -> bool:
        """No hint at all (kamu treats it like an absent encoding)."""
        return self.buffer is None and self.date_unit is None and self.decimal_bit_width is None


@dataclass(frozen=True, slots=True)
class ToArrowSettings:
    """Encodings used when a field has none (kamu ``ToArrowSettings``; default: none)."""

    default_binary_encoding: BufferEncoding | None = None
    default_string_encoding: BufferEncoding | None = None
    default_list_encoding: BufferEncoding | None = None
    default_date_unit: str | None = None


# ---------------------------------------------------------------------------------------------
# Extra attributes <-> encodings

_BUFFER_KINDS: Final = {
    "Contiguous": "Contiguous",
    "contiguous": "Contiguous",
    "View": "View",
    "view": "View",
    "RunEnd": "RunEnd",
    "runEnd": "RunEnd",
    "runend": "RunEnd",
}
_DATE_UNITS: Final = {"Day": "Day", "day": "Day", "Millisecond": "Millisecond"}
_DATE_UNITS["millisecond"] = "Millisecond"


def _bad(what: str) -> UnsupportedOdfSchema:
    return UnsupportedOdfSchema(f"Invalid encoding: {what}")


def _opt_u32(obj: dict[str, Any], key: str) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 32:
        raise _bad(f"{key} must be a u32, got {v!r}")
    return v


def encoding_of(extra: m.ExtraAttributes | None) -> ArrowEncoding | None:
    """The Arrow encoding carried by ``extra`` (None when it has none of the keys).

    Raises:
        UnsupportedOdfSchema: a malformed encoding attribute (kamu refuses it too).
    """
    if extra is None:
        return None
    try:
        entries = extra.as_dict()
    except ValueError as e:
        raise _bad(str(e)) from e
    if not any(k in entries for k in ENCODING_KEYS):
        return None
    buffer = None
    if (raw := entries.get(KEY_BUFFER_ENCODING)) is not None:
        if not isinstance(raw, dict) or raw.get("kind") not in _BUFFER_KINDS:
            raise _bad(f"{KEY_BUFFER_ENCODING}: {raw!r}")
        kind = _BUFFER_KINDS[raw["kind"]]
        key = "runEndsBitWidth" if kind == "RunEnd" else "offsetBitWidth"
        if set(raw) - {"kind", key}:
            raise _bad(f"{KEY_BUFFER_ENCODING}: unknown fields in {raw!r}")
        if kind == "Contiguous" and key not in raw:
            raise _bad(f"{KEY_BUFFER_ENCODING}: missing field {key}")
        buffer = BufferEncoding(kind, _opt_u32(raw, key))
    date_unit = None
    if (raw := entries.get(KEY_DATE_ENCODING)) is not None:
        if not isinstance(raw, dict) or set(raw) != {"unit"} or raw["unit"] not in _DATE_UNITS:
            raise _bad(f"{KEY_DATE_ENCODING}: {raw!r}")
        date_unit = _DATE_UNITS[raw["unit"]]
    decimal = None
    if (raw := entries.get(KEY_DECIMAL_ENCODING)) is not None:
        if not isinstance(raw, dict) or set(raw) != {"bitWidth"}:
            raise _bad(f"{KEY_DECIMAL_ENCODING}: {raw!r}")
        decimal = _opt_u32(raw, "bitWidth")
    return ArrowEncoding(buffer, date_unit, decimal)


def _encoding_entries(enc: ArrowEncoding) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if enc.buffer is not None:
        key = "runEndsBitWidth" if enc.buffer.kind == "RunEnd" else "offsetBitWidth"
        body: dict[str, Any] = {"kind": enc.buffer.kind}
        if enc.buffer.bit_width is not None:
            body[key] = enc.buffer.bit_width
        out[KEY_BUFFER_ENCODING] = body
    if enc.date_unit is not None:
        out[KEY_DATE_ENCODING] = {"unit": enc.date_unit}
    if enc.decimal_bit_width is not None:
        out[KEY_DECIMAL_ENCODING] = {"bitWidth": enc.decimal_bit_width}
    return out


# ---------------------------------------------------------------------------------------------
# ODF -> Arrow


def to_arrow(schema: m.DataSchema, settings: ToArrowSettings | None = None) -> pa.Schema:
    """The Arrow schema of ``schema`` (kamu ``DataSchema::to_arrow``; no schema metadata).

    Raises:
        UnsupportedOdfSchema: a type/encoding combination kamu does not convert.
    """
    s = settings or ToArrowSettings()
    return pa.schema([field_to_arrow(f, s) for f in schema.fields])


def field_to_arrow(field: m.DataField, settings: ToArrowSettings | None = None) -> pa.Field:
    """One ODF field as an Arrow field (nullable iff its type is ``Option``)."""
    s = settings or ToArrowSettings()
    data_type, nullable = _type_to_arrow(field.type, encoding_of(field.extra), s)
    return pa.field(field.name, data_type, nullable)


def _unsupported(t: m.DataType, enc: ArrowEncoding | None) -> UnsupportedOdfSchema:
    return UnsupportedOdfSchema(f"Unsupported type and encoding combination: {t!r} {enc!r}")


def _default_encoding(t: m.DataType, s: ToArrowSettings) -> ArrowEncoding | None:
    if isinstance(t, m.DataTypeBinary):
        return ArrowEncoding(buffer=s.default_binary_encoding)
    if isinstance(t, m.DataTypeString):
        return ArrowEncoding(buffer=s.default_string_encoding)
    if isinstance(t, m.DataTypeDate):
        return ArrowEncoding(date_unit=s.default_date_unit)
    if isinstance(t, m.DataTypeList):
        return ArrowEncoding(buffer=s.default_list_encoding)
    return None


def _list_field(item: m.DataType, s: ToArrowSettings) -> pa.Field:
    item_type, nullable = _type_to_arrow(item, None, s)
    return pa.field("item", item_type, nullable)  # arrow-rs Field::new_list_field


def _type_to_arrow(
    t: m.DataType, enc: ArrowEncoding | None, s: ToArrowSettings
) -> tuple[pa.DataType, bool]:
    if isinstance(t, m.DataTypeOption):
        inner, nullable = _type_to_arrow(t.inner, enc, s)
        if nullable:
            raise UnsupportedOdfSchema(f"Nested Option types are not supported: {t!r}")
        return inner, True
    if enc is None:
        enc = _default_encoding(t, s)
    if enc is None or enc.is_empty:
        return _plain_to_arrow(t, s), False
    if enc.buffer is None and enc.date_unit is not None and enc.decimal_bit_width is None:
        if isinstance(t, m.DataTypeDate):
            return (pa.date32() if enc.date_unit == "Day" else pa.date64()), False
        raise _unsupported(t, enc)
    if enc.buffer is None and enc.date_unit is None and enc.decimal_bit_width is not None:
        if isinstance(t, m.DataTypeDecimal):
            p, sc = _decimal_args(t)
            ctor = {32: pa.decimal32, 64: pa.decimal64, 128: pa.decimal128, 256: pa.decimal256}
            if enc.decimal_bit_width not in ctor:
                raise _unsupported(t, enc)
            return ctor[enc.decimal_bit_width](p, sc), False
        raise _unsupported(t, enc)
    if enc.buffer is not None and enc.date_unit is None and enc.decimal_bit_width is None:
        b = enc.buffer
        narrow = b.bit_width in (None, 32)
        if isinstance(t, m.DataTypeBinary) and t.fixed_length is None:
            if b.kind == "Contiguous":
                if narrow or b.bit_width == 64:
                    return (pa.binary() if narrow else pa.large_binary()), False
            elif b.kind == "View" and narrow:
                return pa.binary_view(), False
        elif isinstance(t, m.DataTypeString):
            if b.kind == "Contiguous":
                if narrow or b.bit_width == 64:
                    return (pa.string() if narrow else pa.large_string()), False
            elif b.kind == "View" and narrow:
                return pa.string_view(), False
        elif isinstance(t, m.DataTypeList) and t.fixed_length is None:
            item = _list_field(t.item_type, s)
            if b.kind == "Contiguous" and (narrow or b.bit_width == 64):
                return (pa.list_(item) if narrow else pa.large_list(item)), False
            if b.kind == "View" and (narrow or b.bit_width == 64):
                return (pa.list_view(item) if narrow else pa.large_list_view(item)), False
        raise _unsupported(t, enc)
    raise _unsupported(t, enc)


def _decimal_args(t: m.DataTypeDecimal) -> tuple[int, int]:
    if not 0 <= t.precision <= 255 or not -128 <= t.scale <= 127:
        raise UnsupportedOdfSchema(f"decimal precision/scale out of range: {t!r}")
    return t.precision, t.scale


_SIMPLE: Final[dict[type, pa.DataType]] = {
    m.DataTypeBool: pa.bool_(),
    m.DataTypeDate: pa.date32(),
    m.DataTypeFloat16: pa.float16(),
    m.DataTypeFloat32: pa.float32(),
    m.DataTypeFloat64: pa.float64(),
    m.DataTypeInt8: pa.int8(),
    m.DataTypeInt16: pa.int16(),
    m.DataTypeInt32: pa.int32(),
    m.DataTypeInt64: pa.int64(),
    m.DataTypeUInt8: pa.uint8(),
    m.DataTypeUInt16: pa.uint16(),
    m.DataTypeUInt32: pa.uint32(),
    m.DataTypeUInt64: pa.uint64(),
    m.DataTypeNull: pa.null(),
    m.DataTypeString: pa.string(),
}


def _unit(u: m.TimeUnit | None) -> str:
    return _UNIT[m.TimeUnit.MILLISECOND if u is None else u]


def _plain_to_arrow(t: m.DataType, s: ToArrowSettings) -> pa.DataType:
    simple = _SIMPLE.get(type(t))
    if simple is not None:
        return simple
    if isinstance(t, m.DataTypeBinary):
        return pa.binary() if t.fixed_length is None else pa.binary(t.fixed_length)
    if isinstance(t, m.DataTypeDecimal):
        p, sc = _decimal_args(t)
        if p <= _MAX_PRECISION_128:
            return pa.decimal128(p, sc)
        if p <= _MAX_PRECISION_256:
            return pa.decimal256(p, sc)
        raise UnsupportedOdfSchema(
            "Arrow's largest decimal is 256-bit which is too small to represent precision of "
            f"{p} (maximum is {_MAX_PRECISION_256})"
        )
    if isinstance(t, m.DataTypeDuration):
        return pa.duration(_unit(t.unit))
    if isinstance(t, m.DataTypeList):
        item = _list_field(t.item_type, s)
        return pa.list_(item) if t.fixed_length is None else pa.list_(item, t.fixed_length)
    if isinstance(t, m.DataTypeMap):
        key, key_nullable = _type_to_arrow(t.key_type, None, s)
        value, value_nullable = _type_to_arrow(t.value_type, None, s)
        if key_nullable:
            raise UnsupportedOdfSchema("Arrow map keys cannot be nullable")
        return pa.map_(
            pa.field("keys", key, False),
            pa.field("values", value, value_nullable),
            keys_sorted=bool(t.keys_sorted),
        )
    if isinstance(t, m.DataTypeStruct):
        return pa.struct([field_to_arrow(f, s) for f in t.fields])
    if isinstance(t, m.DataTypeTime):
        unit = _unit(t.unit)
        return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    if isinstance(t, m.DataTypeTimestamp):
        return pa.timestamp(_unit(t.unit), "UTC" if t.timezone is None else t.timezone)
    raise _unsupported(t, None)  # pragma: no cover - every DataType is handled above


# ---------------------------------------------------------------------------------------------
# Arrow -> ODF


def from_arrow(schema: pa.Schema) -> m.DataSchema:
    """The ODF schema of an Arrow schema, encodings kept (kamu ``DataSchema::new_from_arrow``).

    Raises:
        UnsupportedOdfSchema: intervals, unions, dictionaries, or an encoded map key/value.
    """
    return m.DataSchema(fields=tuple(field_from_arrow(f) for f in schema))


def field_from_arrow(field: pa.Field) -> m.DataField:
    """One Arrow field as an ODF field (the encoding, if any, in ``extra``)."""
    odf_type, enc = _type_from_arrow(field.type, field.nullable)
    extra = m.ExtraAttributes.of(_encoding_entries(enc)) if enc is not None else None
    return m.DataField(name=field.name, type=odf_type, extra=extra)


def _buf(kind: str, width: int) -> ArrowEncoding:
    return ArrowEncoding(buffer=BufferEncoding(kind, width))


# Arrow's variable-size binary and string layouts: the ODF type and the buffer encoding (kind,
# offset width) that records the layout.
_BUFFER_LAYOUTS: Final[
    dict[pa.DataType, tuple[type[m.DataTypeBinary | m.DataTypeString], str, int]]
] = {
    pa.binary(): (m.DataTypeBinary, "Contiguous", 32),
    pa.large_binary(): (m.DataTypeBinary, "Contiguous", 64),
    pa.binary_view(): (m.DataTypeBinary, "View", 32),
    pa.string(): (m.DataTypeString, "Contiguous", 32),
    pa.large_string(): (m.DataTypeString, "Contiguous", 64),
    pa.string_view(): (m.DataTypeString, "View", 32),
}


def _type_from_arrow(t: pa.DataType, nullable: bool) -> tuple[m.DataType, ArrowEncoding | None]:
    odf, enc = _type_from_arrow_nn(t)
    return (m.DataTypeOption(inner=odf) if nullable else odf), enc


def _type_from_arrow_nn(t: pa.DataType) -> tuple[m.DataType, ArrowEncoding | None]:
    types = pa.types
    for arrow_type, cls in _SIMPLE.items():
        if t == cls and arrow_type is not m.DataTypeString and arrow_type is not m.DataTypeDate:
            return arrow_type(), None
    if types.is_timestamp(t):
        return m.DataTypeTimestamp(unit=_UNIT_OF[t.unit], timezone=t.tz), None
    if t == pa.date32():
        return m.DataTypeDate(), None
    if t == pa.date64():
        return m.DataTypeDate(), ArrowEncoding(date_unit="Millisecond")
    if types.is_time(t):
        return m.DataTypeTime(unit=_UNIT_OF[t.unit]), None
    if types.is_duration(t):
        return m.DataTypeDuration(unit=_UNIT_OF[t.unit]), None
    if types.is_interval(t):
        raise UnsupportedOdfSchema("Interval types are not yet supported in ODF schema")
    layout = _BUFFER_LAYOUTS.get(t)
    if layout is not None:
        odf_type, kind, width = layout
        return odf_type(), _buf(kind, width)
    if types.is_fixed_size_binary(t) and not types.is_decimal(t):
        return m.DataTypeBinary(fixed_length=t.byte_width), None
    if types.is_map(t):
        key, key_enc = _type_from_arrow(t.key_field.type, t.key_field.nullable)
        value, value_enc = _type_from_arrow(t.item_field.type, t.item_field.nullable)
        if key_enc is not None or value_enc is not None:
            raise UnsupportedOdfSchema("Map key/value types with custom encoding are not supported")
        return m.DataTypeMap(key_type=key, value_type=value, keys_sorted=t.keys_sorted), None
    # Inner encodings of list items are dropped, as kamu does (its TODO).
    if types.is_fixed_size_list(t):
        item, _ = _type_from_arrow(t.value_field.type, t.value_field.nullable)
        return m.DataTypeList(item_type=item, fixed_length=t.list_size), None
    for pred, kind, width in (
        (types.is_list, "Contiguous", 32),
        (types.is_large_list, "Contiguous", 64),
        (types.is_list_view, "View", 32),
        (types.is_large_list_view, "View", 64),
    ):
        if pred(t):
            item, _ = _type_from_arrow(t.value_field.type, t.value_field.nullable)
            return m.DataTypeList(item_type=item), _buf(kind, width)
    if types.is_struct(t):
        fields = tuple(field_from_arrow(t.field(i)) for i in range(t.num_fields))
        return m.DataTypeStruct(fields=fields), None
    if types.is_union(t):
        raise UnsupportedOdfSchema("Union types are not yet supported in ODF schema")
    if types.is_dictionary(t):
        raise UnsupportedOdfSchema("Dictionary types are not yet supported in ODF schema")
    if types.is_decimal(t):
        odf = m.DataTypeDecimal(precision=t.precision, scale=t.scale)
        return odf, ArrowEncoding(decimal_bit_width=t.bit_width)
    if types.is_run_end_encoded(t):
        ree_width = {pa.int32(): 32, pa.int64(): 64}.get(t.run_end_type)
        if ree_width is None:
            raise UnsupportedOdfSchema(f"Expected Int32/Int64 type for run ends but got: {t}")
        value, value_enc = _type_from_arrow(t.value_type, True)
        if value_enc is not None:
            raise UnsupportedOdfSchema("REE encoding of types with another layer of encoding")
        inner = value.inner if isinstance(value, m.DataTypeOption) else value
        return inner, ArrowEncoding(buffer=BufferEncoding("RunEnd", ree_width))
    raise UnsupportedOdfSchema(f"Arrow type {t} is not supported in ODF schema")


# ---------------------------------------------------------------------------------------------
# Encodings stripped, SetDataSchema


def strip_encoding(schema: m.DataSchema) -> m.DataSchema:
    """``schema`` with every known encoding attribute removed (kamu ``strip_encoding``).

    Other attributes stay; an ``extra`` left empty disappears. The schema's own ``extra``
    is kept as is.
    """
    return replace(schema, fields=tuple(_strip_field(f) for f in schema.fields))


def _strip_field(f: m.DataField) -> m.DataField:
    extra = f.extra
    if extra is not None:
        entries = {k: v for k, v in extra.as_dict().items() if k not in ENCODING_KEYS}
        extra = m.ExtraAttributes.of(entries) if entries else None
    return m.DataField(name=f.name, type=_strip_type(f.type), extra=extra)


def _strip_type(t: m.DataType) -> m.DataType:
    # kamu descends into Option and Struct only (list items carry no attributes).
    if isinstance(t, m.DataTypeOption):
        return m.DataTypeOption(inner=_strip_type(t.inner))
    if isinstance(t, m.DataTypeStruct):
        return m.DataTypeStruct(fields=tuple(_strip_field(f) for f in t.fields))
    return t


def plain_arrow_type(t: pa.DataType) -> pa.DataType:
    """``t`` with a view layout replaced by the classic one (``string_view`` -> ``string``,
    ``binary_view`` -> ``binary``); any other type unchanged.

    The Arrow-level counterpart of :func:`strip_encoding` (not a kamu function): the logical
    hash treats both layouts alike, and DataFusion's outputs and answers come as views, which
    odf-node writes and serves as classic columns (``engine/datafusion_engine.py``,
    ``node/transfer/flight_sql.py``).
    """
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    return t


def upgrade(event: m.SetDataSchema) -> m.DataSchema:
    """The ODF schema of a ``SetDataSchema`` of any version (kamu ``SetDataSchema::upgrade``).

    An ODF schema is returned as is; a v0.34 Arrow schema is converted and its encodings
    stripped (older kamu wrote the engine output's layout, e.g. view types).

    Raises:
        UnsupportedOdfSchema: the Arrow schema has types ODF cannot express, or the event
            carries no schema.
    """
    if event.schema is not None:
        return event.schema
    return strip_encoding(from_arrow(schema_as_arrow(event)))


def schema_as_arrow(event: m.SetDataSchema, settings: ToArrowSettings | None = None) -> pa.Schema:
    """The Arrow schema of a ``SetDataSchema`` (kamu ``SetDataSchema::schema_as_arrow``).

    The v0.34 Arrow bytes are decoded as they are; an ODF schema is converted with
    ``settings`` (kamu's engines and transform planner use the defaults).

    Raises:
        UnsupportedOdfSchema: no schema, or an ODF schema that has no Arrow form.
    """
    if event.raw_arrow_schema is not None:
        from coordinator.metadata.arrow_schema import decode_arrow_schema

        return decode_arrow_schema(event.raw_arrow_schema)
    if event.schema is not None:
        return to_arrow(event.schema, settings)
    raise UnsupportedOdfSchema("SetDataSchema carries neither an Arrow nor an ODF schema")


def new_set_data_schema(schema: pa.Schema) -> m.SetDataSchema:
    """A current-form ``SetDataSchema`` for an output Arrow ``schema``, as kamu writes it now.

    kamu's writer records ``DataSchema::new_from_arrow(..).strip_encoding()`` of the data it
    wrote.
    """
    return m.SetDataSchema(schema=strip_encoding(from_arrow(schema)))


def extra_json(extra: m.ExtraAttributes | None) -> dict[str, Any]:
    """The attributes of ``extra`` as a dict (empty when absent)."""
    return {} if extra is None else json.loads(extra.entries)


__all__ = [
    "ENCODING_KEYS",
    "ArrowEncoding",
    "BufferEncoding",
    "ToArrowSettings",
    "encoding_of",
    "extra_json",
    "field_from_arrow",
    "field_to_arrow",
    "from_arrow",
    "new_set_data_schema",
    "schema_as_arrow",
    "strip_encoding",
    "to_arrow",
    "upgrade",
]
