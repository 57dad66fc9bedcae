"""The framed worker protocol: odf-node's own transport to the engine workers it starts.

kamu's engines speak gRPC (``schemas/engine.proto``) and the node keeps speaking it to them and
to its Spark worker. To its DataFusion workers, which it starts itself and which serve it alone,
it speaks this simpler protocol over a Unix socket: one Python gRPC exchange cost 2.4-5 ms on
the development machine, more than DataFusion's own work on a small block, and the same
FlatBuffers in length-prefixed frames over a Unix socket 0.4 ms (``docs/engines.md``).

A **frame** is ``u32 length`` (little-endian, of what follows) then the body: ``u8 kind``,
``u32 count`` and ``count`` parts, each ``u32 length`` + bytes. Kinds:

* :data:`TRANSFORM_BATCH` (node → worker): each part a :class:`TransformRequest` as a pickle
  (:func:`encode_request`), run in order;
* :data:`TRANSFORM_ANSWERS` (worker → node): two parts per request, in order: the
  ``TransformResponseRoot`` flatbuffer (``Success`` / ``InvalidQuery`` / ``InternalError``, no
  ``Progress``), then the form of the output: :data:`ARROW_OUTPUT` when the data is the Arrow
  IPC file the request asked for (``TransformRequest.arrow_output``), empty when it is the
  Parquet file at ``new_data_path`` (or there is none);
* :data:`PROTOCOL_ERROR` (worker → node): one part, a UTF-8 message (a frame it could not
  read); the worker closes the connection after it.

The node may send several frames before reading the answers (the worker answers them in
order): the worker then never waits for the node between batches.

Why pickles for requests: building and reading a request's flatbuffer in pure Python took
0.31 + 0.24 ms, a pickle 0.07 + 0.08 ms (a throwaway measurement on the development machine), on
blocks whose whole engine work is ~5 ms. Only the worker unpickles, and only what its parent
node sends over a socket that only their user can reach (in the node's private scratch
directory, mode 0600); the node never unpickles anything: answers, which come from the process
that runs untrusted SQL, are flatbuffers and raw bytes. Both ends run the same source tree
(the node starts ``python -m engine.worker`` from its own checkout), so the classes agree.
"""

from __future__ import annotations

import pickle
import struct
from typing import Final, Protocol

from coordinator.errors import OdfNodeError
from coordinator.transform.model import TransformRequest

TRANSFORM_BATCH: Final = 1
TRANSFORM_ANSWERS: Final = 2
PROTOCOL_ERROR: Final = 3
ARROW_OUTPUT: Final = b"arrow-ipc"
"""An answer's second part when the output is an Arrow IPC file (see the module docstring)."""

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


def encode_request(request: TransformRequest) -> bytes:
    """A request as a ``TRANSFORM_BATCH`` part (see the module docstring on pickles)."""
    return pickle.dumps(request, protocol=5)


def decode_request(part: bytes) -> TransformRequest:
    """A ``TRANSFORM_BATCH`` part back as a request (the worker's side only)."""
    request = pickle.loads(part)  # from the parent node only, see the module docstring
    if not isinstance(request, TransformRequest):
        raise FrameError(f"a batch part is a {type(request).__name__}, not a TransformRequest")
    return request


def write_frame(sock: _Socket, kind: int, parts: list[bytes]) -> None:
    """Send one frame."""
    sock.sendall(encode_frame(kind, parts))


__all__ = [
    "ARROW_OUTPUT",
    "MAX_FRAME",
    "PROTOCOL_ERROR",
    "TRANSFORM_ANSWERS",
    "TRANSFORM_BATCH",
    "ConnectionLost",
    "FrameError",
    "decode_body",
    "decode_request",
    "encode_frame",
    "encode_request",
    "read_frame",
    "write_frame",
]
