"""Logical and physical hashes of ODF data slices, byte-identical to kamu-cli.

ODF stores two hashes per data slice (RFC-002): the *physical* hash is SHA3-256 over the Parquet
file's bytes, and the *logical* hash is ``arrow0-sha3-256`` (multicodec ``0x300016``), computed
by kamu with arrow-digest's ``RecordDigestV0<Sha3_256>`` over the record batches that arrow-rs's
Parquet reader produces. This module re-implements that digest (described in
``docs/logical-hash.md``; source: kamu-data/arrow-digest ``src/*.rs``).

The algorithm (arrow-digest V0, crates 35..58 -- every version kamu used since ODF v0.34):

* **Schema.** Walk the fields depth-first, descending into ``Struct`` only. For every field
  (structs included) the *record* hasher takes ``u64 len(name) || name || u64 nesting level``.
  Every non-struct field (a *leaf*) gets its own SHA3-256 state, seeded with the type bytes of
  :func:`type_bytes` (a ``u16`` tag plus parameters). Nullability and metadata are not hashed.
* **Values.** Each leaf's state consumes one continuous byte stream across all batches:

  - fixed width (ints, floats, decimals, dates, times, timestamps): the little-endian value
    bytes; a null is a single ``0x00`` byte instead;
  - boolean: one byte per row, ``0x01`` false, ``0x02`` true, ``0x00`` null;
  - binary/string of every flavour (incl. fixed-size binary and views): ``u64 length || bytes``,
    a null is ``0x00``;
  - lists: ``u64 element count`` followed by the elements' own streams (using the child's own
    validity), a null row is ``0x00``.

* **Struct nulls.** A struct's validity reaches its descendants through arrow-digest's
  ``maybe_combine_null_buffers``. Since crate 35 it combines a parent and a child bitmap with a
  bitwise OR of *validity* (a slot is null only if both say so) -- a bug that kamu ships -- and
  a bitmap only counts if it has at least one null *in the current batch*. With two levels of
  nulls the digest therefore depends on batch boundaries; kamu reads Parquet in 10,000-row
  batches, which :func:`logical_hash` reproduces for files.
* **Result.** After the names, the record state takes each leaf's 32-byte digest in leaf order;
  its own digest, wrapped as multihash ``0x300016``, is printed as multibase base16
  (``f9680c00120`` + 64 hex digits).

Parquet input is hashed as arrow-rs reads it, not as pyarrow does: :func:`kamu_parquet_schema`
re-derives each column's Arrow type with arrow-rs's rules (Parquet logical/converted types plus
the embedded ``ARROW:schema`` hint), pyarrow's columns are cast where the readers disagree on
values (e.g. ``date32`` hinted as ``date64``), and type bytes come from the arrow-rs type (e.g.
``Binary`` vs ``Utf8``, timezone strings).

Types kamu cannot hash (dictionary, map, union, duration, interval, run-end encoded, list views,
``List<Struct>``) raise :class:`~coordinator.errors.UnsupportedArrowType` rather than produce a
hash kamu would never agree with.

Speed (no per-value Python anywhere): fixed-width columns without nulls are hashed straight from
the Arrow buffer. Every other stream is assembled in pieces of up to a million rows (64Ki for
strings, whose ``take`` then stays in cache) with numpy and one Arrow ``take`` over a binary
array whose elements are the parts of the stream -- u64 prefixes, a ``0x00`` marker, the
values -- so Arrow concatenates them in C++; fixed-width columns with nulls need one element per
run of valid values or nulls, not one per row, and have their null bytes zeroed in the copy.
That ``take`` (two variable-size copies per string row, ~13 ns) is what keeps string columns
below the speed of plain SHA3 (``docs/logical-hash.md``, "Speed").
When ``make setup`` has built ``native/odf_stream.c`` (:mod:`coordinator.data.native_stream`),
C loops assemble those streams instead, byte for byte the same, reading nulls straight from
Arrow validity bitmaps, and hash them as they go: the leaf SHA3 states are then OpenSSL's (the
SHA3 hashlib runs) and the loops build each stream 32 KiB at a time in cache and update the
state with it, asking for the next piece's input while SHA3 runs, so a column is read from
memory once, under SHA3 (``docs/logical-hash.md``, "Speed").
``threads > 1`` hashes leaf columns concurrently and builds a column's next piece while the
previous one is hashed (hashlib, the compiled loops and the Arrow kernels release the GIL).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Final, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from coordinator.data import native_stream
from coordinator.errors import DataError, UnreproducibleLogicalHash, UnsupportedArrowType
from coordinator.multiformats import Multicodec, Multihash

__all__ = [
    "LOGICAL_HASH_BATCH_SIZE",
    "LogicalHasher",
    "UnreproducibleLogicalHash",
    "WrittenFileHasher",
    "array_digest",
    "kamu_parquet_schema",
    "logical_hash",
    "physical_hash",
    "type_bytes",
]

if sys.byteorder != "little":  # pragma: no cover - every platform kamu targets is little-endian
    # arrow-digest hashes value buffers as they sit in memory; on a big-endian host the numpy
    # views below would produce different bytes.
    raise ImportError("coordinator.data.hashing requires a little-endian host")

#: Rows per record batch when kamu reads a Parquet file for hashing (``LOGICAL_HASH_BATCH_SIZE``
#: in kamu-cli ``data-utils``). Only matters for the struct-null behaviour described above.
LOGICAL_HASH_BATCH_SIZE: Final = 10_000

# Rows per piece when a stream has to be assembled (not hashed straight from a buffer). About a
# million rows keeps the temporaries at tens of MiB while amortising per-call overhead.
_CHUNK_ROWS: Final = 1 << 20
# Cap on the variable-length payload per piece, so a piece never nears Arrow's 2 GiB int32-offset
# limit and stays cache-friendly.
_CHUNK_BYTES: Final = 32 << 20
# Parquet batch size: a multiple of LOGICAL_HASH_BATCH_SIZE so kamu's 10,000-row windows never
# straddle two of our batches.
_PARQUET_READ_ROWS: Final = LOGICAL_HASH_BATCH_SIZE * 32
_PHYSICAL_READ_BYTES: Final = 8 << 20
_INT32_LIMIT: Final = 2**31 - 1

BoolArray: TypeAlias = npt.NDArray[np.bool_]
IntArray: TypeAlias = npt.NDArray[np.int64]
ByteArray: TypeAlias = npt.NDArray[np.uint8]
# Anything hashlib.update accepts that we produce: numpy byte arrays and pyarrow Buffers.
Piece: TypeAlias = Any


# --------------------------------------------------------------------------------------------
# Type bytes (arrow-digest ``schema_digest.rs::hash_data_type``)
# --------------------------------------------------------------------------------------------

_TAG_NULL: Final = 0
_TAG_INT: Final = 1
_TAG_FLOAT: Final = 2
_TAG_BINARY: Final = 3
_TAG_UTF8: Final = 4
_TAG_BOOL: Final = 5
_TAG_DECIMAL: Final = 6
_TAG_DATE: Final = 7
_TAG_TIME: Final = 8
_TAG_TIMESTAMP: Final = 9
_TAG_LIST: Final = 11
_TIME_UNIT_IDS: Final = {"s": 0, "ms": 1, "us": 2, "ns": 3}
_DATE_UNIT_DAY: Final = 0
_DATE_UNIT_MS: Final = 1


def _u16(value: int) -> bytes:
    return value.to_bytes(2, "little")


def _u64(value: int) -> bytes:
    return value.to_bytes(8, "little")


def _storage(dt: Any) -> Any:
    """The storage type of an extension type; arrow-rs only ever sees storage types."""
    while isinstance(dt, pa.BaseExtensionType):
        dt = dt.storage_type
    return dt


def _is_list_like(dt: Any) -> bool:
    t = pa.types
    return bool(t.is_list(dt) or t.is_large_list(dt) or t.is_fixed_size_list(dt))


def _is_binary_like(dt: Any) -> bool:
    t = pa.types
    return bool(
        t.is_binary(dt)
        or t.is_large_binary(dt)
        or t.is_binary_view(dt)
        or t.is_string(dt)
        or t.is_large_string(dt)
        or t.is_string_view(dt)
    )


def _unsupported(column: str, dt: Any, why: str = "") -> UnsupportedArrowType:
    detail = f" ({why})" if why else ""
    return UnsupportedArrowType(
        f"column {column!r}: Arrow type {dt} has no logical-hash encoding in arrow-digest V0 "
        f"(kamu-cli panics on it){detail}"
    )


def type_bytes(dt: pa.DataType, column: str = "?") -> bytes:
    """The bytes that seed a leaf column's SHA3 state: a ``u16`` type tag plus parameters.

    Binary flavours (incl. fixed-size and views) share tag 3 and strings tag 4 without further
    parameters; list flavours are tag 11 followed by the item type's bytes.

    Raises:
        UnsupportedArrowType: for types arrow-digest refuses (``unimplemented!()``).
    """
    dt = _storage(dt)
    t = pa.types
    if t.is_null(dt):
        return _u16(_TAG_NULL)
    if t.is_boolean(dt):
        return _u16(_TAG_BOOL)
    if t.is_integer(dt):
        signed = 1 if t.is_signed_integer(dt) else 0
        return _u16(_TAG_INT) + bytes([signed]) + _u64(dt.bit_width)
    if t.is_floating(dt):
        return _u16(_TAG_FLOAT) + _u64(dt.bit_width)
    if t.is_timestamp(dt):
        tz = dt.tz
        tz_bytes = b"\x00" if tz is None else _u64(len(tz.encode())) + tz.encode()
        return _u16(_TAG_TIMESTAMP) + _u16(_TIME_UNIT_IDS[dt.unit]) + tz_bytes
    if t.is_date32(dt):
        return _u16(_TAG_DATE) + _u64(32) + _u16(_DATE_UNIT_DAY)
    if t.is_date64(dt):
        return _u16(_TAG_DATE) + _u64(64) + _u16(_DATE_UNIT_MS)
    if t.is_time32(dt) or t.is_time64(dt):
        return _u16(_TAG_TIME) + _u64(dt.bit_width) + _u16(_TIME_UNIT_IDS[dt.unit])
    if t.is_decimal(dt):
        return _u16(_TAG_DECIMAL) + _u64(dt.bit_width) + _u64(dt.precision) + _u64(dt.scale)
    if t.is_fixed_size_binary(dt) or t.is_binary(dt) or t.is_large_binary(dt):
        return _u16(_TAG_BINARY)
    if t.is_binary_view(dt):
        return _u16(_TAG_BINARY)
    if t.is_string(dt) or t.is_large_string(dt) or t.is_string_view(dt):
        return _u16(_TAG_UTF8)
    if _is_list_like(dt):
        item = _storage(dt.value_type)
        if t.is_struct(item):
            raise _unsupported(column, dt, "lists of structs are not implemented")
        return _u16(_TAG_LIST) + type_bytes(item, column)
    raise _unsupported(column, dt)


# --------------------------------------------------------------------------------------------
# Value streams
# --------------------------------------------------------------------------------------------


class _Kind(Enum):
    NULL = auto()
    FIXED = auto()
    BOOL = auto()
    VARLEN = auto()  # binary / string / large / view: offsets + data
    FIXED_BINARY = auto()
    LIST = auto()  # list / large list
    FIXED_LIST = auto()
    STRUCT = auto()


def _kind(dt: Any) -> _Kind:
    dt = _storage(dt)
    t = pa.types
    if t.is_null(dt):
        return _Kind.NULL
    if t.is_boolean(dt):
        return _Kind.BOOL
    if t.is_struct(dt):
        return _Kind.STRUCT
    if t.is_fixed_size_binary(dt):
        return _Kind.FIXED_BINARY
    if _is_binary_like(dt):
        return _Kind.VARLEN
    if t.is_fixed_size_list(dt):
        return _Kind.FIXED_LIST
    if t.is_list(dt) or t.is_large_list(dt):
        return _Kind.LIST
    return _Kind.FIXED  # type_bytes() has already refused everything that is not fixed width


def _unwrap(arr: Any) -> Any:
    while isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    return arr


def _cumsum0(sizes: npt.NDArray[Any]) -> IntArray:
    """Exclusive-then-total prefix sum: ``[0, s0, s0+s1, ...]`` (length ``len(sizes) + 1``)."""
    out = np.empty(len(sizes) + 1, dtype=np.int64)
    out[0] = 0
    np.cumsum(sizes, out=out[1:])
    return out


def _own_nulls(arr: Any) -> BoolArray | None:
    """The array's own null mask (True = null), or None when it has no null in this slice.

    ``None`` for an all-valid bitmap mirrors arrow-rs, which drops such bitmaps when it builds
    ``ArrayData`` -- arrow-digest then sees no bitmap at all.
    """
    if arr.null_count == 0:
        return None
    bitmap = arr.buffers()[0]
    n = len(arr)
    if bitmap is None:  # only null/union arrays have nulls without a bitmap
        return np.ones(n, dtype=np.bool_)
    off = arr.offset
    first = off // 8
    count = (off + n + 7) // 8 - first
    bits = np.unpackbits(
        np.frombuffer(bitmap, dtype=np.uint8, count=count, offset=first), bitorder="little"
    )
    valid = bits[off - first * 8 : off - first * 8 + n].view(np.bool_)
    return np.logical_not(valid)


def _binary_type(large: bool) -> Any:
    return pa.large_binary() if large else pa.binary()


def _offsets_dtype(total: int) -> Any:
    """int32 offsets (``binary``) while they fit, int64 (``large_binary``) beyond 2 GiB."""
    return np.int32 if total <= _INT32_LIMIT else np.int64


def _take_pieces(offsets: npt.NDArray[Any], data: Any, pick: Any) -> ByteArray:
    """Concatenate elements ``pick`` of the binary array (``offsets``, ``data``) into bytes.

    This is the work-horse for every stream that is not a plain buffer: the caller lays out the
    pieces of the stream (prefixes, runs of values, null markers) as elements of one binary
    array and Arrow's ``take`` kernel copies the chosen ones back to back in C++ (some ten
    nanoseconds per piece, whatever its size).
    """
    large = offsets.dtype == np.int64
    count = len(offsets) - 1
    arr = pa.Array.from_buffers(
        _binary_type(large), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    taken = pc.take(arr, pick, boundscheck=False)
    n = len(taken)
    if n == 0:
        return np.empty(0, dtype=np.uint8)
    off_type = np.int64 if large else np.int32
    ends = np.frombuffer(taken.buffers()[1], dtype=off_type, count=n + 1)
    return np.frombuffer(taken.buffers()[2], dtype=np.uint8, count=int(ends[n] - ends[0]))


def _fixed_stream(values: ByteArray, width: int, null: BoolArray | None) -> ByteArray:
    """Stream of a fixed-width column: the raw values, a null becomes one ``0x00`` byte.

    With nulls, the stream is every run of valid values followed by ``m`` bytes for the run of
    ``m`` nulls after it. One ``take`` copies each such pair as a single element straight from
    the values buffer (the ``m`` bytes are the first bytes of the null run's slots, whatever
    they hold), skipping the rest of the null run; the null bytes are then zeroed in the copy,
    where the ``c``-th null (from 0) of row ``i`` sits at ``i * width - c * (width - 1)``. So
    the values are read once and never copied to be zeroed first, and the work per row is a
    few vectorised passes over the null mask.
    """
    if null is None:
        return values
    n = len(null)
    # compiled loop when built (make setup)
    native = native_stream.fixed(values, width, native_stream.bitmap_of(null), n)
    if native is not None:
        return native
    if width == 1:  # one byte per row either way
        buf = values.copy()
        buf[null] = 0
        return buf
    # Edges of the null runs (where the mask flips, plus 0 / n if it starts / ends null):
    # starts at even positions, ends at odd ones.
    edges = np.flatnonzero(null[1:] != null[:-1]) + 1
    if null[0] or null[-1]:
        head = np.array([0] if null[0] else [], dtype=np.int64)
        tail = np.array([n] if null[-1] else [], dtype=np.int64)
        edges = np.concatenate((head, edges, tail))
    starts = edges[0::2]
    ends = edges[1::2]
    lengths = ends - starts
    runs = len(starts)
    if runs == 0:
        return values
    # Elements: [valid run + m bytes of the null run] (taken), [rest of the null run]
    # (skipped), ..., [trailing valid run] (taken, maybe empty).
    offsets = np.empty(2 * runs + 2, dtype=_offsets_dtype(n * width))
    offsets[0] = 0
    offsets[1 : 2 * runs : 2] = starts * width + lengths
    offsets[2 : 2 * runs + 1 : 2] = ends * width
    offsets[2 * runs + 1] = n * width
    stream = _take_pieces(offsets, values, np.arange(0, 2 * runs + 1, 2, dtype=np.int64))
    if not stream.flags.writeable or np.may_share_memory(stream, values):
        stream = stream.copy()  # never zero bytes in a buffer someone else owns
    # Null j of run r (``before[r]`` nulls precede the run) is row starts[r] + j and null
    # number before[r] + j, so it lands at starts[r] * width - before[r] * (width - 1) + j.
    before = _cumsum0(lengths)
    first = starts * width - before[:-1] * (width - 1)
    total = int(before[-1])
    stream[np.repeat(first - before[:-1], lengths) + np.arange(total, dtype=np.int64)] = 0
    return stream


class _PickCache:
    """``take`` layouts that only depend on the row count, reused across equal-sized chunks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: dict[int, npt.NDArray[Any]] = {}
        self._picks: dict[int, Any] = {}
        self._picks32: dict[int, npt.NDArray[np.int32]] = {}

    def head(self, n: int) -> npt.NDArray[np.int32]:
        """``[0, 8, ..., 8n]``: the offsets of n 8-byte prefixes (int32)."""
        with self._lock:
            head = self._heads.get(n)
            if head is None:
                head = np.arange(0, 8 * n + 1, 8, dtype=np.int32)
                self._remember(self._heads, n, head)
            return head

    def pick(self, n: int) -> Any:
        """``[0, n+2, 1, n+3, ...]``: prefix i then body i, for chunks without nulls."""
        with self._lock:
            pick = self._picks.get(n)
            if pick is None:
                # int64 indices: Arrow's binary take ran ~10% faster with them than with int32.
                pick = pa.array(_interleaved(n, np.int64))
                self._remember(self._picks, n, pick)
            return pick

    def pick32(self, n: int) -> npt.NDArray[np.int32]:
        """:meth:`pick` as an int32 numpy array, for callers that edit a copy of it.

        Chunks with nulls copy this and repoint their null rows: at half the size of the
        int64 layout the copy stays in cache, which measured that step ~3x faster (2 vs 7.5 ns
        a row on 64Ki-row string pieces) with ``take`` itself unchanged. Only for ``2n + 2``
        elements that fit int32 (chunks are at most ``_CHUNK_ROWS`` rows).
        """
        with self._lock:
            pick = self._picks32.get(n)
            if pick is None:
                pick = _interleaved(n, np.int32)
                pick.flags.writeable = False
                self._remember(self._picks32, n, pick)
            return pick

    @staticmethod
    def _remember(cache: dict[int, Any], n: int, value: Any) -> None:
        if len(cache) >= 2:  # full chunks repeat one size; bound memory when they do not
            cache.pop(next(iter(cache)))
        cache[n] = value


_PICKS: Final = _PickCache()


_Index = TypeVar("_Index", np.int32, np.int64)  # the take layouts' index types


def _interleaved(n: int, dtype: type[_Index]) -> npt.NDArray[_Index]:
    """``[0, n+2, 1, n+3, ...]`` as a fresh ``dtype`` array: the layout of
    :meth:`_PickCache.pick` and :meth:`_PickCache.pick32`, and of chunks too long for int32
    indices (``dtype`` int64, not cached)."""
    rows = np.arange(n, dtype=dtype)
    pick = np.empty(2 * n, dtype=dtype)
    pick[0::2] = rows
    pick[1::2] = rows + (n + 2)
    return pick


def _prefixed_stream(
    null: BoolArray | None,
    body: Any,
    body_offsets: npt.NDArray[Any],
    prefix: IntArray | None = None,
) -> ByteArray:
    """Stream ``u64 prefix[i] || body[i]`` per row, or a single ``0x00`` for a null row.

    ``body[i]`` is ``body[body_offsets[i] - body_offsets[0] : body_offsets[i + 1] - ...]``.
    ``prefix`` defaults to the body lengths (strings and binaries); lists pass element counts
    and the child's stream as the body. A null row's body is skipped even if it holds bytes.
    """
    valid = None if null is None else native_stream.bitmap_of(null)
    native = native_stream.prefixed(valid, body, body_offsets, prefix)  # compiled loop when built
    if native is not None:
        return native
    n = len(body_offsets) - 1
    base = int(body_offsets[0])
    body_bytes = int(body_offsets[-1]) - base
    head_bytes = 8 * n + 1
    # One buffer: [n u64 prefixes][0x00 marker][body]; elements: prefix 0..n-1, marker (n),
    # empty (n+1), body 0..n-1 (n+2..).
    data = np.empty(head_bytes + body_bytes, dtype=np.uint8)
    prefixes = data[: 8 * n].view(np.int64)
    if prefix is None:
        np.subtract(body_offsets[1:], body_offsets[:-1], out=prefixes, casting="unsafe")
    else:
        prefixes[:] = prefix
    data[8 * n] = 0
    if body_bytes:
        data[head_bytes:] = np.frombuffer(body, dtype=np.uint8, count=body_bytes)
    off_type = _offsets_dtype(head_bytes + body_bytes)
    if off_type == np.int64:
        body_offsets = body_offsets.astype(np.int64)
    offsets = np.empty(2 * n + 3, dtype=off_type)
    offsets[: n + 1] = _PICKS.head(n) if off_type == np.int32 else np.arange(0, 8 * n + 1, 8)
    offsets[n + 1] = head_bytes
    offsets[n + 2] = head_bytes
    np.add(body_offsets[1:], head_bytes - base, out=offsets[n + 3 :], casting="unsafe")
    if null is None:
        return _take_pieces(offsets, data, _PICKS.pick(n))
    # Start from the no-null layout and point null rows at the marker and the empty element.
    pick = _PICKS.pick32(n).copy() if 2 * n + 2 <= _INT32_LIMIT else _interleaved(n, np.int64)
    null_rows = np.flatnonzero(null)
    pick[2 * null_rows] = n
    pick[2 * null_rows + 1] = n + 1
    return _take_pieces(offsets, data, pick)


def _varlen_parts(arr: Any) -> tuple[npt.NDArray[Any], Any]:
    """Absolute value offsets (``n + 1``, int32 or int64) and the data buffer of a binary-like
    array (views are first gathered into a ``large_binary``)."""
    dt = _storage(arr.type)
    n = len(arr)
    t = pa.types
    if t.is_binary_view(dt) or t.is_string_view(dt):
        # Views hash like their plain counterparts; let Arrow gather them into one buffer. The
        # validity bitmap is dropped first so null slots keep their bytes (arrow-digest hashes
        # them as values under its struct-null bug).
        bufs = arr.buffers()
        plain = pa.Array.from_buffers(pa.binary_view(), n, [None, *bufs[1:]], offset=arr.offset)
        arr = plain.cast(pa.large_binary())
        dt = arr.type
    if t.is_fixed_size_binary(dt):
        width = dt.byte_width
        offsets = np.arange(arr.offset * width, (arr.offset + n) * width + 1, width or 1)
        if width == 0:
            offsets = np.zeros(n + 1, dtype=np.int64)
        return offsets.astype(np.int64, copy=False), arr.buffers()[1]
    off_type = np.int64 if (t.is_large_binary(dt) or t.is_large_string(dt)) else np.int32
    bufs = arr.buffers()
    itemsize = np.dtype(off_type).itemsize
    offsets = np.frombuffer(bufs[1], dtype=off_type, count=n + 1, offset=arr.offset * itemsize)
    data = bufs[2] if bufs[2] is not None else b""
    return offsets, data


def _slice_data(data: Any, start: int, stop: int) -> Any:
    if stop <= start:
        return b""
    return np.frombuffer(data, dtype=np.uint8, count=stop - start, offset=start)


@dataclass(slots=True)
class _Encoded:
    """A stream plus, when a parent list needs them, the byte offsets of each element in it."""

    stream: Any
    offsets: IntArray | None


def _encode(arr: Any, null: BoolArray | None, *, want_offsets: bool, column: str) -> _Encoded:
    """Build the value stream of ``arr`` with effective null mask ``null``."""
    arr = _unwrap(arr)
    kind = _kind(arr.type)
    n = len(arr)
    if n == 0 and kind is not _Kind.NULL:  # empty arrays may come without data buffers
        return _Encoded(np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    if kind is _Kind.FIXED:
        width = arr.type.bit_width // 8
        values = np.frombuffer(
            arr.buffers()[1], dtype=np.uint8, count=n * width, offset=arr.offset * width
        )
        stream = _fixed_stream(values, width, null)
        offs = None
        if want_offsets:
            offs = (
                np.arange(0, n * width + 1, width, dtype=np.int64)
                if null is None
                else _cumsum0(np.where(null, 1, width))
            )
        return _Encoded(stream, offs)
    if kind is _Kind.BOOL:
        return _Encoded(_bool_stream(arr, null), np.arange(n + 1) if want_offsets else None)
    if kind in (_Kind.VARLEN, _Kind.FIXED_BINARY):
        offsets, data = _varlen_parts(arr)
        start, stop = int(offsets[0]), int(offsets[-1])
        stream = _prefixed_stream(null, _slice_data(data, start, stop), offsets)
        offs = None
        if want_offsets:
            sizes = np.diff(offsets) + 8
            offs = _cumsum0(np.where(null, 1, sizes) if null is not None else sizes)
        return _Encoded(stream, offs)
    if kind in (_Kind.LIST, _Kind.FIXED_LIST):
        return _encode_list(arr, null, want_offsets=want_offsets, column=column)
    if kind is _Kind.NULL:
        raise _unsupported(column, arr.type, "Null arrays cannot be hashed")
    raise _unsupported(column, arr.type)


def _bool_stream(arr: Any, null: BoolArray | None) -> ByteArray:
    n = len(arr)
    off = arr.offset
    valid = None if null is None else native_stream.bitmap_of(null)
    native = native_stream.booleans((arr.buffers()[1], off), valid, n)
    if native is not None:
        return native
    first = off // 8
    count = (off + n + 7) // 8 - first
    bits = np.unpackbits(
        np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=count, offset=first),
        bitorder="little",
    )
    stream = bits[off - first * 8 : off - first * 8 + n] + np.uint8(1)
    if null is not None:
        stream[null] = 0
    return stream


def _list_bounds(arr: Any) -> npt.NDArray[Any]:
    """Absolute child offsets (``n + 1``) of the rows of a list-like array."""
    n = len(arr)
    dt = _storage(arr.type)
    if pa.types.is_fixed_size_list(dt):
        size = int(dt.list_size)
        bounds: IntArray = (np.arange(n + 1, dtype=np.int64) + int(arr.offset)) * size
        return bounds
    off_type = np.int64 if pa.types.is_large_list(dt) else np.int32
    item = np.dtype(off_type).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=off_type, count=n + 1, offset=arr.offset * item)


def _encode_list(arr: Any, null: BoolArray | None, *, want_offsets: bool, column: str) -> _Encoded:
    n = len(arr)
    bounds = _list_bounds(arr).astype(np.int64, copy=False)
    child_start, child_stop = int(bounds[0]), int(bounds[-1])
    child = _unwrap(arr.values).slice(child_start, child_stop - child_start)
    rel = bounds - child_start
    counts = np.diff(bounds)
    if _kind(child.type) is _Kind.NULL:
        valid_rows = n if null is None else n - int(np.count_nonzero(null))
        if valid_rows:
            raise _unsupported(column, arr.type, "lists of Null cannot be hashed")
        return _Encoded(np.zeros(n, dtype=np.uint8), np.arange(n + 1) if want_offsets else None)
    # Inside a list row arrow-digest hashes the child slice with its *own* validity only.
    encoded = _encode(child, _own_nulls(child), want_offsets=True, column=column)
    assert encoded.offsets is not None
    body_offsets = encoded.offsets[rel]
    stream = _prefixed_stream(null, encoded.stream, body_offsets, prefix=counts)
    offs = None
    if want_offsets:
        sizes = np.diff(body_offsets) + 8
        offs = _cumsum0(np.where(null, 1, sizes) if null is not None else sizes)
    return _Encoded(stream, offs)


def _row_chunks(arr: Any, kind: _Kind) -> Iterator[tuple[int, int]]:
    """Split ``arr`` into row ranges small enough to assemble in memory.

    Variable-length columns are cut by payload bytes and lists by child elements as well as by
    rows, so one piece stays around ``_CHUNK_BYTES`` however long the values are.
    """
    n = len(arr)
    dt = _storage(arr.type)
    if (
        n
        and kind in (_Kind.VARLEN, _Kind.LIST)
        and not (pa.types.is_binary_view(dt) or pa.types.is_string_view(dt))
    ):
        if kind is _Kind.VARLEN:
            bounds = _varlen_parts(arr)[0]
            budget = _CHUNK_BYTES
            # Strings spend most of their time in Arrow's take (one variable-size copy per
            # value); 64Ki-row pieces keep its input and output in cache, ~10% faster than
            # 1Mi rows (make bench-hash).
            row_cap = max(1, _CHUNK_ROWS // 16)
        else:
            bounds = _list_bounds(arr)
            budget = _CHUNK_BYTES // 8
            row_cap = _CHUNK_ROWS
        top = int(np.iinfo(bounds.dtype).max)
        start = 0
        while start < n:
            limit = bounds.dtype.type(min(int(bounds[start]) + budget, top))
            stop = int(np.searchsorted(bounds, limit, side="right")) - 1
            stop = min(max(stop, start + 1), start + row_cap, n)
            yield start, stop
            start = stop
        return
    # Fixed-width pieces are cheap per row; a quarter of the row cap keeps their temporaries
    # (values copy, run offsets, output) cache-resident, which measured ~15% faster.
    rows = _CHUNK_ROWS if kind is not _Kind.FIXED else max(1, _CHUNK_ROWS // 4)
    if kind is _Kind.FIXED_LIST:
        rows = max(1, min(_CHUNK_ROWS, (_CHUNK_BYTES // 8) // max(1, dt.list_size)))
    for start in range(0, n, rows):
        yield start, min(n, start + rows)


def _leaf_pieces(arr: Any, null: BoolArray | None, column: str) -> Iterator[Piece]:
    """The stream of a top-level (or struct-child) leaf as a sequence of hashable pieces.

    A piece may be a view of a staging buffer that a later piece reuses: consume each piece
    (hash it) before the generator has advanced twice more.
    """
    arr = _unwrap(arr)
    kind = _kind(arr.type)
    if kind is _Kind.NULL:
        raise _unsupported(column, arr.type, "Null arrays cannot be hashed")
    if len(arr) == 0:
        return
    if kind is _Kind.FIXED and null is None:
        width = arr.type.bit_width // 8
        # Zero-copy: the Arrow buffer already is the stream.
        yield arr.buffers()[1].slice(arr.offset * width, len(arr) * width)
        return
    staged = _staged_pieces(arr, kind, None if null is None else native_stream.bitmap_of(null))
    if staged is not None:
        yield from staged
        return
    for start, stop in _row_chunks(arr, kind):
        part = arr.slice(start, stop - start)
        part_null = None if null is None else null[start:stop]
        if part_null is not None and not part_null.any():
            part_null = None
        yield _encode(part, part_null, want_offsets=False, column=column).stream


def _staged_pieces(
    arr: Any, kind: _Kind, valid: native_stream.Bitmap | None
) -> Iterator[Piece] | None:
    """The stream of a non-empty fixed-width, boolean or binary-like leaf built by the compiled
    loops a staging buffer at a time, with validity bitmap ``valid`` (None: no nulls); None
    without the library or for other kinds (lists take :func:`_encode`)."""
    if native_stream.LIB is None:
        return None
    n = len(arr)
    if kind is _Kind.FIXED:
        width = arr.type.bit_width // 8
        values = np.frombuffer(
            arr.buffers()[1], dtype=np.uint8, count=n * width, offset=arr.offset * width
        )
        return native_stream.fixed_pieces(values, width, valid, n)
    if kind is _Kind.BOOL:
        return native_stream.booleans_pieces((arr.buffers()[1], arr.offset), valid, n)
    if kind is _Kind.FIXED_BINARY or (kind is _Kind.VARLEN and not _is_view(arr.type)):
        offsets, data = _varlen_parts(arr)
        body = _slice_data(data, int(offsets[0]), int(offsets[-1]))
        return native_stream.prefixed_pieces(valid, body, offsets)
    if kind is _Kind.VARLEN:  # views: gathered a row range at a time
        return _view_pieces(arr, valid)
    return None


def _is_view(dt: Any) -> bool:
    dt = _storage(dt)
    return bool(pa.types.is_binary_view(dt) or pa.types.is_string_view(dt))


def _view_pieces(arr: Any, valid: native_stream.Bitmap | None) -> Iterator[Piece]:
    """Staged pieces of a binary or string view column, gathered into a plain binary array
    ``_CHUNK_ROWS`` rows at a time (bounded memory, as :func:`_row_chunks` cuts them)."""
    for start, stop in _row_chunks(arr, _Kind.VARLEN):
        offsets, data = _varlen_parts(arr.slice(start, stop - start))
        body = _slice_data(data, int(offsets[0]), int(offsets[-1]))
        part_valid = None if valid is None else (valid[0], int(valid[1]) + start)
        pieces = native_stream.prefixed_pieces(part_valid, body, offsets)
        if pieces is None:  # the library was switched off meanwhile (tests)
            raise DataError("the compiled stream assembly went away while hashing")
        yield from pieces


def _sha3(seed: bytes) -> Any:
    """A SHA3-256 state seeded with ``seed``: OpenSSL's, updated by the compiled loops
    (:class:`native_stream.Sha3Native`) when they are built, else hashlib's (the same SHA3)."""
    state = native_stream.new_sha3(seed)
    return state if state is not None else hashlib.sha3_256(seed)


def _fused(state: native_stream.Sha3Native, arr: Any, valid: native_stream.Bitmap | None) -> bool:
    """Hash the stream of a leaf straight into ``state`` with the compiled loops, which build it
    a cache-sized piece at a time (``native/odf_stream.c``, "fused with hashing"); ``valid`` is
    the validity bitmap (None: no nulls). False, having hashed nothing, for kinds they do not
    build (lists) or without the library."""
    kind = _kind(arr.type)
    n = len(arr)
    if native_stream.LIB is None or kind not in _STAGED_KINDS:
        return False
    if n == 0:
        return True
    if kind is _Kind.FIXED:
        width = arr.type.bit_width // 8
        values = np.frombuffer(
            arr.buffers()[1], dtype=np.uint8, count=n * width, offset=arr.offset * width
        )
        if valid is None:  # the Arrow buffer is the stream
            state.update(values)
            return True
        return native_stream.hash_fixed(state, values, width, valid, n)
    if kind is _Kind.BOOL:
        return native_stream.hash_booleans(state, (arr.buffers()[1], arr.offset), valid, n)
    if not _is_view(arr.type):
        offsets, data = _varlen_parts(arr)
        body = _slice_data(data, int(offsets[0]), int(offsets[-1]))
        return native_stream.hash_prefixed(state, valid, body, offsets)
    for start, stop in _row_chunks(arr, _Kind.VARLEN):  # views: gathered a range at a time
        offsets, data = _varlen_parts(arr.slice(start, stop - start))
        body = _slice_data(data, int(offsets[0]), int(offsets[-1]))
        part_valid = None if valid is None else (valid[0], int(valid[1]) + start)
        if not native_stream.hash_prefixed(state, part_valid, body, offsets):
            raise DataError("the compiled stream assembly went away while hashing")
    return True


_STAGED_KINDS: Final = frozenset((_Kind.FIXED, _Kind.BOOL, _Kind.VARLEN, _Kind.FIXED_BINARY))


def _hash_own_leaf(state: Any, arr: Any, column: str) -> None:
    """Hash the stream of a leaf whose nulls are its own into ``state`` (see
    :func:`_own_leaf_pieces`), fused with the compiled loops when it can be."""
    arr = _unwrap(arr)
    if _kind(arr.type) is _Kind.NULL:
        raise _unsupported(column, arr.type, "Null arrays cannot be hashed")
    if isinstance(state, native_stream.Sha3Native):
        bitmap = arr.buffers()[0] if arr.null_count else None
        if (arr.null_count == 0 or bitmap is not None) and _fused(
            state, arr, None if bitmap is None else (bitmap, arr.offset)
        ):
            return
    for piece in _own_leaf_pieces(arr, column):
        state.update(piece)


def _own_leaf_pieces(arr: Any, column: str) -> Iterator[Piece]:
    """:func:`_leaf_pieces` of a leaf whose nulls are its own (a top-level column, an array).

    With the compiled loops the validity bitmap goes to C as Arrow holds it (buffer and bit
    offset of row 0), so nulls cost no numpy mask and no allocation per row. Lists, and every
    type without the library, take the null-mask path.
    """
    arr = _unwrap(arr)
    kind = _kind(arr.type)
    if arr.null_count == 0:
        yield from _leaf_pieces(arr, None, column)
        return
    bitmap = arr.buffers()[0]
    if bitmap is not None and len(arr):  # no bitmap: Null arrays, refused by _leaf_pieces
        staged = _staged_pieces(arr, kind, (bitmap, arr.offset))
        if staged is not None:
            yield from staged
            return
    yield from _leaf_pieces(arr, _own_nulls(arr), column)


# --------------------------------------------------------------------------------------------
# Struct validity (arrow-digest ``utils.rs::maybe_combine_null_buffers``), per kamu batch
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Windows:
    """kamu's record batches within one of our batches: starts and lengths."""

    starts: IntArray
    lengths: IntArray

    @classmethod
    def of(cls, n: int, window_rows: int | None) -> _Windows:
        if n == 0:
            empty = np.empty(0, dtype=np.int64)
            return cls(empty, empty)
        step = n if window_rows is None else window_rows
        starts = np.arange(0, n, step, dtype=np.int64)
        lengths = np.diff(np.append(starts, n))
        return cls(starts, lengths)

    def any(self, mask: BoolArray) -> BoolArray:
        """Per window: does ``mask`` have a True in it?"""
        return np.logical_or.reduceat(mask, self.starts)

    def rows(self, per_window: BoolArray) -> BoolArray:
        return np.repeat(per_window, self.lengths)


@dataclass(slots=True)
class _Validity:
    """A combined null buffer as arrow-digest holds it, one state per kamu batch (window).

    ``present[w]``: arrow-digest holds ``Some(buffer)`` in window ``w``; ``has_nulls[w]``: and
    that buffer has at least one null. ``null`` is True for null rows of present windows only.
    """

    null: BoolArray
    present: BoolArray
    has_nulls: BoolArray


def _combine(parent: _Validity | None, own: BoolArray | None, win: _Windows) -> _Validity | None:
    """``maybe_combine_null_buffers(parent, own)`` evaluated independently in every window.

    Per window: no parent -> own (if it has nulls); parent with nulls and own without -> parent;
    both with nulls -> bitwise OR of validity (arrow-digest's bug: null only where both are);
    anything else (including a present parent without nulls) -> no buffer at all.
    """
    nwin = len(win.starts)
    own_has = win.any(own) if own is not None else np.zeros(nwin, dtype=np.bool_)
    if parent is None:
        if own is None or not own_has.any():
            return None
        return _Validity(own, own_has, own_has)
    both = parent.has_nulls & own_has
    parent_only = parent.has_nulls & ~own_has
    own_only = ~parent.present & own_has
    present = parent.has_nulls | own_only
    if not present.any():
        return None
    own_z = own if own is not None else np.zeros(len(parent.null), dtype=np.bool_)
    null = (parent.null & (win.rows(parent_only) | (win.rows(both) & own_z))) | (
        win.rows(own_only) & own_z
    )
    return _Validity(null, present, present & win.any(null))


# --------------------------------------------------------------------------------------------
# Record digest
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Leaf:
    column: str  # dotted path, for messages
    type: Any


def _value_compatible(expected: Any, actual: Any) -> bool:
    """Would an array of type ``actual`` produce the same stream as one of type ``expected``?"""
    expected, actual = _storage(expected), _storage(actual)
    if expected == actual:
        return True
    t = pa.types
    if _is_binary_like(expected) and _is_binary_like(actual):
        return True
    if t.is_timestamp(expected) and t.is_timestamp(actual):
        return bool(expected.unit == actual.unit)
    if t.is_struct(expected) and t.is_struct(actual):
        return expected.num_fields == actual.num_fields and all(
            _value_compatible(expected.field(i).type, actual.field(i).type)
            for i in range(expected.num_fields)
        )
    if _is_list_like(expected) and _is_list_like(actual):
        return _value_compatible(expected.value_type, actual.value_type)
    return False


class LogicalHasher:
    """Incremental ``RecordDigestV0<Sha3_256>``: create with a schema, ``update`` per batch.

    The schema's types decide the type bytes; batches may use any value-compatible types (e.g.
    ``large_string`` for ``string``, another timezone string for a timestamp of the same unit).

    Args:
        schema: the Arrow schema kamu would see (for Parquet: see :func:`kamu_parquet_schema`).
        threads: hash up to this many leaf columns concurrently (hashlib and the Arrow kernels
            release the GIL). ``1`` hashes sequentially in the calling thread.

    Raises:
        UnsupportedArrowType: a field has a type arrow-digest cannot hash.
    """

    def __init__(self, schema: pa.Schema, *, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self._schema = schema
        self._record = hashlib.sha3_256()
        self._leaves: list[_Leaf] = []
        self._columns: list[Any] = []
        self._walk_fields(list(schema), 0, "")
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None  # one job per leaf column and batch
        self._digest_pool: ThreadPoolExecutor | None = None  # hashes pieces behind the jobs
        self._done = False

    def _walk_fields(self, fields: Sequence[Any], level: int, prefix: str) -> None:
        for field in fields:
            name = field.name.encode()
            self._record.update(_u64(len(name)) + name + _u64(level))
            column = prefix + field.name
            dt = _storage(field.type)
            if pa.types.is_struct(dt):
                children = [dt.field(i) for i in range(dt.num_fields)]
                self._walk_fields(children, level + 1, column + ".")
            else:
                self._columns.append(_sha3(type_bytes(dt, column)))
                self._leaves.append(_Leaf(column, dt))

    @property
    def schema(self) -> pa.Schema:
        """The schema the digest is computed for."""
        return self._schema

    def update(
        self,
        batch: pa.RecordBatch,
        *,
        window_rows: int | None = None,
        refuse_stale_slots: bool = False,
    ) -> None:
        """Hash one record batch.

        Args:
            batch: columns in schema order with value-compatible types.
            window_rows: kamu's batch size if ``batch`` stands for several consecutive kamu
                batches of this many rows (the first starting at row 0). Only struct columns
                with nulls at two levels are sensitive to it; ``None`` = one kamu batch.
            refuse_stale_slots: raise :class:`UnreproducibleLogicalHash` instead of hashing
                null slots that arrow-digest's OR bug treats as values, where the slot content
                comes from a different reader (used for Parquet input).
        """
        if self._done:
            raise DataError("LogicalHasher.update() after finalize()")
        if window_rows is not None and window_rows < 1:
            raise ValueError("window_rows must be >= 1")
        if batch.num_columns != len(self._schema):
            raise DataError(
                f"batch has {batch.num_columns} columns, schema has {len(self._schema)}"
            )
        win = _Windows.of(batch.num_rows, window_rows)
        jobs: list[tuple[int, Any, _Validity | None]] = []
        self._collect(list(self._schema), list(batch.columns), None, win, jobs, [0])
        if self._threads == 1 or len(jobs) == 1 or batch.num_rows < 65_536:
            for job in jobs:
                self._hash_leaf(*job, win, refuse_stale_slots)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="logical-hash")
            self._digest_pool = ThreadPoolExecutor(
                self._threads, thread_name_prefix="logical-hash-sha3"
            )
        # Biggest columns first, so the small ones fill in around them.
        jobs.sort(key=lambda job: -int(job[1].nbytes))
        futures = [
            self._pool.submit(self._hash_leaf, *job, win, refuse_stale_slots) for job in jobs
        ]
        for future in futures:
            future.result()

    def _collect(
        self,
        fields: Sequence[Any],
        arrays: Sequence[Any],
        parent: _Validity | None,
        win: _Windows,
        jobs: list[tuple[int, Any, _Validity | None]],
        counter: list[int],
    ) -> None:
        for field, column in zip(fields, arrays, strict=True):
            arr = _unwrap(column)
            dt = _storage(field.type)
            if pa.types.is_struct(dt):
                if not pa.types.is_struct(arr.type):
                    raise DataError(f"field {field.name!r}: expected a struct, got {arr.type}")
                combined = _combine(parent, _own_nulls(arr), win)
                child_fields = [dt.field(i) for i in range(dt.num_fields)]
                children = [arr.field(i) for i in range(arr.type.num_fields)]
                self._collect(child_fields, children, combined, win, jobs, counter)
                continue
            index = counter[0]
            counter[0] += 1
            leaf = self._leaves[index]
            if not _value_compatible(leaf.type, arr.type):
                raise DataError(
                    f"column {leaf.column!r}: batch type {arr.type} does not match schema "
                    f"type {leaf.type}"
                )
            jobs.append((index, arr, parent))

    def _hash_leaf(
        self,
        index: int,
        arr: Any,
        parent: _Validity | None,
        win: _Windows,
        refuse_stale_slots: bool,
    ) -> None:
        leaf = self._leaves[index]
        if _kind(arr.type) is _Kind.NULL:  # arrow-digest panics on any batch of a Null column
            raise _unsupported(leaf.column, arr.type, "Null arrays cannot be hashed")
        hasher = self._columns[index]
        native = isinstance(hasher, native_stream.Sha3Native)
        pieces: Iterator[Piece]
        if parent is None:  # the column's own validity: its bitmap goes straight to C
            if native:  # fused with hashing (what it cannot build comes as pieces)
                _hash_own_leaf(hasher, arr, leaf.column)
                return
            pieces = _own_leaf_pieces(arr, leaf.column)
        else:
            own = _own_nulls(arr)
            combined = _combine(parent, own, win)
            null = combined.null if combined is not None and combined.null.any() else None
            if own is not None:
                stale = own if null is None else own & ~null
                if stale.any():
                    self._check_stale(leaf, arr, stale, refuse_stale_slots)
            valid = None if null is None else native_stream.bitmap_of(null)
            if native and len(arr) and _fused(hasher, _unwrap(arr), valid):
                return
            pieces = _leaf_pieces(arr, null, leaf.column)
        if self._digest_pool is None:
            for piece in pieces:
                hasher.update(piece)
            return
        # Pipeline: build piece k+1 here while another thread hashes piece k. A leaf's pieces
        # are hashed strictly in order because each waits for the previous one.
        pending: Future[None] | None = None
        try:
            for piece in pieces:
                if pending is not None:
                    pending.result()
                pending = self._digest_pool.submit(hasher.update, piece)
        finally:
            if pending is not None:
                pending.result()

    @staticmethod
    def _check_stale(leaf: _Leaf, arr: Any, stale: BoolArray, refuse: bool) -> None:
        """Null slots that arrow-digest hashes as values (struct-OR bug).

        For Parquet input kamu sees whatever arrow-rs's reader left in the slot: empty values
        for strings/binaries/lists (which is what pyarrow gives too), stale bytes for
        primitives (irreproducible, so refused).
        """
        if not refuse:
            return
        arr = _unwrap(arr)
        kind = _kind(arr.type)
        if kind is _Kind.VARLEN or kind is _Kind.LIST:
            bounds = _varlen_parts(arr)[0] if kind is _Kind.VARLEN else _list_bounds(arr)
            if not np.diff(bounds)[stale].any():
                return
        raise UnreproducibleLogicalHash(
            f"column {leaf.column!r}: {int(stale.sum())} null value(s) under a valid struct row "
            "would be hashed by kamu as stale reader bytes (arrow-digest struct-null OR bug); "
            "kamu's logical hash of this file cannot be reproduced"
        )

    def finalize(self) -> Multihash:
        """Finish and return the ``arrow0-sha3-256`` multihash (the hasher is then closed)."""
        if self._done:
            raise DataError("LogicalHasher.finalize() called twice")
        self._done = True
        self._shutdown(cancel=False)
        for column in self._columns:
            self._record.update(column.digest())
        return Multihash(Multicodec.ARROW0_SHA3_256, self._record.digest())

    def __enter__(self) -> LogicalHasher:
        return self

    def __exit__(self, *exc: object) -> None:
        self._shutdown(cancel=True)

    def _shutdown(self, *, cancel: bool) -> None:
        for pool in (self._pool, self._digest_pool):
            if pool is not None:
                pool.shutdown(cancel_futures=cancel)
        self._pool = self._digest_pool = None


def array_digest(array: pa.Array | pa.ChunkedArray) -> bytes:
    """``ArrayDigestV0<Sha3_256>::digest`` of one array: type bytes then the value stream.

    Raises:
        UnsupportedArrowType: for struct arrays (arrow-digest only hashes them via records) and
            every type :func:`type_bytes` refuses.
    """
    dt = _storage(array.type)
    if pa.types.is_struct(dt):
        raise _unsupported("<array>", dt, "structs are only hashed as part of a record")
    hasher = _sha3(type_bytes(dt, "<array>"))
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    for chunk in chunks:
        _hash_own_leaf(hasher, chunk, "<array>")
    digest: bytes = hasher.digest()
    return digest


# --------------------------------------------------------------------------------------------
# Parquet: the schema arrow-rs's reader produces (arrow-rs parquet/src/arrow/schema/primitive.rs)
# --------------------------------------------------------------------------------------------


def _parquet_logical(column: Any) -> dict[str, Any]:
    info: dict[str, Any] = json.loads(column.logical_type.to_json())
    return info


def _arrow_unit(unit: str) -> str:
    return {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}[unit]


def _rs_from_parquet(column: Any) -> Any:
    """arrow-rs ``from_parquet``: the Arrow type of a Parquet leaf before any schema hint."""
    physical = column.physical_type
    logical = _parquet_logical(column)
    ltype = str(logical.get("Type", "None")).lower()
    converted = column.converted_type
    if ltype == "none":
        ltype = ""
    where = column.path

    def bad() -> UnsupportedArrowType:
        return UnsupportedArrowType(
            f"column {where!r}: arrow-rs cannot read Parquet {physical} with logical type "
            f"{logical} / converted type {converted}"
        )

    def integer_fallback(by_converted: dict[str, Any]) -> Any:
        # An INT32 / INT64 leaf whose logical type none of its own arm took: a decimal, else
        # (no logical type at all) by its legacy converted type.
        if ltype == "decimal":
            return pa.decimal128(logical["precision"], logical["scale"])
        if ltype:
            raise bad()
        if converted == "DECIMAL":
            return pa.decimal128(column.precision, column.scale)
        if converted not in by_converted:
            raise bad()
        return by_converted[converted]

    if physical == "BOOLEAN":
        return pa.bool_()
    if physical == "FLOAT":
        return pa.float32()
    if physical == "DOUBLE":
        return pa.float64()
    if physical == "INT96":
        return pa.timestamp("ns")
    if physical == "INT32":
        if ltype == "int":
            key = (logical["bitWidth"], logical["isSigned"])
            ints = {
                (8, True): pa.int8(),
                (16, True): pa.int16(),
                (32, True): pa.int32(),
                (8, False): pa.uint8(),
                (16, False): pa.uint16(),
                (32, False): pa.uint32(),
            }
            if key not in ints:
                raise bad()
            return ints[key]
        if ltype == "date":
            return pa.date32()
        if ltype == "time":
            if _arrow_unit(logical["timeUnit"]) != "ms":
                raise bad()
            return pa.time32("ms")
        if ltype in ("null", "unknown"):
            return pa.null()
        return integer_fallback(
            {
                "NONE": pa.int32(),
                "UINT_8": pa.uint8(),
                "UINT_16": pa.uint16(),
                "UINT_32": pa.uint32(),
                "INT_8": pa.int8(),
                "INT_16": pa.int16(),
                "INT_32": pa.int32(),
                "DATE": pa.date32(),
                "TIME_MILLIS": pa.time32("ms"),
            }
        )
    if physical == "INT64":
        if ltype == "int":
            if logical["bitWidth"] != 64:
                raise bad()
            return pa.int64() if logical["isSigned"] else pa.uint64()
        if ltype == "time":
            unit = _arrow_unit(logical["timeUnit"])
            if unit == "ms":
                raise bad()
            return pa.time64(unit)
        if ltype == "timestamp":
            tz = "UTC" if logical["isAdjustedToUTC"] else None
            return pa.timestamp(_arrow_unit(logical["timeUnit"]), tz)
        return integer_fallback(
            {
                "NONE": pa.int64(),
                "INT_64": pa.int64(),
                "UINT_64": pa.uint64(),
                "TIME_MICROS": pa.time64("us"),
                "TIMESTAMP_MILLIS": pa.timestamp("ms", "UTC"),
                "TIMESTAMP_MICROS": pa.timestamp("us", "UTC"),
            }
        )
    if physical == "BYTE_ARRAY":
        if ltype in ("string", "json"):
            return pa.string()
        if ltype == "decimal":
            p, s = logical["precision"], logical["scale"]
            return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
        if ltype:  # BSON, ENUM, geometry, geography, unknown annotations
            return pa.binary()
        if converted in ("UTF8", "JSON"):
            return pa.string()
        if converted == "DECIMAL":
            p, s = column.precision, column.scale
            return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
        if converted in ("NONE", "BSON", "ENUM"):
            return pa.binary()
        raise bad()
    if physical == "FIXED_LEN_BYTE_ARRAY":
        length = column.length
        if ltype == "decimal" or (not ltype and converted == "DECIMAL"):
            p = logical["precision"] if ltype else column.precision
            s = logical["scale"] if ltype else column.scale
            return pa.decimal128(p, s) if length <= 16 else pa.decimal256(p, s)
        if converted == "INTERVAL" or ltype == "interval":
            # arrow-rs says Interval(DayTime), which pyarrow cannot express; arrow-digest
            # refuses every interval type, so only the message is affected.
            return pa.month_day_nano_interval()
        if ltype == "float16":
            if length != 2:
                raise bad()
            return pa.float16()
        return pa.binary(length)
    raise bad()


def _rs_apply_hint(parquet: Any, hint: Any) -> Any:
    """arrow-rs ``apply_hint``: which embedded ``ARROW:schema`` types override the Parquet type."""
    t = pa.types
    if (t.is_int32(parquet) or t.is_int64(parquet)) and t.is_timestamp(hint):
        return hint
    if t.is_int32(parquet) and t.is_time32(hint):
        return hint
    if t.is_int64(parquet) and (t.is_time64(hint) or t.is_duration(hint) or t.is_date64(hint)):
        return hint
    if t.is_date32(parquet) and t.is_date64(hint):
        return hint
    if t.is_timestamp(parquet) and t.is_timestamp(hint):
        if parquet.unit == hint.unit and hint.tz is not None:
            return hint
        if parquet.unit == "ns" and parquet.tz is None and hint.unit in ("s", "ms", "us"):
            return hint
    if t.is_string(parquet) and (t.is_large_string(hint) or t.is_string_view(hint)):
        return hint
    if t.is_binary(parquet) and (
        t.is_large_binary(hint)
        or t.is_string(hint)
        or t.is_large_string(hint)
        or t.is_string_view(hint)
        or t.is_binary_view(hint)
    ):
        return hint
    if t.is_interval(parquet) and t.is_interval(hint):
        return hint
    if t.is_decimal128(parquet) and (
        t.is_decimal32(hint) or t.is_decimal64(hint) or t.is_decimal256(hint)
    ):
        return hint
    if t.is_dictionary(hint):
        hinted = _rs_apply_hint(parquet, hint.value_type)
        return hint if hinted == hint.value_type else hinted
    return parquet


def _rs_type(cpp: Any, hint: Any | None, leaves: Iterator[Any]) -> Any:
    """Walk pyarrow's read type and the hint in step with the Parquet leaf columns."""
    cpp = _storage(cpp)
    hint = _storage(hint) if hint is not None else None
    t = pa.types
    if t.is_struct(cpp):
        same = hint is not None and t.is_struct(hint) and hint.num_fields == cpp.num_fields
        fields = []
        for i in range(cpp.num_fields):
            child = cpp.field(i)
            child_hint = hint.field(i).type if same and hint is not None else None
            fields.append(pa.field(child.name, _rs_type(child.type, child_hint, leaves)))
        return pa.struct(fields)
    if _is_list_like(cpp):
        item_hint = hint.value_type if hint is not None and _is_list_like(hint) else None
        item = pa.field(cpp.value_field.name, _rs_type(cpp.value_type, item_hint, leaves))
        if t.is_fixed_size_list(cpp):
            return pa.list_(item, cpp.list_size)
        return pa.large_list(item) if t.is_large_list(cpp) else pa.list_(item)
    if t.is_map(cpp):
        _rs_type(cpp.key_type, None, leaves)
        _rs_type(cpp.item_type, None, leaves)
        return cpp
    column = next(leaves)
    base = _rs_from_parquet(column)
    return _rs_apply_hint(base, hint) if hint is not None else base


def _parquet_hint(pf: Any) -> pa.Schema | None:
    metadata = pf.metadata.metadata or {}
    raw = metadata.get(b"ARROW:schema")
    if raw is None:
        return None
    try:
        schema: pa.Schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw)))
    except (pa.ArrowException, ValueError):  # arrow-rs ignores an undecodable hint too
        return None
    return schema


def kamu_parquet_schema(path: str | os.PathLike[str]) -> pa.Schema:
    """The Arrow schema arrow-rs's Parquet reader (and so kamu) produces for a file.

    Differs from pyarrow's view in details that change the hash: e.g. arrow-rs keeps Parquet's
    units (``timestamp[ms]`` for data written as seconds), turns ``date32`` hinted as ``date64``
    into ``date64``, and honours the embedded ``ARROW:schema`` timezone only for equal units.
    A top-level field is nullable as its Parquet repetition says (``REQUIRED`` -> NOT NULL), as
    arrow-rs reads it (the hint gives types, not nullability): kamu records this schema in a
    derivative's ``SetDataSchema``. The logical hash ignores nullability.
    """
    pf = pq.ParquetFile(path)
    return _kamu_schema(pf)


def _kamu_schema(pf: Any) -> pa.Schema:
    cpp = pf.schema_arrow
    hint = _parquet_hint(pf)
    same_shape = hint is not None and len(hint) == len(cpp)
    leaves = iter([pf.schema.column(i) for i in range(pf.metadata.num_columns)])
    fields = []
    for i, field in enumerate(cpp):
        field_hint = hint.field(i).type if same_shape and hint is not None else None
        fields.append(
            pa.field(field.name, _rs_type(field.type, field_hint, leaves), field.nullable)
        )
    return pa.schema(fields)


def _needs_cast(expected: Any, actual: Any) -> bool:
    return not _value_compatible(expected, actual)


def _int96_unit(pf: Any, schema: pa.Schema) -> str | None:
    """The unit arrow-rs converts INT96 timestamps to, if it is not nanoseconds."""
    units: set[str] = set()
    flat = _flat_leaf_types(schema)
    for i in range(pf.metadata.num_columns):
        if pf.schema.column(i).physical_type == "INT96" and i < len(flat):
            leaf = flat[i]
            if pa.types.is_timestamp(leaf) and leaf.unit != "ns":
                units.add(leaf.unit)
    if len(units) > 1:
        raise DataError(f"INT96 columns hinted to different units {sorted(units)}")
    return units.pop() if units else None


def _flat_leaf_types(schema: pa.Schema) -> list[Any]:
    out: list[Any] = []

    def walk(dt: Any) -> None:
        dt = _storage(dt)
        if pa.types.is_struct(dt):
            for i in range(dt.num_fields):
                walk(dt.field(i).type)
        elif _is_list_like(dt):
            walk(dt.value_type)
        elif pa.types.is_map(dt):
            walk(dt.key_type)
            walk(dt.item_type)
        else:
            out.append(dt)

    for field in schema:
        walk(field.type)
    return out


def _has_struct(schema: pa.Schema) -> bool:
    return any(pa.types.is_struct(_storage(f.type)) for f in schema)


def _realigned(batches: Iterable[pa.RecordBatch], unit: int) -> Iterator[pa.RecordBatch]:
    """Re-cut batches so every batch but the last is a multiple of ``unit`` rows."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not pending and batch.num_rows % unit == 0:
            yield batch
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= unit:
            merged = pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
            cut = rows - rows % unit
            yield merged.slice(0, cut)
            rest = merged.slice(cut)
            pending = [rest] if rest.num_rows else []
            rows = rest.num_rows
    if pending:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def _parquet_digest(path: str | os.PathLike[str], threads: int) -> Multihash:
    pf = pq.ParquetFile(path)
    schema = _kamu_schema(pf)
    unit = _int96_unit(pf, schema)
    if unit is not None:
        pf = pq.ParquetFile(path, coerce_int96_timestamp_unit=unit)
    casts = {
        i: field.type
        for i, field in enumerate(schema)
        if _needs_cast(field.type, pf.schema_arrow.field(i).type)
    }
    batches: Iterable[pa.RecordBatch] = pf.iter_batches(batch_size=_PARQUET_READ_ROWS)
    if _has_struct(schema):
        batches = _realigned(batches, LOGICAL_HASH_BATCH_SIZE)
    with LogicalHasher(schema, threads=threads) as hasher:
        for read in batches:
            if read.num_rows == 0:  # arrow-rs never yields empty batches
                continue
            batch = read
            if casts:
                columns = [
                    _unwrap(col).cast(casts[i]) if i in casts else col
                    for i, col in enumerate(read.columns)
                ]
                batch = pa.RecordBatch.from_arrays(columns, names=read.schema.names)
            hasher.update(batch, window_rows=LOGICAL_HASH_BATCH_SIZE, refuse_stale_slots=True)
        return hasher.finalize()


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------

LogicalHashSource: TypeAlias = (
    str | os.PathLike[str] | pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[Any]
)


def logical_hash(
    source: LogicalHashSource,
    *,
    schema: pa.Schema | None = None,
    threads: int = 1,
) -> str:
    """kamu's logical hash (``arrow0-sha3-256``) as multibase text, ``f9680c00120`` + 64 hex.

    Args:
        source: a Parquet file path (read the way kamu reads it: arrow-rs types, 10,000-row
            batches), a ``pyarrow.Table`` (hashed batch by batch as ``to_batches()`` yields
            them), a ``RecordBatch``, a ``RecordBatchReader`` or an iterable of batches.
        schema: the schema for an iterable of batches (required if it may be empty).
        threads: leaf columns hashed concurrently, see :class:`LogicalHasher`.

    Raises:
        UnsupportedArrowType: a column type arrow-digest cannot hash.
        UnreproducibleLogicalHash: (Parquet only) kamu's hash depends on stale reader bytes.
        DataError: an empty iterable without a schema, or batches that do not match it.
    """
    if isinstance(source, str | os.PathLike):
        return _parquet_digest(source, threads).to_multibase()
    batches: Iterable[pa.RecordBatch]
    if isinstance(source, pa.Table):
        schema = source.schema
        batches = source.to_batches()
    elif isinstance(source, pa.RecordBatch):
        schema = source.schema
        batches = [source]
    elif isinstance(source, pa.RecordBatchReader):
        schema = source.schema
        batches = source
    else:
        iterator = iter(source)
        if schema is None:
            first = next(iterator, None)
            if first is None:
                raise DataError("cannot hash an empty sequence of batches without a schema")
            schema = first.schema
            batches = _prepend(first, iterator)
        else:
            batches = iterator
    with LogicalHasher(schema, threads=threads) as hasher:
        for batch in batches:
            hasher.update(batch)
        return hasher.finalize().to_multibase()


class WrittenFileHasher:
    """Logical hashes of Parquet files computed from the Arrow tables they are (or would be)
    written from, without reading them back (a replay hashing an engine's Arrow output, see
    ``coordinator/transform/output.py``).

    The hash must be the one of the *file* as kamu reads it, so the schema is the one arrow-rs
    derives from the file's footer (:func:`kamu_parquet_schema`) and columns whose values that
    reader would change are cast, as :func:`logical_hash` does for a file. Which schema a file
    gets depends only on the table's Arrow schema and the writer's options, so it is read once
    per table schema and remembered: from the file just written, or, when the caller has not
    written one (a replay that writes its output only if it differs from the published one),
    from an empty file that ``write`` produces in memory. One instance per set of writer
    options; ``write(table, sink)`` must be the writer of the files whose hash is asked.

    :meth:`hash` returns ``None`` (hash the file instead) when the result could depend on how
    the file is read back: struct columns (kamu's 10,000-row read batches) and INT96
    timestamps.
    """

    def __init__(
        self,
        max_schemas: int = 64,
        *,
        write: Callable[[pa.Table, Any], None] | None = None,
    ) -> None:
        self._schemas: dict[pa.Schema, tuple[pa.Schema, tuple[bool, ...]] | None] = {}
        self._max = max_schemas
        self._write = write

    def _read_schema(
        self, table: pa.Table, path: str | os.PathLike[str] | None
    ) -> tuple[pa.Schema, tuple[bool, ...]] | None:
        if table.schema in self._schemas:
            return self._schemas[table.schema]
        if path is None:
            if self._write is None:
                raise ValueError("no file written and no writer to probe the file schema with")
            # The footer's schema depends on the Arrow schema and the writer options only, so
            # an empty table written the same way has the footer of the real file.
            sink = pa.BufferOutputStream()
            self._write(table.schema.empty_table(), sink)
            pf = pq.ParquetFile(pa.BufferReader(sink.getvalue()))
        else:
            pf = pq.ParquetFile(path)
        schema = _kamu_schema(pf)
        found: tuple[pa.Schema, tuple[bool, ...]] | None = None
        int96 = any(
            pf.schema.column(i).physical_type == "INT96" for i in range(pf.metadata.num_columns)
        )
        if not (_has_struct(schema) or int96 or len(schema) != table.num_columns):
            casts = tuple(
                _needs_cast(schema.field(i).type, f.type) for i, f in enumerate(table.schema)
            )
            found = (schema, casts)
        if len(self._schemas) >= self._max:
            self._schemas.clear()
        self._schemas[table.schema] = found
        return found

    def hash(self, table: pa.Table, path: str | os.PathLike[str] | None = None) -> Multihash | None:
        """The logical hash of ``path``, just written from ``table``, or (``path`` omitted) of
        the file ``write`` would make of ``table`` (``None``: see above)."""
        known = self._read_schema(table, path)
        if known is None:
            return None
        schema, casts = known
        columns = [
            _unwrap(col).cast(schema.field(i).type) if cast else col
            for i, (col, cast) in enumerate(zip(table.columns, casts, strict=True))
        ]
        with LogicalHasher(schema) as hasher:
            for batch in pa.Table.from_arrays(columns, names=schema.names).to_batches():
                if batch.num_rows:
                    hasher.update(batch)
            return hasher.finalize()


def _prepend(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def physical_hash(path: str | os.PathLike[str]) -> str:
    """SHA3-256 of a file's bytes as multibase text (``f1620`` + 64 hex), read in 8 MiB chunks."""
    hasher = hashlib.sha3_256()
    buf = bytearray(_PHYSICAL_READ_BYTES)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while read := f.readinto(buf):
            hasher.update(view[:read])
    return Multihash(Multicodec.SHA3_256, hasher.digest()).to_multibase()
