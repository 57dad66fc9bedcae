"""FlatBuffers encoding of ODF metadata blocks, byte-identical to kamu-cli.

kamu builds every table in two phases (docs/odf-wire-format.md, "Two-phase table building"):

1. *children*: walk the fields in declaration order and serialise every present variable-size
   field depth-first (strings, byte vectors, vectors, nested tables, union variants; each
   ``PrepStepWrapper`` immediately after its ``PrepStep`` variant);
2. *the table*: add the fields again in declaration order, skipping non-optional scalars equal
   to their default but always writing present ``= null`` scalars.

The ``Timestamp`` struct is written with 1-byte alignment in manifest version 2 (kamu <=
v0.264, spec v0.34 era) and 4-byte alignment in version 3. The outer ``Manifest`` wraps the
finished block buffer as a ``[ubyte]`` vector; the block hash covers the whole outer buffer.

Encoding is driven by field specs read off the model's dataclasses (one per schema table, fields
in declaration order), so the model, the encoder and the decoder cannot drift apart. Decoding uses
a small bounds-checked reader instead of generated accessors: it is faster and turns every
malformed input into :class:`InvalidBlock`. When ``make setup`` has built it, a compiled decoder
driven by the same specs (``native/odf_chain.c``, :mod:`coordinator.metadata.native_decode`)
decodes well-formed blocks first, ~30x faster, and leaves everything else to this one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum, IntEnum, auto
from typing import Any, Final, TypeVar

import flatbuffers

from coordinator.errors import (
    DecodeError,
    EncodeError,
    InvalidBlock,
    InvalidDatasetId,
    InvalidMultihash,
    UnsupportedBlockVersion,
)
from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata import model as m
from coordinator.metadata import native_decode
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multicodec, Multihash

#: Manifest version written by kamu-cli v0.153 - v0.264 (ODF spec v0.34 era).
BLOCK_VERSION_V2: Final = 2
#: Manifest version written by kamu-cli >= v0.265 (aligned Timestamp struct).
BLOCK_VERSION_V3: Final = 3
SUPPORTED_BLOCK_VERSIONS: Final = frozenset({BLOCK_VERSION_V2, BLOCK_VERSION_V3})
DEFAULT_BLOCK_VERSION: Final = BLOCK_VERSION_V2


@dataclass(frozen=True, slots=True)
class WriteForm:
    """How new blocks are written: the manifest version and the ``SetDataSchema`` form.

    ``v0.34`` (the default): manifest version 2 and Arrow bytes in ``SetDataSchema`` slot 0,
    which every kamu since v0.153 reads and whose hashes equal those of the kamu versions that
    speak spec v0.34. ``current``: what kamu-cli HEAD writes (spec v0.39): manifest version 3 and
    an ODF schema in slot 1, which kamu before spec v0.37 cannot read. Received blocks are never
    re-encoded either way. Set from the node's ``[metadata] write_version``.
    """

    name: str
    block_version: int
    odf_schema: bool


WRITE_FORMS: Final = {
    "v0.34": WriteForm("v0.34", BLOCK_VERSION_V2, odf_schema=False),
    "current": WriteForm("current", BLOCK_VERSION_V3, odf_schema=True),
}
_write_form: list[WriteForm] = [WRITE_FORMS["v0.34"]]


def write_form() -> WriteForm:
    """The process-wide form of newly written blocks (see :class:`WriteForm`)."""
    return _write_form[0]


def set_write_form(name: str, block_version: int | None = None) -> WriteForm:
    """Select the form of newly written blocks by name (``"v0.34"`` or ``"current"``).

    ``block_version`` overrides the manifest version of the ``v0.34`` form (3 gives kamu
    v0.265+ hashes with v0.34 content); ``current`` always writes 3, as kamu-cli HEAD does.

    Raises:
        EncodeError: an unknown name or block version.
    """
    form = WRITE_FORMS.get(name)
    if form is None:
        raise EncodeError(f"unknown write version {name!r}; expected one of: v0.34, current")
    if block_version is not None and form.name == "v0.34":
        if block_version not in SUPPORTED_BLOCK_VERSIONS:
            raise EncodeError(f"cannot write block version {block_version}; supported: 2, 3")
        form = WriteForm(form.name, block_version, odf_schema=False)
    _write_form[0] = form
    return form


_U64_MAX: Final = (1 << 64) - 1
_U32_MAX: Final = (1 << 32) - 1
_I32_MAX: Final = (1 << 31) - 1
_I32_MIN: Final = 1 << 31
_Decoded = TypeVar("_Decoded")


class _K(Enum):
    STR = auto()
    BYTES = auto()
    HASH = auto()
    DID = auto()
    STRS = auto()
    TABLE = auto()
    TABLES = auto()
    UNION = auto()
    PREP_VEC = auto()
    U64 = auto()
    U64_OPT = auto()
    BOOL_OPT = auto()
    ENUM = auto()
    ENUM_OPT = auto()
    ENUM16_OPT = auto()
    U32 = auto()
    I32 = auto()
    TS = auto()


_OFFSET_KINDS: Final = frozenset(
    {_K.STR, _K.BYTES, _K.HASH, _K.DID, _K.STRS, _K.TABLE, _K.TABLES, _K.PREP_VEC}
)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: _K
    required: bool
    slot: int
    arg: Any = None  # nested class, union name or enum class


@dataclass(frozen=True, slots=True)
class _TableSpec:
    cls: type
    fields: tuple[_Field, ...]
    num_slots: int


# Union members in type-code order (code = index + 1; 0 is NONE).
UNIONS: Final[dict[str, tuple[type, ...]]] = {
    "MetadataEvent": (
        m.AddData,
        m.ExecuteTransform,
        m.Seed,
        m.SetPollingSource,
        m.SetTransform,
        m.SetVocab,
        m.SetAttachments,
        m.SetInfo,
        m.SetLicense,
        m.SetDataSchema,
        m.AddPushSource,
        m.DisablePushSource,
        m.DisablePollingSource,
    ),
    "FetchStep": (
        m.FetchStepUrl,
        m.FetchStepFilesGlob,
        m.FetchStepContainer,
        m.FetchStepMqtt,
        m.FetchStepEthereumLogs,
    ),
    "PrepStep": (m.PrepStepDecompress, m.PrepStepPipe),
    "ReadStep": (
        m.ReadStepCsv,
        m.ReadStepGeoJson,
        m.ReadStepEsriShapefile,
        m.ReadStepParquet,
        m.ReadStepJson,
        m.ReadStepNdJson,
        m.ReadStepNdGeoJson,
    ),
    "Transform": (m.TransformSql,),
    "MergeStrategy": (
        m.MergeStrategyAppend,
        m.MergeStrategyLedger,
        m.MergeStrategySnapshot,
        m.MergeStrategyChangelogStream,
        m.MergeStrategyUpsertStream,
    ),
    "DataType": (
        m.DataTypeBinary,
        m.DataTypeBool,
        m.DataTypeDate,
        m.DataTypeDecimal,
        m.DataTypeDuration,
        m.DataTypeFloat16,
        m.DataTypeFloat32,
        m.DataTypeFloat64,
        m.DataTypeInt8,
        m.DataTypeInt16,
        m.DataTypeInt32,
        m.DataTypeInt64,
        m.DataTypeUInt8,
        m.DataTypeUInt16,
        m.DataTypeUInt32,
        m.DataTypeUInt64,
        m.DataTypeList,
        m.DataTypeMap,
        m.DataTypeNull,
        m.DataTypeOption,
        m.DataTypeStruct,
        m.DataTypeTime,
        m.DataTypeTimestamp,
        m.DataTypeString,
    ),
    "EventTimeSource": (
        m.EventTimeSourceFromMetadata,
        m.EventTimeSourceFromPath,
        m.EventTimeSourceFromSystemTime,
    ),
    "SourceCaching": (m.SourceCachingForever,),
    "Attachments": (m.AttachmentsEmbedded,),
}
_UNION_CODE: Final[dict[type, int]] = {
    cls: i + 1 for members in UNIONS.values() for i, cls in enumerate(members)
}

# The field specs are read off the model (:mod:`coordinator.metadata.model`): fields in
# declaration order, a field's kind from its annotation's text (the model's annotations are
# postponed, so ``dataclasses.fields`` gives them as written), ``X | None`` optional, and the
# tables those a ``MetadataBlock`` reaches. Only what an annotation cannot say is listed here.

#: Integer fields whose flatbuffers type is not the schema's usual ``uint64`` (``schemas/odf.fbs``).
_INT_KINDS: Final = {
    (m.FetchStepMqtt, "port"): _K.I32,
    (m.DataTypeDecimal, "precision"): _K.U32,
    (m.DataTypeDecimal, "scale"): _K.I32,
}
#: Enums the schema stores as ``int16`` (the others are ``int32``).
_ENUM16: Final = frozenset({m.TimeUnit})
_NAMED_KINDS: Final = {
    "str": _K.STR,
    "bytes": _K.BYTES,
    "Multihash": _K.HASH,
    "DatasetId": _K.DID,
    "Timestamp": _K.TS,
    "tuple[str, ...]": _K.STRS,
}


def _field_kind(cls: type, name: str, annotation: str) -> tuple[_K, Any]:
    """The kind of field ``name`` of ``cls`` and its ``_Field.arg``, from its annotation."""
    optional = annotation.endswith(" | None")
    t = annotation.removesuffix(" | None")
    if t in _NAMED_KINDS:
        return _NAMED_KINDS[t], None
    if t in UNIONS:
        return _K.UNION, t
    if t == "int":
        return (_K.U64_OPT if optional else _INT_KINDS.get((cls, name), _K.U64)), None
    if t == "bool" and optional:
        return _K.BOOL_OPT, None
    if t.startswith("tuple[") and t.endswith(", ...]"):
        item = t.removeprefix("tuple[").removesuffix(", ...]")
        # A vector of union values is a vector of wrapper tables; the schema has one (PrepStep).
        return (_K.PREP_VEC, item) if item in UNIONS else (_K.TABLES, getattr(m, item))
    value = getattr(m, t, None)
    if isinstance(value, type) and issubclass(value, IntEnum):
        if value in _ENUM16:
            return _K.ENUM16_OPT, value
        return (_K.ENUM_OPT if optional else _K.ENUM), value
    if isinstance(value, type) and is_dataclass(value):
        return _K.TABLE, value
    raise AssertionError(f"{cls.__name__}.{name}: no flatbuffers kind for {annotation!r}")


def _table_spec(cls: type) -> _TableSpec:
    """Assign vtable slots in declaration order (a union takes two: type byte, then value)."""
    out = []
    slot = 0
    for f in fields(cls):
        annotation = str(f.type)
        kind, arg = _field_kind(cls, f.name, annotation)
        out.append(_Field(f.name, kind, not annotation.endswith(" | None"), slot, arg))
        slot += 2 if kind is _K.UNION else 1
    return _TableSpec(cls, tuple(out), slot)


def _reachable_specs(root: type) -> dict[type, _TableSpec]:
    """The specs of ``root`` and of every table its fields reach (through unions too)."""
    specs: dict[type, _TableSpec] = {}
    todo = [root]
    while todo:
        cls = todo.pop(0)
        if cls in specs:
            continue
        specs[cls] = spec = _table_spec(cls)
        for f in spec.fields:
            if f.kind in (_K.TABLE, _K.TABLES):
                todo.append(f.arg)
            elif f.kind in (_K.UNION, _K.PREP_VEC):
                todo.extend(UNIONS[f.arg])
    return specs


SPECS: Final[dict[type, _TableSpec]] = _reachable_specs(m.MetadataBlock)


# ---------------------------------------------------------------------------------------------
# Encoding


def _check_u64(cls: type, name: str, value: int) -> int:
    if not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise EncodeError(f"{cls.__name__}.{name}: {value!r} is not a valid uint64")
    return value


def _check_int(cls: type, name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise EncodeError(f"{cls.__name__}.{name}: {value!r} is out of range")
    return value


def _vector_of_offsets(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return int(b.EndVector())


def prepend_timestamp(b: flatbuffers.Builder, slot: int, ts: Timestamp, version: int) -> None:
    """Write ``ts`` as the inline ``Timestamp`` struct of field ``slot`` of the open table.

    Shared with the engine protocol's messages (:mod:`coordinator.transform.fbs`), which embed
    ODF timestamps exactly as metadata blocks of ``version`` do.
    """
    # v2 pushes the struct unaligned (kamu patched flatc's alignment() out to keep hashes
    # stable); v3 uses the schema's natural 4-byte alignment.
    year, ordinal, seconds, nanos = ts.to_parts()
    b.Prep(1 if version == BLOCK_VERSION_V2 else 4, 16)
    b.head = b.head - 16
    struct.pack_into("<iHHII", b.Bytes, b.head, year, ordinal, 0, seconds, nanos)
    b.Slot(slot)


def _encode_union(
    b: flatbuffers.Builder, value: object, union: str, version: int
) -> tuple[int, int]:
    code = _UNION_CODE.get(type(value))
    if code is None or type(value) not in UNIONS[union]:
        raise EncodeError(f"{type(value).__name__} is not a member of union {union}")
    return code, encode_table(b, value, version)


def encode_table(b: flatbuffers.Builder, obj: object, version: int) -> int:
    """Encode the ODF metadata table ``obj`` (a :data:`SPECS` dataclass) into ``b``; its offset.

    Raises:
        EncodeError: ``obj`` is not an ODF metadata table, or a required field is missing.
    """
    spec = SPECS.get(type(obj))
    if spec is None:
        raise EncodeError(f"cannot encode {type(obj).__name__}: not an ODF metadata table")
    # Phase 1: children, depth-first in declaration order.
    children: dict[int, Any] = {}
    values = []
    for f in spec.fields:
        v = getattr(obj, f.name)
        values.append(v)
        if v is None:
            if f.required:
                raise EncodeError(f"{spec.cls.__name__}.{f.name} is required")
            continue
        k = f.kind
        if k is _K.STR:
            children[f.slot] = b.CreateString(v)
        elif k is _K.BYTES:
            children[f.slot] = b.CreateByteVector(bytes(v))
        elif k is _K.HASH or k is _K.DID:
            children[f.slot] = b.CreateByteVector(v.to_bytes())
        elif k is _K.STRS:
            children[f.slot] = _vector_of_offsets(b, [b.CreateString(s) for s in v])
        elif k is _K.TABLE:
            children[f.slot] = encode_table(b, v, version)
        elif k is _K.TABLES:
            children[f.slot] = _vector_of_offsets(b, [encode_table(b, x, version) for x in v])
        elif k is _K.UNION:
            children[f.slot] = _encode_union(b, v, f.arg, version)
        elif k is _K.PREP_VEC:
            wrappers = []
            for step in v:
                code, off = _encode_union(b, step, f.arg, version)
                b.StartObject(2)
                b.PrependUint8Slot(0, code, 0)
                b.PrependUOffsetTRelativeSlot(1, off, 0)
                wrappers.append(b.EndObject())
            children[f.slot] = _vector_of_offsets(b, wrappers)
    # Phase 2: the table itself.
    b.StartObject(spec.num_slots)
    for f, v in zip(spec.fields, values, strict=True):
        if v is None:
            continue
        k = f.kind
        if k in _OFFSET_KINDS:
            b.PrependUOffsetTRelativeSlot(f.slot, children[f.slot], 0)
        elif k is _K.UNION:
            code, off = children[f.slot]
            b.PrependUint8Slot(f.slot, code, 0)
            b.PrependUOffsetTRelativeSlot(f.slot + 1, off, 0)
        elif k is _K.U64:
            b.PrependUint64Slot(f.slot, _check_u64(spec.cls, f.name, v), 0)
        elif k is _K.U64_OPT:
            b.PrependUint64Slot(f.slot, _check_u64(spec.cls, f.name, v), None)
        elif k is _K.BOOL_OPT:
            b.PrependBoolSlot(f.slot, bool(v), None)
        elif k is _K.ENUM:
            b.PrependInt32Slot(f.slot, int(f.arg(v)), 0)
        elif k is _K.ENUM_OPT:
            b.PrependInt32Slot(f.slot, int(f.arg(v)), None)
        elif k is _K.ENUM16_OPT:
            b.PrependInt16Slot(f.slot, int(f.arg(v)), None)
        elif k is _K.U32:
            b.PrependUint32Slot(f.slot, _check_int(spec.cls, f.name, v, 0, _U32_MAX), 0)
        elif k is _K.I32:
            b.PrependInt32Slot(f.slot, _check_int(spec.cls, f.name, v, -_I32_MIN, _I32_MAX), 0)
        elif k is _K.TS:
            prepend_timestamp(b, f.slot, v, version)
    return int(b.EndObject())


def encode_block_content(block: m.MetadataBlock, version: int | None = None) -> bytes:
    """The inner ``MetadataBlock`` flatbuffer (without the manifest wrapper).

    ``version`` None: the :func:`write_form`'s block version.
    """
    if version is None:
        version = write_form().block_version
    if version not in SUPPORTED_BLOCK_VERSIONS:
        raise EncodeError(f"cannot write block version {version}; supported: 2, 3")
    if not isinstance(block, m.MetadataBlock):
        raise EncodeError(f"expected MetadataBlock, got {type(block).__name__}")
    b = flatbuffers.Builder(1024)
    b.Finish(encode_table(b, block, version))
    return bytes(b.Output())


def encode_block(block: m.MetadataBlock, version: int | None = None) -> bytes:
    """Encode ``block`` as kamu does: the manifest-wrapped flatbuffer whose sha3 is the hash.

    ``version`` 2 matches kamu-cli v0.153 - v0.264 (ODF spec v0.34); 3 matches kamu-cli >=
    v0.265; None (the default) is the :func:`write_form`'s, 2 unless the node is configured to
    write the current form.
    """
    if version is None:
        version = write_form().block_version
    return encode_manifest(encode_block_content(block, version), version)


def encode_manifest(inner: bytes, version: int) -> bytes:
    """Wrap an encoded inner ``MetadataBlock`` buffer in the ``Manifest`` kamu hashes
    (``kind`` odf-metadata-block, ``version``, ``content``), as :func:`encode_block` does; tests
    use it to wrap hand-built inner buffers."""
    b = flatbuffers.Builder(len(inner) + 64)
    content = b.CreateByteVector(inner)
    b.StartObject(3)
    b.PrependInt64Slot(0, int(Multicodec.ODF_METADATA_BLOCK), 0)
    b.PrependInt32Slot(1, version, 0)
    b.PrependUOffsetTRelativeSlot(2, content, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


# ---------------------------------------------------------------------------------------------
# Decoding
#
# A straight-line decoder is generated per table from SPECS (a generic interpreter loop was ~3x
# slower, and chain validation speed is bounded by decoding). Every position is derived from
# unsigned offsets except the vtable position, which is checked; reads past the end raise
# ``struct.error`` and slices are length-checked, and :func:`decode_block_content` maps all of it
# to :class:`InvalidBlock`.
#
# Amplification budget. Nothing in the format stops N offsets from pointing at one string or
# table, and a decoder that follows them materialises that object N times: a 140 KB block could
# name 10^9 characters, and nested sharing grows quadratically. The block's hash cannot help (the
# block is named by it). So every object a decode materialises is charged the bytes it must
# occupy on its own in a buffer where nothing is shared: a string or byte vector 4 + its length,
# a vector 4 + 4 per element, a table 4 (its vtable offset; vtables are shared legitimately and
# are not charged). Objects of a FlatBuffers builder never overlap, so a block from any builder
# that does not share objects (kamu's, ours) costs at most its own size; the budget is exactly
# that size, and the charge is taken *before* the object is built. Decoded text and object count
# therefore stay within the block's size, and decoding time linear in it, whatever the offsets.
# The budget is a one-element list (the fastest mutable cell for the generated code).

_u8 = struct.Struct("<B").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i16 = struct.Struct("<h").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i64 = struct.Struct("<q").unpack_from
_u64 = struct.Struct("<Q").unpack_from
_ts = struct.Struct("<iHHII").unpack_from
_MAX_SLOTS: Final = max(s.num_slots for s in SPECS.values())
_VT_UNPACK: Final = [struct.Struct(f"<{k}H").unpack_from for k in range(_MAX_SLOTS + 1)]
_ZEROS: Final = [(0,) * k for k in range(_MAX_SLOTS + 1)]
#: Strings at least this long are decoded from a memoryview (slicing first is faster below it).
_VIEW_DECODE_MIN: Final = 4096


def _over_budget(budget: list[int]) -> InvalidBlock:
    return InvalidBlock(
        "malformed flatbuffer: shared offsets make the block decode to more than its own "
        f"size ({budget[1]} bytes)"
    )


def _vtable(data: bytes, tpos: int, nslots: int, bud: list[int]) -> tuple[int, ...]:
    """The field offsets of the table at ``tpos``, padded with zeros to ``nslots``."""
    bud[0] -= 4
    if bud[0] < 0:
        raise _over_budget(bud)
    vt = tpos - _i32(data, tpos)[0]
    if vt < 0:
        raise InvalidBlock(f"malformed flatbuffer: vtable of table at {tpos} out of bounds")
    vt_len = _u16(data, vt)[0]
    if vt_len < 4 or vt_len & 1:
        raise InvalidBlock(f"malformed flatbuffer: invalid vtable length {vt_len} at {vt}")
    k = (vt_len - 4) >> 1
    if k >= nslots:
        return _VT_UNPACK[nslots](data, vt + 4)
    return _VT_UNPACK[k](data, vt + 4) + _ZEROS[nslots - k]  # type: ignore[no-any-return]


def _deref(data: bytes, pos: int) -> int:
    return pos + _u32(data, pos)[0]  # type: ignore[no-any-return]


def _vector(data: bytes, pos: int, elem_size: int, bud: list[int]) -> tuple[int, int]:
    """``(first element position, count)`` of the vector referenced from ``pos``."""
    vpos = pos + _u32(data, pos)[0]
    count: int = _u32(data, vpos)[0]
    if vpos + 4 + count * elem_size > len(data):
        raise InvalidBlock(f"malformed flatbuffer: vector of {count} at {vpos} overruns buffer")
    bud[0] -= 4 + count * elem_size
    if bud[0] < 0:
        raise _over_budget(bud)
    return vpos + 4, count


def _byte_span(data: bytes, pos: int, bud: list[int], what: str) -> tuple[int, int]:
    """``(start, end)`` of the byte vector or string (``what``, for the error) referenced from
    ``pos``, its bytes charged to the budget."""
    vpos = pos + _u32(data, pos)[0]
    count = _u32(data, vpos)[0]
    vpos += 4
    end = vpos + count
    if end > len(data):
        raise InvalidBlock(f"malformed flatbuffer: {what} of {count} overruns buffer")
    bud[0] -= 4 + count
    if bud[0] < 0:
        raise _over_budget(bud)
    return vpos, end


def _mh_at(data: bytes, pos: int, bud: list[int]) -> Multihash:
    """The multihash in the byte vector referenced from ``pos``: :func:`_bytes_at` and
    :meth:`Multihash.from_bytes` in one step for the sha3-256 hashes that make up nearly every
    hash of a block (one slice, no second parse)."""
    start, end = _byte_span(data, pos, bud, "byte vector")
    if end - start == 34 and data[start] == 0x16 and data[start + 1] == 0x20:
        return _sha3_of_digest(data[start + 2 : end])
    return Multihash.from_bytes(data[start:end])


_sha3_of_digest = Multihash.sha3_256_of_digest


def _bytes_at(data: bytes, pos: int, bud: list[int]) -> bytes:
    start, end = _byte_span(data, pos, bud, "byte vector")
    return data[start:end]


def _string_at(data: bytes, pos: int, bud: list[int]) -> str:
    start, end = _byte_span(data, pos, bud, "string")
    try:
        if end - start < _VIEW_DECODE_MIN:
            return data[start:end].decode("utf-8")
        # A large string is decoded straight from the buffer, without a transient copy.
        with memoryview(data) as view:
            return str(view[start:end], "utf-8")
    except UnicodeDecodeError as e:
        raise InvalidBlock(f"malformed flatbuffer: string at {pos} is not valid UTF-8") from e


def _strs(data: bytes, pos: int, bud: list[int]) -> tuple[str, ...]:
    start, count = _vector(data, pos, 4, bud)
    return tuple([_string_at(data, start + 4 * i, bud) for i in range(count)])


def _tables(data: bytes, pos: int, cls: type, bud: list[int]) -> tuple[Any, ...]:
    start, count = _vector(data, pos, 4, bud)
    dec = _DECODERS[cls]
    return tuple([dec(data, _deref(data, start + 4 * i), bud) for i in range(count)])


def _union(
    data: bytes,
    tpos: int,
    type_off: int,
    val_off: int,
    field: _Field,
    owner: str,
    bud: list[int],
) -> Any:
    code = _u8(data, tpos + type_off)[0] if type_off else 0
    if code == 0 and val_off == 0:
        if field.required:
            raise InvalidBlock(f"{owner}.{field.name} is required but absent")
        return None
    members = UNIONS[field.arg]
    if not 1 <= code <= len(members) or val_off == 0:
        raise InvalidBlock(f"{owner}.{field.name}: invalid union type code {code}")
    return _DECODERS[members[code - 1]](data, _deref(data, tpos + val_off), bud)


def _prep_vec(data: bytes, pos: int, field: _Field, bud: list[int]) -> tuple[Any, ...]:
    start, count = _vector(data, pos, 4, bud)
    steps = []
    for i in range(count):
        wpos = _deref(data, start + 4 * i)
        t_off, v_off = _vtable(data, wpos, 2, bud)
        step = _union(data, wpos, t_off, v_off, field, "PrepStepWrapper", bud)
        if step is None:
            raise InvalidBlock("PrepStepWrapper without a value")
        steps.append(step)
    return tuple(steps)


def _timestamp_at(data: bytes, pos: int) -> Timestamp:
    year, ordinal, _pad, seconds, nanos = _ts(data, pos)
    return Timestamp.from_parts(year, ordinal, seconds, nanos)


def _missing(owner: str, name: str) -> Any:
    raise InvalidBlock(f"{owner}.{name} is required but absent")


_FIELD_EXPR: Final[dict[_K, str]] = {
    _K.HASH: "_mh_at(data, tpos + o, bud)",
    _K.STR: "_string_at(data, tpos + o, bud)",
    _K.U64: "_u64(data, tpos + o)[0]",
    _K.U64_OPT: "_u64(data, tpos + o)[0]",
    _K.TABLE: "_DECODERS[{arg}](data, _deref(data, tpos + o), bud)",
    _K.TS: "_timestamp_at(data, tpos + o)",
    _K.STRS: "_strs(data, tpos + o, bud)",
    _K.TABLES: "_tables(data, tpos + o, {arg}, bud)",
    _K.DID: "_did(_bytes_at(data, tpos + o, bud))",
    _K.BYTES: "_bytes_at(data, tpos + o, bud)",
    _K.BOOL_OPT: "bool(_u8(data, tpos + o)[0])",
    _K.ENUM: "{arg}(_i32(data, tpos + o)[0])",
    _K.ENUM_OPT: "{arg}(_i32(data, tpos + o)[0])",
    _K.ENUM16_OPT: "{arg}(_i16(data, tpos + o)[0])",
    _K.U32: "_u32(data, tpos + o)[0]",
    _K.I32: "_i32(data, tpos + o)[0]",
    _K.PREP_VEC: "_prep_vec(data, tpos + o, {field}, bud)",
}


def _build_decoder(spec: _TableSpec, ns: dict[str, Any]) -> Callable[[bytes, int, list[int]], Any]:
    """Generate the straight-line decoder of one table (``bud``: the amplification budget)."""
    name = spec.cls.__name__
    ns[f"_cls_{name}"] = spec.cls
    lines = [f"def _dec_{name}(data, tpos, bud):"]
    lines.append(f"    e = _vtable(data, tpos, {spec.num_slots}, bud)")
    args = []
    for i, f in enumerate(spec.fields):
        fref = f"_f_{name}_{i}"
        ns[fref] = f
        if f.kind is _K.UNION:
            union_args = f"e[{f.slot}], e[{f.slot + 1}], {fref}, {name!r}, bud"
            lines.append(f"    v{i} = _union(data, tpos, {union_args})")
        else:
            arg = ""
            if f.arg is not None and not isinstance(f.arg, str):
                arg = f"_a_{name}_{i}"
                ns[arg] = f.arg
            expr = _FIELD_EXPR[f.kind].format(arg=arg, field=fref)
            if f.kind in (_K.U64, _K.U32, _K.I32):
                default = "0"
            elif f.kind is _K.ENUM:
                default = f"{arg}(0)"
            elif f.required:
                default = f"_missing({name!r}, {f.name!r})"
            else:
                default = "None"
            lines.append(f"    o = e[{f.slot}]")
            lines.append(f"    v{i} = {expr} if o else {default}")
        args.append(f"{f.name}=v{i}")
    lines.append(f"    return _cls_{name}({', '.join(args)})")
    exec("\n".join(lines), ns)
    fn: Callable[[bytes, int, list[int]], Any] = ns[f"_dec_{name}"]
    return fn


_DECODERS: dict[type, Callable[[bytes, int, list[int]], Any]] = {}
_NS: dict[str, Any] = {
    "_u8": _u8,
    "_i32": _i32,
    "_i16": _i16,
    "_u32": _u32,
    "_u64": _u64,
    "_vtable": _vtable,
    "_deref": _deref,
    "_bytes_at": _bytes_at,
    "_string_at": _string_at,
    "_mh_at": _mh_at,
    "_did": DatasetId.from_bytes,
    "_strs": _strs,
    "_tables": _tables,
    "_union": _union,
    "_prep_vec": _prep_vec,
    "_timestamp_at": _timestamp_at,
    "_missing": _missing,
    "_DECODERS": _DECODERS,
}
for _s in SPECS.values():
    _DECODERS[_s.cls] = _build_decoder(_s, _NS)

_DECODE_ERRORS: Final = (
    struct.error,
    IndexError,
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
)


def _configure_native(native: native_decode.NativeDecoder) -> None:
    """Give the compiled decoder (:mod:`coordinator.metadata.native_decode`) tables generated
    from :data:`SPECS`: per class its vtable size and, per field in declaration order, the kind,
    whether it is required, its slot, the class's slot descriptor it fills and the nested table
    (index), union members (indices by type code) or enum class. A class it must not build
    without ``__init__`` (one with ``__post_init__`` or fields outside ``__init__``) gets None and
    is left to the Python decoder."""
    classes = list(SPECS)
    index = {cls: i for i, cls in enumerate(classes)}
    tables: list[tuple[type, int, tuple[tuple[str, bool, int, object, object], ...]] | None] = []
    for cls in classes:
        spec = SPECS[cls]
        if hasattr(cls, "__post_init__") or not all(f.init for f in fields(cls)):
            tables.append(None)
            continue
        slots = vars(cls)
        row = []
        for f in spec.fields:
            arg: object = f.arg
            if f.kind in (_K.TABLE, _K.TABLES):
                arg = index[f.arg]
            elif f.kind in (_K.UNION, _K.PREP_VEC):
                arg = tuple(index[member] for member in UNIONS[f.arg])
            row.append((f.kind.name, f.required, f.slot, slots[f.name], arg))
        tables.append((cls, spec.num_slots, tuple(row)))
    native.configure(
        tables,
        index[m.MetadataBlock],
        (Multihash, vars(Multihash)["code"], vars(Multihash)["digest"]),
        Multicodec.SHA3_256,
        Multicodec.ARROW0_SHA3_256,
        (Timestamp, vars(Timestamp)["epoch_ns"]),
        (DatasetId, vars(DatasetId)["public_key"]),
    )


#: The compiled decoder, or None (not built, ``ODF_NATIVE_CHAIN=0``): :func:`decode_block` and
#: :func:`decode_block_content` try it first and decode in Python whatever it returns None for.
#: Tests set it to None to exercise the Python decoder alone.
NATIVE_DECODER: native_decode.NativeDecoder | None = native_decode.load(_configure_native)


def new_budget(size: int) -> list[int]:
    """An amplification budget of ``size`` bytes for :func:`decode_table` (see above)."""
    return [size, size]


def decode_table(cls: type[_Decoded], data: bytes, pos: int, budget: list[int]) -> _Decoded:
    """Decode the ``cls`` table at ``pos`` of ``data``, charging ``budget`` (:func:`new_budget`).

    For codecs that embed ODF tables in their own messages (the engine protocol): they share one
    budget over the whole message. Errors are raw (``InvalidBlock``, ``struct.error``, ...); the
    caller maps them to its own.
    """
    value: _Decoded = _DECODERS[cls](data, pos, budget)
    return value


def decode_block_content(inner: bytes) -> m.MetadataBlock:
    """Decode the inner ``MetadataBlock`` flatbuffer (no manifest).

    Decoding materialises at most ``len(inner)`` bytes of strings, vectors and tables (the
    amplification budget above); a buffer whose shared offsets would exceed that is invalid.
    """
    native = NATIVE_DECODER
    if native is not None:
        block = native.decode_content(inner)
        if block is not None:
            return block
    return _decode_content(inner)


def _decode_content(inner: bytes) -> m.MetadataBlock:
    data = bytes(inner)
    try:
        block: m.MetadataBlock = _DECODERS[m.MetadataBlock](
            data, _deref(data, 0), new_budget(len(data))
        )
    except InvalidBlock:
        raise
    except (InvalidMultihash, InvalidDatasetId, DecodeError) as e:
        raise InvalidBlock(f"malformed block: {e}") from e
    except _DECODE_ERRORS as e:
        raise InvalidBlock(f"malformed flatbuffer: {e}") from e
    return block


def decode_manifest(data: bytes) -> tuple[int, bytes]:
    """Unwrap a block manifest: ``(version, inner MetadataBlock buffer)``.

    Raises:
        InvalidBlock: not a manifest, or the kind is not ``odf-metadata-block``.
        UnsupportedBlockVersion: a version other than 2 or 3.
    """
    data = bytes(data)
    try:
        tpos = _deref(data, 0)
        budget = new_budget(len(data))  # one table and one byte vector: never exceeded
        o_kind, o_version, o_content = _vtable(data, tpos, 3, budget)
        kind = _i64(data, tpos + o_kind)[0] if o_kind else 0
        version = _i32(data, tpos + o_version)[0] if o_version else 0
        content = _bytes_at(data, tpos + o_content, budget) if o_content else None
    except InvalidBlock:
        raise
    except _DECODE_ERRORS as e:
        raise InvalidBlock(f"malformed manifest: {e}") from e
    if kind != Multicodec.ODF_METADATA_BLOCK:
        raise InvalidBlock(
            f"manifest kind 0x{kind:x} is not odf-metadata-block "
            f"(0x{int(Multicodec.ODF_METADATA_BLOCK):x})"
        )
    if version not in SUPPORTED_BLOCK_VERSIONS:
        raise UnsupportedBlockVersion(
            f"metadata block version {version} is not supported (readable: 2, 3)"
        )
    if content is None:
        raise InvalidBlock("manifest has no content")
    return version, content


def decode_block(data: bytes) -> m.MetadataBlock:
    """Decode a manifest-wrapped block (versions 2 and 3).

    Raises:
        InvalidBlock: truncated, garbage, wrong manifest kind, missing required fields, or
            shared offsets that would decode to more than the block's own size.
        UnsupportedBlockVersion: unknown manifest version.
    """
    native = NATIVE_DECODER
    if native is not None:
        block = native.decode_block(data)
        if block is not None:
            return block
    _version, inner = decode_manifest(data)
    return _decode_content(inner)


def block_hash(data: bytes) -> Multihash:
    """The block hash: sha3-256 multihash of the whole manifest bytes (``str()`` = ``f1620…``)."""
    return Multihash.sha3_256(data)


__all__ = [
    "BLOCK_VERSION_V2",
    "BLOCK_VERSION_V3",
    "DEFAULT_BLOCK_VERSION",
    "SPECS",
    "SUPPORTED_BLOCK_VERSIONS",
    "UNIONS",
    "WRITE_FORMS",
    "WriteForm",
    "block_hash",
    "decode_block",
    "decode_block_content",
    "decode_manifest",
    "decode_table",
    "encode_block",
    "encode_block_content",
    "encode_table",
    "new_budget",
    "prepend_timestamp",
    "set_write_form",
    "write_form",
]
