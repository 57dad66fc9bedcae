"""A streaming reader of CARv1 archives (what ``dag/export`` returns).

A CARv1 is ``varint(len) || dag-cbor header`` followed by sections
``varint(len) || CID || block bytes``. Pulls only need the block bytes of raw leaves (codec
``0x55``): a dataset's ``blocks/<hash>`` files are added with ``--raw-leaves``, so each file
smaller than the UnixFS chunk size is exactly one raw leaf whose bytes are the file. Nothing
read here is trusted: the caller hashes every payload with sha3-256 and keeps only those that
match a name it is looking for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from coordinator.errors import DecodeError

RAW_CODEC = 0x55
DAG_PB_CODEC = 0x70


class CarError(DecodeError):
    """The archive is malformed or exceeds a cap."""


@dataclass(frozen=True, slots=True)
class CarBlock:
    """One section of the archive: its CID's codec and the block bytes."""

    codec: int
    data: bytes


def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int] | None:
    """Decode an unsigned LEB128 varint at ``pos``; ``None`` if ``buf`` ends inside it."""
    value = 0
    shift = 0
    while pos < len(buf):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise CarError("varint longer than 9 bytes")
    return None


def _cid_codec_and_length(section: bytes | bytearray, start: int) -> tuple[int, int]:
    """The codec of the CID at ``section[start:]`` and the CID's length in bytes."""
    if section[start : start + 2] == b"\x12\x20":  # CIDv0: a bare sha2-256 multihash
        return DAG_PB_CODEC, 34
    pos = start
    fields = []
    for _ in range(4):  # version, codec, multihash code, digest length
        r = _varint(section, pos)
        if r is None:
            raise CarError("truncated CID")
        v, pos = r
        fields.append(v)
    version, codec, _mh, digest_len = fields
    if version != 1:
        raise CarError(f"unsupported CID version {version}")
    end = pos + digest_len
    if end > len(section):
        raise CarError("truncated CID digest")
    return codec, end - start


async def read_car(chunks: AsyncIterator[bytes], *, max_bytes: int) -> AsyncIterator[CarBlock]:
    """Yield the blocks of a CARv1 stream as they arrive.

    Raises:
        CarError: malformed archive, or more than ``max_bytes`` in total.
    """
    buf = bytearray()
    pos = 0
    total = 0
    header_done = False
    async for chunk in chunks:
        total += len(chunk)
        if total > max_bytes:
            raise CarError(f"archive larger than the {max_bytes}-byte cap")
        if pos:
            del buf[:pos]
            pos = 0
        buf += chunk
        while True:
            r = _varint(buf, pos)
            if r is None:
                break
            length, body = r
            if body + length > len(buf):
                break
            if not header_done:
                header_done = True  # the dag-cbor header (version, roots) is not needed
            else:
                if length == 0:
                    raise CarError("empty section")
                codec, cid_len = _cid_codec_and_length(buf, body)
                if cid_len > length:
                    raise CarError("section shorter than its CID")
                yield CarBlock(codec, bytes(buf[body + cid_len : body + length]))
            pos = body + length
    if pos < len(buf):
        raise CarError("archive ends inside a section")
    if not header_done:
        raise CarError("empty archive")
