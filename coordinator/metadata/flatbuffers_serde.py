"""FlatBuffers encoding of ODF metadata blocks, byte-identical to kamu-cli.

kamu builds every table in two phases (reference/odf-wire.md §2.2):

1. *children*: walk the fields in declaration order and serialise every present variable-size
   field depth-first (strings, byte vectors, vectors, nested tables, union variants; each
   ``PrepStepWrapper`` immediately after its ``PrepStep`` variant);
2. *the table*: add the fields again in declaration order, skipping non-optional scalars equal
   to their default but always writing present ``= null`` scalars.

The ``Timestamp`` struct is written with 1-byte alignment in manifest version 2 (kamu <=
v0.264, spec v0.34 era) and 4-byte alignment in version 3. The outer ``Manifest`` wraps the
finished block buffer as a ``[ubyte]`` vector; the block hash covers the whole outer buffer.

Encoding is driven by the field specs below (one per schema table, in declaration order), so the
encoder and decoder cannot drift apart. Decoding uses a small bounds-checked reader instead of
generated accessors: it is faster and turns every malformed input into :class:`InvalidBlock`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Final

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
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multicodec, Multihash

#: Manifest version written by kamu-cli v0.153 - v0.264 (ODF spec v0.34 era).
BLOCK_VERSION_V2: Final = 2
#: Manifest version written by kamu-cli >= v0.265 (aligned Timestamp struct).
BLOCK_VERSION_V3: Final = 3
SUPPORTED_BLOCK_VERSIONS: Final = frozenset({BLOCK_VERSION_V2, BLOCK_VERSION_V3})
DEFAULT_BLOCK_VERSION: Final = BLOCK_VERSION_V2

_U64_MAX: Final = (1 << 64) - 1


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


def _spec(cls: type, *fields: tuple[str, _K, bool] | tuple[str, _K, bool, Any]) -> _TableSpec:
    """Assign vtable slots in declaration order (a union takes two: type byte, then value)."""
    out = []
    slot = 0
    declared = list(getattr(cls, "__dataclass_fields__", {}))
    for f in fields:
        name, kind, required = f[0], f[1], f[2]
        arg = f[3] if len(f) > 3 else None
        out.append(_Field(name, kind, required, slot, arg))
        slot += 2 if kind is _K.UNION else 1
    if [f.name for f in out] != declared:
        raise AssertionError(f"spec of {cls.__name__} does not match the model's field order")
    return _TableSpec(cls, tuple(out), slot)


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
    "FetchStep": (m.FetchStepUrl, m.FetchStepFilesGlob, m.FetchStepContainer),
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
    "MergeStrategy": (m.MergeStrategyAppend, m.MergeStrategyLedger, m.MergeStrategySnapshot),
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

R, O = True, False  # required / optional, for readability of the table below
_S, _B, _H, _D, _SS = _K.STR, _K.BYTES, _K.HASH, _K.DID, _K.STRS
_T, _TT, _U = _K.TABLE, _K.TABLES, _K.UNION

SPECS: Final[dict[type, _TableSpec]] = {
    s.cls: s
    for s in (
        _spec(m.OffsetInterval, ("start", _K.U64, R), ("end", _K.U64, R)),
        _spec(
            m.DataSlice,
            ("logical_hash", _H, R),
            ("physical_hash", _H, R),
            ("offset_interval", _T, R, m.OffsetInterval),
            ("size", _K.U64, R),
        ),
        _spec(m.Checkpoint, ("physical_hash", _H, R), ("size", _K.U64, R)),
        _spec(m.SourceState, ("source_name", _S, R), ("kind", _S, R), ("value", _S, R)),
        _spec(
            m.AddData,
            ("prev_checkpoint", _H, O),
            ("prev_offset", _K.U64_OPT, O),
            ("new_data", _T, O, m.DataSlice),
            ("new_checkpoint", _T, O, m.Checkpoint),
            ("new_watermark", _K.TS, O),
            ("new_source_state", _T, O, m.SourceState),
        ),
        _spec(
            m.ReadStepCsv,
            ("schema", _SS, O),
            ("separator", _S, O),
            ("encoding", _S, O),
            ("quote", _S, O),
            ("escape", _S, O),
            ("header", _K.BOOL_OPT, O),
            ("infer_schema", _K.BOOL_OPT, O),
            ("null_value", _S, O),
            ("date_format", _S, O),
            ("timestamp_format", _S, O),
        ),
        _spec(m.ReadStepGeoJson, ("schema", _SS, O)),
        _spec(m.ReadStepEsriShapefile, ("schema", _SS, O), ("sub_path", _S, O)),
        _spec(m.ReadStepParquet, ("schema", _SS, O)),
        _spec(
            m.ReadStepJson,
            ("sub_path", _S, O),
            ("schema", _SS, O),
            ("date_format", _S, O),
            ("encoding", _S, O),
            ("timestamp_format", _S, O),
        ),
        _spec(
            m.ReadStepNdJson,
            ("schema", _SS, O),
            ("date_format", _S, O),
            ("encoding", _S, O),
            ("timestamp_format", _S, O),
        ),
        _spec(m.ReadStepNdGeoJson, ("schema", _SS, O)),
        _spec(m.SqlQueryStep, ("alias", _S, O), ("query", _S, R)),
        _spec(m.TemporalTable, ("name", _S, R), ("primary_key", _SS, R)),
        _spec(
            m.TransformSql,
            ("engine", _S, R),
            ("version", _S, O),
            ("query", _S, O),
            ("queries", _TT, O, m.SqlQueryStep),
            ("temporal_tables", _TT, O, m.TemporalTable),
        ),
        _spec(m.MergeStrategyAppend),
        _spec(m.MergeStrategyLedger, ("primary_key", _SS, R)),
        _spec(m.MergeStrategySnapshot, ("primary_key", _SS, R), ("compare_columns", _SS, O)),
        _spec(
            m.AddPushSource,
            ("source_name", _S, R),
            ("read", _U, R, "ReadStep"),
            ("preprocess", _U, O, "Transform"),
            ("merge", _U, R, "MergeStrategy"),
        ),
        _spec(m.AttachmentEmbedded, ("path", _S, R), ("content", _S, R)),
        _spec(m.AttachmentsEmbedded, ("items", _TT, R, m.AttachmentEmbedded)),
        _spec(
            m.ExecuteTransformInput,
            ("dataset_id", _D, R),
            ("prev_block_hash", _H, O),
            ("new_block_hash", _H, O),
            ("prev_offset", _K.U64_OPT, O),
            ("new_offset", _K.U64_OPT, O),
        ),
        _spec(
            m.ExecuteTransform,
            ("query_inputs", _TT, R, m.ExecuteTransformInput),
            ("prev_checkpoint", _H, O),
            ("prev_offset", _K.U64_OPT, O),
            ("new_data", _T, O, m.DataSlice),
            ("new_checkpoint", _T, O, m.Checkpoint),
            ("new_watermark", _K.TS, O),
        ),
        _spec(m.Seed, ("dataset_id", _D, R), ("dataset_kind", _K.ENUM, R, m.DatasetKind)),
        _spec(m.EventTimeSourceFromMetadata),
        _spec(m.EventTimeSourceFromPath, ("pattern", _S, R), ("timestamp_format", _S, O)),
        _spec(m.EventTimeSourceFromSystemTime),
        _spec(m.SourceCachingForever),
        _spec(m.RequestHeader, ("name", _S, R), ("value", _S, R)),
        _spec(m.EnvVar, ("name", _S, R), ("value", _S, O)),
        _spec(
            m.FetchStepUrl,
            ("url", _S, R),
            ("event_time", _U, O, "EventTimeSource"),
            ("cache", _U, O, "SourceCaching"),
            ("headers", _TT, O, m.RequestHeader),
        ),
        _spec(
            m.FetchStepFilesGlob,
            ("path", _S, R),
            ("event_time", _U, O, "EventTimeSource"),
            ("cache", _U, O, "SourceCaching"),
            ("order", _K.ENUM_OPT, O, m.SourceOrdering),
        ),
        _spec(
            m.FetchStepContainer,
            ("image", _S, R),
            ("command", _SS, O),
            ("args", _SS, O),
            ("env", _TT, O, m.EnvVar),
        ),
        _spec(
            m.PrepStepDecompress,
            ("format", _K.ENUM, R, m.CompressionFormat),
            ("sub_path", _S, O),
        ),
        _spec(m.PrepStepPipe, ("command", _SS, R)),
        _spec(
            m.SetPollingSource,
            ("fetch", _U, R, "FetchStep"),
            ("prepare", _K.PREP_VEC, O, "PrepStep"),
            ("read", _U, R, "ReadStep"),
            ("preprocess", _U, O, "Transform"),
            ("merge", _U, R, "MergeStrategy"),
        ),
        _spec(m.TransformInput, ("dataset_ref", _S, R), ("alias", _S, O)),
        _spec(
            m.SetTransform,
            ("inputs", _TT, R, m.TransformInput),
            ("transform", _U, R, "Transform"),
        ),
        _spec(
            m.SetVocab,
            ("offset_column", _S, O),
            ("operation_type_column", _S, O),
            ("system_time_column", _S, O),
            ("event_time_column", _S, O),
        ),
        _spec(m.SetAttachments, ("attachments", _U, R, "Attachments")),
        _spec(m.SetInfo, ("description", _S, O), ("keywords", _SS, O)),
        _spec(
            m.SetLicense,
            ("short_name", _S, R),
            ("name", _S, R),
            ("spdx_id", _S, O),
            ("website_url", _S, R),
        ),
        _spec(m.SetDataSchema, ("schema", _B, R)),
        _spec(m.DisablePushSource, ("source_name", _S, R)),
        _spec(m.DisablePollingSource),
        _spec(
            m.MetadataBlock,
            ("system_time", _K.TS, R),
            ("prev_block_hash", _H, O),
            ("sequence_number", _K.U64, R),
            ("event", _U, R, "MetadataEvent"),
        ),
    )
}


# ---------------------------------------------------------------------------------------------
# Encoding


def _check_u64(cls: type, name: str, value: int) -> int:
    if not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise EncodeError(f"{cls.__name__}.{name}: {value!r} is not a valid uint64")
    return value


def _vector_of_offsets(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return int(b.EndVector())


def _prepend_timestamp(b: flatbuffers.Builder, slot: int, ts: Timestamp, version: int) -> None:
    # v2 pushes the struct unaligned (kamu patched flatc's alignment() out to keep hashes
    # stable); v3 uses the schema's natural 4-byte alignment.
    year, ordinal, seconds, nanos = ts.to_parts()
    b.Prep(1 if version == BLOCK_VERSION_V2 else 4, 16)
    b.head = b.head - 16
    struct.pack_into("<iHHII", b.Bytes, b.head, year, ordinal, 0, seconds, nanos)
    b.Slot(slot)


def _encode_union(b: flatbuffers.Builder, value: object, union: str, version: int) -> tuple[int, int]:
    code = _UNION_CODE.get(type(value))
    if code is None or type(value) not in UNIONS[union]:
        raise EncodeError(f"{type(value).__name__} is not a member of union {union}")
    return code, _encode_table(b, value, version)


def _encode_table(b: flatbuffers.Builder, obj: object, version: int) -> int:
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
            children[f.slot] = _encode_table(b, v, version)
        elif k is _K.TABLES:
            children[f.slot] = _vector_of_offsets(b, [_encode_table(b, x, version) for x in v])
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
        elif k is _K.TS:
            _prepend_timestamp(b, f.slot, v, version)
    return int(b.EndObject())


def encode_block_content(block: m.MetadataBlock, version: int = DEFAULT_BLOCK_VERSION) -> bytes:
    """The inner ``MetadataBlock`` flatbuffer (without the manifest wrapper)."""
    if version not in SUPPORTED_BLOCK_VERSIONS:
        raise EncodeError(f"cannot write block version {version}; supported: 2, 3")
    if not isinstance(block, m.MetadataBlock):
        raise EncodeError(f"expected MetadataBlock, got {type(block).__name__}")
    b = flatbuffers.Builder(1024)
    b.Finish(_encode_table(b, block, version))
    return bytes(b.Output())


def encode_block(block: m.MetadataBlock, version: int = DEFAULT_BLOCK_VERSION) -> bytes:
    """Encode ``block`` as kamu does: the manifest-wrapped flatbuffer whose sha3 is the hash.

    ``version`` 2 (default) matches kamu-cli v0.153 - v0.264 (ODF spec v0.34); 3 matches
    kamu-cli >= v0.265.
    """
    inner = encode_block_content(block, version)
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

_u8 = struct.Struct("<B").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i64 = struct.Struct("<q").unpack_from
_u64 = struct.Struct("<Q").unpack_from
_ts = struct.Struct("<iHHII").unpack_from


class _Buf:
    """A bounds-checked view over one flatbuffer."""

    __slots__ = ("data", "n")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.n = len(data)

    def fail(self, what: str) -> InvalidBlock:
        return InvalidBlock(f"malformed flatbuffer: {what}")

    def deref(self, pos: int) -> int:
        if pos < 0 or pos + 4 > self.n:
            raise self.fail(f"offset at {pos} out of bounds")
        target = pos + int(_u32(self.data, pos)[0])
        if target >= self.n:
            raise self.fail(f"offset at {pos} points outside the buffer")
        return target

    def vector(self, pos: int, elem_size: int) -> tuple[int, int]:
        """``(start, count)`` of the vector referenced from ``pos``."""
        vpos = self.deref(pos)
        if vpos + 4 > self.n:
            raise self.fail("vector header out of bounds")
        count = int(_u32(self.data, vpos)[0])
        start = vpos + 4
        if start + count * elem_size > self.n:
            raise self.fail(f"vector of {count} elements at {vpos} overruns the buffer")
        return start, count

    def bytes_at(self, pos: int) -> bytes:
        start, count = self.vector(pos, 1)
        return self.data[start : start + count]

    def string_at(self, pos: int) -> str:
        start, count = self.vector(pos, 1)
        try:
            return self.data[start : start + count].decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"string at {start} is not valid UTF-8") from e

    def table_slots(self, tpos: int) -> tuple[int, int]:
        """``(vtable position, vtable length)`` of the table at ``tpos``."""
        if tpos < 0 or tpos + 4 > self.n:
            raise self.fail(f"table at {tpos} out of bounds")
        vt = tpos - int(_i32(self.data, tpos)[0])
        if vt < 0 or vt + 4 > self.n:
            raise self.fail(f"vtable of table at {tpos} out of bounds")
        vt_len = int(_u16(self.data, vt)[0])
        obj_len = int(_u16(self.data, vt + 2)[0])
        if vt_len < 4 or vt_len % 2 or vt + vt_len > self.n or tpos + obj_len > self.n:
            raise self.fail(f"invalid vtable at {vt}")
        return vt, vt_len


def _decode_table(buf: _Buf, tpos: int, cls: type) -> Any:
    spec = SPECS[cls]
    data = buf.data
    vt, vt_len = buf.table_slots(tpos)
    kwargs: dict[str, Any] = {}
    for f in spec.fields:
        vo = 4 + 2 * f.slot
        k = f.kind
        if k is _K.UNION:
            type_off = int(_u16(data, vt + vo)[0]) if vo < vt_len else 0
            off_val = int(_u16(data, vt + vo + 2)[0]) if vo + 2 < vt_len else 0
            code = int(_u8(data, tpos + type_off)[0]) if type_off else 0
            if code == 0 and off_val == 0:
                if f.required:
                    raise InvalidBlock(f"{cls.__name__}.{f.name} is required but absent")
                continue
            members = UNIONS[f.arg]
            if not 1 <= code <= len(members) or off_val == 0:
                raise InvalidBlock(f"{cls.__name__}.{f.name}: invalid union type code {code}")
            kwargs[f.name] = _decode_table(buf, buf.deref(tpos + off_val), members[code - 1])
            continue
        off = int(_u16(data, vt + vo)[0]) if vo < vt_len else 0
        if off == 0:
            if k is _K.U64:
                kwargs[f.name] = 0
            elif k is _K.ENUM:
                kwargs[f.name] = f.arg(0)
            elif f.required:
                raise InvalidBlock(f"{cls.__name__}.{f.name} is required but absent")
            continue
        pos = tpos + off
        if k is _K.HASH:
            kwargs[f.name] = Multihash.from_bytes(buf.bytes_at(pos))
        elif k is _K.STR:
            kwargs[f.name] = buf.string_at(pos)
        elif k is _K.U64 or k is _K.U64_OPT:
            kwargs[f.name] = int(_u64(data, pos)[0])
        elif k is _K.TABLE:
            kwargs[f.name] = _decode_table(buf, buf.deref(pos), f.arg)
        elif k is _K.TS:
            year, ordinal, _pad, seconds, nanos = _ts(data, pos)
            kwargs[f.name] = Timestamp.from_parts(year, ordinal, seconds, nanos)
        elif k is _K.STRS:
            start, count = buf.vector(pos, 4)
            kwargs[f.name] = tuple(buf.string_at(start + 4 * i) for i in range(count))
        elif k is _K.TABLES:
            start, count = buf.vector(pos, 4)
            kwargs[f.name] = tuple(
                _decode_table(buf, buf.deref(start + 4 * i), f.arg) for i in range(count)
            )
        elif k is _K.DID:
            kwargs[f.name] = DatasetId.from_bytes(buf.bytes_at(pos))
        elif k is _K.BYTES:
            kwargs[f.name] = buf.bytes_at(pos)
        elif k is _K.BOOL_OPT:
            kwargs[f.name] = bool(_u8(data, pos)[0])
        elif k is _K.ENUM or k is _K.ENUM_OPT:
            kwargs[f.name] = f.arg(int(_i32(data, pos)[0]))
        elif k is _K.PREP_VEC:
            start, count = buf.vector(pos, 4)
            steps = []
            for i in range(count):
                wpos = buf.deref(start + 4 * i)
                wvt, wvt_len = buf.table_slots(wpos)
                t_off = int(_u16(data, wvt + 4)[0]) if wvt_len > 4 else 0
                v_off = int(_u16(data, wvt + 6)[0]) if wvt_len > 6 else 0
                code = int(_u8(data, wpos + t_off)[0]) if t_off else 0
                members = UNIONS[f.arg]
                if not 1 <= code <= len(members) or v_off == 0:
                    raise InvalidBlock(f"PrepStepWrapper: invalid union type code {code}")
                steps.append(_decode_table(buf, buf.deref(wpos + v_off), members[code - 1]))
            kwargs[f.name] = tuple(steps)
    return cls(**kwargs)


def _guard(fn: Callable[[], Any]) -> Any:
    """Run a decoder, turning any low-level failure into :class:`InvalidBlock`."""
    try:
        return fn()
    except InvalidBlock:
        raise
    except (InvalidMultihash, InvalidDatasetId, DecodeError) as e:
        raise InvalidBlock(f"malformed block: {e}") from e
    except (struct.error, IndexError, ValueError, TypeError, OverflowError, RecursionError) as e:
        raise InvalidBlock(f"malformed flatbuffer: {e}") from e


def decode_block_content(inner: bytes) -> m.MetadataBlock:
    """Decode the inner ``MetadataBlock`` flatbuffer (no manifest)."""

    def run() -> m.MetadataBlock:
        buf = _Buf(bytes(inner))
        block: m.MetadataBlock = _decode_table(buf, buf.deref(0), m.MetadataBlock)
        return block

    result: m.MetadataBlock = _guard(run)
    return result


def decode_manifest(data: bytes) -> tuple[int, bytes]:
    """Unwrap a block manifest: ``(version, inner MetadataBlock buffer)``.

    Raises:
        InvalidBlock: not a manifest, or the kind is not ``odf-metadata-block``.
        UnsupportedBlockVersion: a version other than 2 or 3.
    """

    def run() -> tuple[int, bytes]:
        buf = _Buf(bytes(data))
        tpos = buf.deref(0)
        vt, vt_len = buf.table_slots(tpos)
        offs = [int(_u16(buf.data, vt + 4 + 2 * i)[0]) if 4 + 2 * i < vt_len else 0 for i in range(3)]
        kind = int(_i64(buf.data, tpos + offs[0])[0]) if offs[0] else 0
        version = int(_i32(buf.data, tpos + offs[1])[0]) if offs[1] else 0
        if kind != Multicodec.ODF_METADATA_BLOCK:
            raise InvalidBlock(
                f"manifest kind 0x{kind:x} is not odf-metadata-block (0x{int(Multicodec.ODF_METADATA_BLOCK):x})"
            )
        if version not in SUPPORTED_BLOCK_VERSIONS:
            raise UnsupportedBlockVersion(
                f"metadata block version {version} is not supported (readable: 2, 3)"
            )
        if not offs[2]:
            raise InvalidBlock("manifest has no content")
        return version, buf.bytes_at(tpos + offs[2])

    result: tuple[int, bytes] = _guard(run)
    return result


def decode_block(data: bytes) -> m.MetadataBlock:
    """Decode a manifest-wrapped block (versions 2 and 3).

    Raises:
        InvalidBlock: truncated, garbage, wrong manifest kind, missing required fields.
        UnsupportedBlockVersion: unknown manifest version.
    """
    _version, inner = decode_manifest(data)
    return decode_block_content(inner)


def block_hash(data: bytes) -> Multihash:
    """The block hash: sha3-256 multihash of the whole manifest bytes (``str()`` = ``f1620…``)."""
    return Multihash.sha3_256(bytes(data))


__all__ = [
    "BLOCK_VERSION_V2",
    "BLOCK_VERSION_V3",
    "DEFAULT_BLOCK_VERSION",
    "SPECS",
    "SUPPORTED_BLOCK_VERSIONS",
    "UNIONS",
    "block_hash",
    "decode_block",
    "decode_block_content",
    "decode_manifest",
    "encode_block",
    "encode_block_content",
]
