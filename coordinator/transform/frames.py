"""The framed worker protocol: odf-node's own transport to the engine workers it starts.

kamu's engines speak gRPC (``schemas/engine.proto``) and the node keeps speaking it to them and
to its Spark worker. To its DataFusion workers, which it starts itself and which serve it alone,
it speaks this simpler protocol over a Unix socket: one Python gRPC exchange cost 2.4-5 ms on
the development machine, more than DataFusion's own work on a small block, and the same
FlatBuffers in length-prefixed frames over a Unix socket 0.4 ms (``docs/engines.md``).

A **frame** is ``u32 length`` (little-endian, of what follows) then the body: ``u8 kind``,
``u32 count`` and ``count`` parts, each ``u32 length`` + bytes. Kinds:

* :data:`TRANSFORM_BATCH` (node → worker): each part a ``TransformRequest`` flatbuffer, run in
  order;
* :data:`TRANSFORM_ANSWERS` (worker → node): two parts per request, in order: the
  ``TransformResponseRoot`` flatbuffer (``Success`` / ``InvalidQuery`` / ``InternalError``, no
  ``Progress``), then the logical hash of the data file the worker wrote as binary multihash
  (empty when it wrote none or could not hash it);
* :data:`PROTOCOL_ERROR` (worker → node): one part, a UTF-8 message (a frame it could not
  read); the worker closes the connection after it.

The node may send several frames before reading the answers (the worker answers them in
order): the worker then never waits for the node between batches.
"""

from __future__ import annotations

import struct
from typing import Final, Protocol

from coordinator.errors import OdfNodeError

TRANSFORM_BATCH: Final = 1
TRANSFORM_ANSWERS: Final = 2
PROTOCOL_ERROR: Final = 3

MAX_FRAME: Final = 256 << 20
"""Largest frame either side accepts (a batch of requests is a few KiB per request)."""

_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<BI")


class FrameError(OdfNodeError):
    """A frame that breaks the format (truncated, too large, bad counts)."""


class ConnectionLost(OdfNodeError):
    """The peer closed the connection or it failed before a whole frame arrived."""


class _Socket(Protocol):
    def recv_into(self, buffer: memoryview, nbytes: int = ...) -> int: ...

    def sendall(self, data: bytes) -> None: ...


def encode_frame(kind: int, parts: list[bytes]) -> bytes:
    """One whole frame (length prefix included)."""
    chunks = [_HEAD.pack(kind, len(parts))]
    for p in parts:
        chunks.append(_U32.pack(len(p)))
        chunks.append(p)
    body = b"".join(chunks)
    if len(body) > MAX_FRAME:
        raise FrameError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _U32.pack(len(body)) + body


def decode_body(body: bytes | bytearray | memoryview) -> tuple[int, list[bytes]]:
    """The kind and parts of a frame's body (what follows the length prefix)."""
    view = memoryview(body)
    if len(view) < _HEAD.size:
        raise FrameError("frame shorter than its header")
    kind, count = _HEAD.unpack_from(view, 0)
    pos = _HEAD.size
    parts: list[bytes] = []
    for _ in range(count):
        if pos + 4 > len(view):
            raise FrameError("frame truncated in a part's length")
        (n,) = _U32.unpack_from(view, pos)
        pos += 4
        if pos + n > len(view):
            raise FrameError("frame truncated in a part")
        parts.append(bytes(view[pos : pos + n]))
        pos += n
    if pos != len(view):
        raise FrameError(f"{len(view) - pos} stray bytes after the last part")
    return kind, parts


def _recv_exact(sock: _Socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        read = sock.recv_into(view[got:], n - got)
        if read == 0:
            raise ConnectionLost(
                "connection closed" + (" mid-frame" if got else "") + " by the engine worker"
            )
        got += read
    return buf


def read_frame(sock: _Socket) -> tuple[int, list[bytes]]:
    """The next frame's kind and parts (blocks; ``ConnectionLost`` at end of stream)."""
    (n,) = _U32.unpack(_recv_exact(sock, 4))
    if n > MAX_FRAME:
        raise FrameError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    return decode_body(_recv_exact(sock, n))


def write_frame(sock: _Socket, kind: int, parts: list[bytes]) -> None:
    """Send one frame."""
    sock.sendall(encode_frame(kind, parts))


__all__ = [
    "MAX_FRAME",
    "PROTOCOL_ERROR",
    "TRANSFORM_ANSWERS",
    "TRANSFORM_BATCH",
    "ConnectionLost",
    "FrameError",
    "decode_body",
    "encode_frame",
    "read_frame",
    "write_frame",
]
