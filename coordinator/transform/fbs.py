"""FlatBuffers codec of the ODF engine protocol tables (``schemas/odf.fbs``, as of spec v0.34.0).

``TransformRequest`` is the request root; the response root is ``TransformResponseRoot{value:
TransformResponse}``. These payloads travel in the single ``bytes flatbuffer = 1`` field of the
``engine.Engine`` gRPC messages. Engine messages are not hashed, so the ``Timestamp`` struct uses
its natural 4-byte alignment (kamu's generated code). ``Transform`` (``TransformSql``) is encoded
and decoded by the metadata codec, so both stay in step.

Decoding is budgeted like a block's: every table, string and vector read is charged the bytes it
must occupy in a buffer without shared objects, and a message that would decode to more than its
own size raises :class:`DecodeError` (``docs/resource-budget.md``). The gRPC server
(``engine/worker.py``) and client (``node/engine_client.py``) accept messages of up to 64 MiB
(``grpc.max_receive_message_length``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import flatbuffers
from flatbuffers.table import Table

from coordinator.errors import DecodeError
from coordinator.identity.dataset_id import DatasetId
from coordinator.ingest.vocab import Vocab
from coordinator.metadata import flatbuffers_serde as fbs
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.protobuf_wire import decode_fields, encode_fields
from coordinator.transform.model import (
    RawQueryRequest,
    RawQueryResponse,
    RawQuerySuccess,
    TransformInternalError,
    TransformInvalidQuery,
    TransformRequest,
    TransformRequestInput,
    TransformResponse,
    TransformSuccess,
    Watermark,
)

_TS_VERSION = fbs.BLOCK_VERSION_V3  # 4-byte aligned Timestamp struct
_S = TypeVar("_S")
_RESP_SUCCESS, _RESP_INVALID, _RESP_INTERNAL = 2, 3, 4
RESP_PROGRESS = 1


# -- encoding ------------------------------------------------------------------------------------


def _strings(b: flatbuffers.Builder, items: list[str]) -> int:
    offs = [b.CreateString(s) for s in items]
    b.StartVector(4, len(offs), 4)
    for o in reversed(offs):
        b.PrependUOffsetTRelative(o)
    return int(b.EndVector())


def _tables(b: flatbuffers.Builder, offs: list[int]) -> int:
    b.StartVector(4, len(offs), 4)
    for o in reversed(offs):
        b.PrependUOffsetTRelative(o)
    return int(b.EndVector())


def _vocab(b: flatbuffers.Builder, v: Vocab) -> int:
    names = [
        b.CreateString(s)
        for s in (
            v.offset_column,
            v.operation_type_column,
            v.system_time_column,
            v.event_time_column,
        )
    ]
    b.StartObject(4)
    for slot, off in enumerate(names):
        b.PrependUOffsetTRelativeSlot(slot, off, 0)
    return int(b.EndObject())


def _interval(b: flatbuffers.Builder, iv: m.OffsetInterval) -> int:
    b.StartObject(2)
    b.PrependUint64Slot(0, iv.start, 0)
    b.PrependUint64Slot(1, iv.end, 0)
    return int(b.EndObject())


def _watermark(b: flatbuffers.Builder, w: Watermark) -> int:
    b.StartObject(2)
    fbs.prepend_timestamp(b, 0, w.system_time, _TS_VERSION)
    fbs.prepend_timestamp(b, 1, w.event_time, _TS_VERSION)
    return int(b.EndObject())


def _request_input(b: flatbuffers.Builder, i: TransformRequestInput) -> int:
    did = b.CreateByteVector(i.dataset_id.to_bytes())
    alias = b.CreateString(i.dataset_alias)
    qalias = b.CreateString(i.query_alias)
    vocab = _vocab(b, i.vocab)
    interval = _interval(b, i.offset_interval) if i.offset_interval is not None else None
    paths = _strings(b, [str(p) for p in i.data_paths])
    schema = b.CreateString(str(i.schema_file)) if i.schema_file is not None else None
    marks = _tables(b, [_watermark(b, w) for w in i.explicit_watermarks])
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(0, did, 0)
    b.PrependUOffsetTRelativeSlot(1, alias, 0)
    b.PrependUOffsetTRelativeSlot(2, qalias, 0)
    b.PrependUOffsetTRelativeSlot(3, vocab, 0)
    if interval is not None:
        b.PrependUOffsetTRelativeSlot(4, interval, 0)
    b.PrependUOffsetTRelativeSlot(5, paths, 0)
    if schema is not None:
        b.PrependUOffsetTRelativeSlot(6, schema, 0)
    b.PrependUOffsetTRelativeSlot(7, marks, 0)
    return int(b.EndObject())


def encode_transform_request(req: TransformRequest) -> bytes:
    """The ``TransformRequest`` flatbuffer."""
    b = flatbuffers.Builder(1024)
    did = b.CreateByteVector(req.dataset_id.to_bytes())
    alias = b.CreateString(req.dataset_alias)
    vocab = _vocab(b, req.vocab)
    transform = fbs.encode_table(b, req.transform, _TS_VERSION)
    inputs = _tables(b, [_request_input(b, i) for i in req.query_inputs])
    prev_cp = (
        b.CreateString(str(req.prev_checkpoint_path))
        if req.prev_checkpoint_path is not None
        else None
    )
    new_cp = b.CreateString(str(req.new_checkpoint_path))
    new_data = b.CreateString(str(req.new_data_path))
    b.StartObject(11)
    b.PrependUOffsetTRelativeSlot(0, did, 0)
    b.PrependUOffsetTRelativeSlot(1, alias, 0)
    fbs.prepend_timestamp(b, 2, req.system_time, _TS_VERSION)
    b.PrependUOffsetTRelativeSlot(3, vocab, 0)
    b.PrependUint8Slot(4, 1, 0)  # Transform union: TransformSql
    b.PrependUOffsetTRelativeSlot(5, transform, 0)
    b.PrependUOffsetTRelativeSlot(6, inputs, 0)
    b.PrependUint64Slot(7, req.next_offset, 0)
    if prev_cp is not None:
        b.PrependUOffsetTRelativeSlot(8, prev_cp, 0)
    b.PrependUOffsetTRelativeSlot(9, new_cp, 0)
    b.PrependUOffsetTRelativeSlot(10, new_data, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def _encode_error(
    b: flatbuffers.Builder, resp: TransformInvalidQuery | TransformInternalError
) -> tuple[int, int]:
    """The InvalidQuery / InternalError variants, shared by both response unions."""
    msg = b.CreateString(resp.message)
    if isinstance(resp, TransformInvalidQuery):
        b.StartObject(1)
        b.PrependUOffsetTRelativeSlot(0, msg, 0)
        return _RESP_INVALID, b.EndObject()
    bt = b.CreateString(resp.backtrace) if resp.backtrace is not None else None
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(0, msg, 0)
    if bt is not None:
        b.PrependUOffsetTRelativeSlot(1, bt, 0)
    return _RESP_INTERNAL, b.EndObject()


def _finish_response_root(b: flatbuffers.Builder, code: int, value: int) -> bytes:
    """Wrap a response variant in its ``*ResponseRoot { value: union }`` table."""
    b.StartObject(2)
    b.PrependUint8Slot(0, code, 0)
    b.PrependUOffsetTRelativeSlot(1, value, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def _encode_response(
    resp: _S | TransformInvalidQuery | TransformInternalError | None,
    success: Callable[[flatbuffers.Builder, _S], int],
) -> bytes:
    """A ``*ResponseRoot``: ``None`` encodes ``Progress``, the two error variants alike for
    transforms and raw queries, ``success`` builds the ``Success`` table."""
    b = flatbuffers.Builder(256)
    if resp is None:
        b.StartObject(0)
        code, value = RESP_PROGRESS, b.EndObject()
    elif isinstance(resp, TransformInvalidQuery | TransformInternalError):
        code, value = _encode_error(b, resp)
    else:
        code, value = _RESP_SUCCESS, success(b, resp)
    return _finish_response_root(b, code, value)


def encode_transform_response(resp: TransformResponse | None) -> bytes:
    """``TransformResponseRoot``; ``None`` encodes a ``Progress`` message."""
    return _encode_response(resp, _transform_success)


def _transform_success(b: flatbuffers.Builder, resp: TransformSuccess) -> int:
    iv = _interval(b, resp.new_offset_interval) if resp.new_offset_interval is not None else None
    b.StartObject(2)
    if iv is not None:
        b.PrependUOffsetTRelativeSlot(0, iv, 0)
    if resp.new_watermark is not None:
        fbs.prepend_timestamp(b, 1, resp.new_watermark, _TS_VERSION)
    return int(b.EndObject())


# -- decoding ------------------------------------------------------------------------------------


class _T:
    """A bounds-checked view of one table.

    Every table, string, byte vector and vector read is charged to ``budget`` (shared by the whole
    message, see :func:`coordinator.metadata.flatbuffers_serde.new_budget`), so offsets shared
    between objects cannot make a message decode to more than its own size.
    """

    def __init__(self, buf: bytearray, pos: int, budget: list[int]) -> None:
        self.buf = buf
        self.budget = budget
        self._spend(4)
        self.t = Table(buf, pos)

    def _spend(self, n: int) -> None:
        self.budget[0] -= n
        if self.budget[0] < 0:
            raise DecodeError(
                "engine message: shared offsets make it decode to more than its own size"
            )

    def _o(self, slot: int) -> int:
        return int(self.t.Offset(4 + 2 * slot))

    def has(self, slot: int) -> bool:
        return self._o(slot) != 0

    def _string(self, pos: int) -> str:
        raw = bytes(self.t.String(pos))
        self._spend(4 + len(raw))
        return raw.decode("utf-8")

    def text(self, slot: int) -> str | None:
        o = self._o(slot)
        return None if o == 0 else self._string(o + self.t.Pos)

    def blob(self, slot: int) -> bytes | None:
        o = self._o(slot)
        if o == 0:
            return None
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        self._spend(4 + n)
        return bytes(self.buf[start : start + n])

    def table(self, slot: int) -> _T | None:
        o = self._o(slot)
        return None if o == 0 else _T(self.buf, self.t.Indirect(o + self.t.Pos), self.budget)

    def _vector(self, slot: int) -> tuple[int, int]:
        o = self._o(slot)
        if o == 0:
            return 0, 0
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        if start + 4 * n > len(self.buf):
            raise DecodeError(f"engine message: vector of {n} overruns the buffer")
        self._spend(4 + 4 * n)
        return start, n

    def tables(self, slot: int) -> list[_T]:
        start, n = self._vector(slot)
        return [_T(self.buf, self.t.Indirect(start + 4 * i), self.budget) for i in range(n)]

    def strs(self, slot: int) -> list[str]:
        start, n = self._vector(slot)
        return [self._string(start + 4 * i) for i in range(n)]

    def u64(self, slot: int) -> int:
        o = self._o(slot)
        return 0 if o == 0 else int(struct.unpack_from("<Q", self.buf, self.t.Pos + o)[0])

    def u8(self, slot: int) -> int:
        o = self._o(slot)
        return 0 if o == 0 else int(self.buf[self.t.Pos + o])

    def ts(self, slot: int) -> Timestamp | None:
        o = self._o(slot)
        if o == 0:
            return None
        year, ordinal, _pad, secs, nanos = struct.unpack_from("<iHHII", self.buf, self.t.Pos + o)
        return Timestamp.from_parts(year, ordinal, secs, nanos)

    def pos_of(self, slot: int) -> int:
        return int(self.t.Indirect(self._o(slot) + self.t.Pos))

    def transform_sql(self, slot: int) -> m.TransformSql:
        """The ``TransformSql`` table at ``slot``, decoded by the metadata codec (same budget)."""
        return fbs.decode_table(m.TransformSql, bytes(self.buf), self.pos_of(slot), self.budget)


def _root(buf: bytes) -> _T:
    # One mutable copy for flatbuffers' Table (it indexes a bytearray), shared by every table.
    data = bytearray(buf)
    return _T(data, int(struct.unpack_from("<I", data, 0)[0]), fbs.new_budget(len(data)))


def _req(v: Any, what: str) -> Any:
    if v is None:
        raise DecodeError(f"engine message: {what} is required")
    return v


def _dec_vocab(t: _T | None) -> Vocab:
    if t is None:
        return Vocab()
    d = Vocab()
    return Vocab(
        t.text(0) or d.offset_column,
        t.text(1) or d.operation_type_column,
        t.text(2) or d.system_time_column,
        t.text(3) or d.event_time_column,
    )


def _dec_interval(t: _T | None) -> m.OffsetInterval | None:
    return None if t is None else m.OffsetInterval(start=t.u64(0), end=t.u64(1))


class _Decoding:
    """Parsing ``what``: any failure but a :class:`DecodeError` becomes one (malformed)."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Returns None (never swallows), so type checkers see a ``with`` body's return as final.
        if isinstance(e, Exception) and not isinstance(e, DecodeError):
            raise DecodeError(f"malformed {self._what}: {e}") from e


def _decode_response(
    buf: bytes, what: str, success: Callable[[_T], _S]
) -> _S | TransformInvalidQuery | TransformInternalError | None:
    """A ``*ResponseRoot`` named ``what``: ``None`` for ``Progress``, ``success`` of the value
    for ``Success``, the two error variants alike for transforms and raw queries."""
    with _Decoding(what):
        r = _root(buf)
        code = r.u8(0)
        v = _req(r.table(1), "value")
        if code == RESP_PROGRESS:
            return None
        if code == _RESP_SUCCESS:
            return success(v)
        if code == _RESP_INVALID:
            return TransformInvalidQuery(message=v.text(0) or "")
        if code == _RESP_INTERNAL:
            return TransformInternalError(message=v.text(0) or "", backtrace=v.text(1))
    raise DecodeError(f"unknown {what} variant {code}")


def decode_transform_request(buf: bytes) -> TransformRequest:
    """Parse a ``TransformRequest`` flatbuffer.

    Raises:
        DecodeError: malformed or incomplete message.
    """
    with _Decoding("TransformRequest"):
        r = _root(buf)
        inputs = []
        for t in r.tables(6):
            inputs.append(
                TransformRequestInput(
                    dataset_id=DatasetId.from_bytes(_req(t.blob(0), "dataset_id")),
                    dataset_alias=t.text(1) or "",
                    query_alias=_req(t.text(2), "query_alias"),
                    vocab=_dec_vocab(t.table(3)),
                    offset_interval=_dec_interval(t.table(4)),
                    data_paths=tuple(Path(p) for p in t.strs(5)),
                    schema_file=Path(s) if (s := t.text(6)) else None,
                    explicit_watermarks=tuple(
                        Watermark(
                            system_time=_req(w.ts(0), "system_time"),
                            event_time=_req(w.ts(1), "event_time"),
                        )
                        for w in t.tables(7)
                    ),
                )
            )
        if r.u8(4) != 1:
            raise DecodeError("engine message: transform must be TransformSql")
        transform = r.transform_sql(5)
        prev_cp = r.text(8)
        return TransformRequest(
            dataset_id=DatasetId.from_bytes(_req(r.blob(0), "dataset_id")),
            dataset_alias=r.text(1) or "",
            system_time=_req(r.ts(2), "system_time"),
            vocab=_dec_vocab(r.table(3)),
            transform=transform,
            query_inputs=tuple(inputs),
            next_offset=r.u64(7),
            prev_checkpoint_path=Path(prev_cp) if prev_cp else None,
            new_checkpoint_path=Path(_req(r.text(9), "new_checkpoint_path")),
            new_data_path=Path(_req(r.text(10), "new_data_path")),
        )


def decode_transform_response(buf: bytes) -> TransformResponse | None:
    """Parse a ``TransformResponseRoot``; ``None`` for a ``Progress`` message.

    Raises:
        DecodeError: malformed message or unknown variant.
    """
    return _decode_response(
        buf,
        "TransformResponse",
        lambda v: TransformSuccess(
            new_offset_interval=_dec_interval(v.table(0)), new_watermark=v.ts(1)
        ),
    )


# -- raw queries ---------------------------------------------------------------------------------


def encode_raw_query_request(req: RawQueryRequest) -> bytes:
    """The ``RawQueryRequest`` flatbuffer."""
    b = flatbuffers.Builder(512)
    paths = _strings(b, [str(p) for p in req.input_data_paths])
    transform = fbs.encode_table(b, req.transform, _TS_VERSION)
    out = b.CreateString(str(req.output_data_path))
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(0, paths, 0)
    b.PrependUint8Slot(1, 1, 0)  # Transform union: TransformSql
    b.PrependUOffsetTRelativeSlot(2, transform, 0)
    b.PrependUOffsetTRelativeSlot(3, out, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def decode_raw_query_request(buf: bytes) -> RawQueryRequest:
    """Parse a ``RawQueryRequest`` flatbuffer.

    Raises:
        DecodeError: malformed or incomplete message.
    """
    with _Decoding("RawQueryRequest"):
        r = _root(buf)
        if r.u8(1) != 1:
            raise DecodeError("engine message: transform must be TransformSql")
        return RawQueryRequest(
            input_data_paths=tuple(Path(p) for p in r.strs(0)),
            transform=r.transform_sql(2),
            output_data_path=Path(_req(r.text(3), "output_data_path")),
        )


def encode_raw_query_response(resp: RawQueryResponse | None) -> bytes:
    """``RawQueryResponseRoot``; ``None`` encodes ``Progress``."""
    return _encode_response(resp, _raw_query_success)


def _raw_query_success(b: flatbuffers.Builder, resp: RawQuerySuccess) -> int:
    b.StartObject(1)
    b.PrependUint64Slot(0, resp.num_records, 0)
    return int(b.EndObject())


def decode_raw_query_response(buf: bytes) -> RawQueryResponse | None:
    """Parse a ``RawQueryResponseRoot``; ``None`` for ``Progress``.

    Raises:
        DecodeError: malformed message or unknown variant.
    """
    return _decode_response(
        buf, "RawQueryResponse", lambda v: RawQuerySuccess(num_records=v.u64(0))
    )


# -- protobuf envelope -----------------------------------------------------------------------------


def wrap_protobuf(payload: bytes) -> bytes:
    """``message X { bytes flatbuffer = 1; }`` encoded by hand (field 1, wire type 2)."""
    return encode_fields([(1, payload)]) if payload else b""


def wrap_protobuf_many(payloads: list[bytes]) -> bytes:
    """``message X { repeated bytes flatbuffers = 1; }``: one field-1 entry per payload.

    The envelope of odf-node's ``ExecuteTransformBatch`` extension (``engine/worker.py``).
    """
    if not all(payloads):
        raise ValueError("an empty payload cannot travel in a batch")
    return encode_fields([(1, payload) for payload in payloads])


def unwrap_protobuf_many(data: bytes) -> list[bytes]:
    """Every ``flatbuffers`` entry (field 1) of a batch message, in order.

    Raises:
        DecodeError: not a protobuf message (:class:`~coordinator.protobuf_wire.ProtobufError`).
    """
    return [v for v in decode_fields(data).get(1, ()) if isinstance(v, bytes)]


def unwrap_protobuf(data: bytes) -> bytes:
    """The ``flatbuffer`` field of a one-field engine message (unknown fields skipped)."""
    found = unwrap_protobuf_many(data)
    return found[-1] if found else b""


__all__ = [
    "decode_raw_query_request",
    "decode_raw_query_response",
    "decode_transform_request",
    "decode_transform_response",
    "encode_raw_query_request",
    "encode_raw_query_response",
    "encode_transform_request",
    "encode_transform_response",
    "unwrap_protobuf",
    "unwrap_protobuf_many",
    "wrap_protobuf",
    "wrap_protobuf_many",
]
