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

    Chunks are parsed in place; the bytes of a section cut by a chunk's end are kept as a list
    of chunks and joined once the section is whole, so a large block arriving in many small
    chunks costs one copy, not one per chunk. A section with a one-byte length and codec and a
    sha2-256 CIDv1 (every section of a UnixFS export of small blocks) is read without the
    general varint decoding: half the time per block.

    Raises:
        CarError: malformed archive, or more than ``max_bytes`` in total.
    """
    pending: list[bytes] = []  # the unparsed bytes: the start of a section cut by a chunk's end
    pending_len = 0
    need = 0  # bytes the cut section needs before parsing is worth trying again
    total = 0
    header_done = False
    async for chunk in chunks:
        total += len(chunk)
        if total > max_bytes:
            raise CarError(f"archive larger than the {max_bytes}-byte cap")
        pending.append(chunk)
        pending_len += len(chunk)
        if pending_len < need:
            continue
        buf = pending[0] if len(pending) == 1 else b"".join(pending)
        end_of_buf = len(buf)
        pos = 0
        need = 0
        while pos < end_of_buf:
            length = buf[pos]
            body = pos + 1
            if length & 0x80:
                r = _varint(buf, pos)
                if r is None:
                    need = end_of_buf - pos + 1
                    break
                length, body = r
            end = body + length
            if end > end_of_buf:
                need = end - pos
                break
            if not header_done:
                header_done = True  # the dag-cbor header (version, roots) is not needed
            elif (
                length >= 36
                and buf[body] == 1
                and buf[body + 1] < 0x80
                and buf[body + 2 : body + 4] == b"\x12\x20"
            ):  # CIDv1, one-byte codec, sha2-256
                yield CarBlock(buf[body + 1], bytes(buf[body + 36 : end]))
            else:
                if length == 0:
                    raise CarError("empty section")
                codec, cid_len = _cid_codec_and_length(buf, body)
                if cid_len > length:
                    raise CarError("section shorter than its CID")
                yield CarBlock(codec, bytes(buf[body + cid_len : end]))
            pos = end
        rest = buf[pos:] if pos < end_of_buf else b""
        pending = [rest] if rest else []
        pending_len = len(rest)
    if pending_len:
        raise CarError("archive ends inside a section")
    if not header_done:
        raise CarError("empty archive")
