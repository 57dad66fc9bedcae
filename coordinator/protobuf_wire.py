"""The protobuf wire format as far as odf-node writes it by hand: varints and fields.

Two protocols carry protobuf messages this node builds and reads without the ``protobuf``
package: the engine protocol's one-field envelopes (:mod:`coordinator.transform.fbs`) and
Flight SQL's commands (``node/transfer/flight_sql.py``). Both need only varints and
length-delimited fields (``protobuf.dev/programming-guides/encoding``); fixed-width fields are
read as little-endian integers, and groups (wire types 3 and 4) are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.errors import DecodeError

_FIXED_WIDTH = {1: 8, 5: 4}  # wire type -> bytes (I64, I32)


class ProtobufError(DecodeError, ValueError):
    """Bytes are not a protobuf message this module reads (truncated, an oversized varint, a
    group). A ``ValueError`` too, which is what Flight SQL's command parsing reports."""


def encode_varint(n: int) -> bytes:
    """``n`` (>= 0) as a base-128 varint, least significant group first."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf: bytes, i: int) -> tuple[int, int]:
    """The varint at ``buf[i]`` and the position after it (at most 10 bytes, 64 bits)."""
    n = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ProtobufError("truncated or oversized varint")
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, i
        shift += 7


def encode_fields(fields: Sequence[tuple[int, bytes | str | int]]) -> bytes:
    """A protobuf message of ``(number, value)``: bytes/str length-delimited, int varint."""
    out = bytearray()
    for num, value in fields:
        if isinstance(value, int):
            out += encode_varint(num << 3) + encode_varint(value)
        else:
            raw = value.encode() if isinstance(value, str) else value
            out += encode_varint(num << 3 | 2) + encode_varint(len(raw)) + raw
    return bytes(out)


def decode_fields(buf: bytes) -> dict[int, list[bytes | int]]:
    """A protobuf message's fields by number, each in the order met (varints and fixed-width
    fields as int, length-delimited ones as bytes).

    Raises:
        ProtobufError: a field runs past the end, or has a wire type other than 0, 1, 2 or 5.
    """
    fields: dict[int, list[bytes | int]] = {}
    i = 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, i = read_varint(buf, i)
        elif wire == 2 or wire in _FIXED_WIDTH:
            if wire == 2:
                size, i = read_varint(buf, i)
            else:
                size = _FIXED_WIDTH[wire]
            if i + size > len(buf):
                raise ProtobufError("truncated field")
            raw = bytes(buf[i : i + size])
            value = raw if wire == 2 else int.from_bytes(raw, "little")
            i += size
        else:
            raise ProtobufError(f"unsupported protobuf wire type {wire}")
        fields.setdefault(num, []).append(value)
    return fields


__all__ = [
    "ProtobufError",
    "decode_fields",
    "encode_fields",
    "encode_varint",
    "read_varint",
]
