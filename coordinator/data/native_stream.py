"""Optional compiled stream assembly for the logical hash (``native/odf_stream.c``).

``make setup`` builds ``build/native/libodf_stream.so`` when a C compiler is present; this
module loads it with ctypes. When it is absent (the image, a machine without ``cc``) every
function returns ``None`` and :mod:`coordinator.data.hashing` keeps its numpy path, which
produces the same bytes. ``ODF_NATIVE_HASH=0`` disables the library.

Nulls reach the C loops as Arrow validity bitmaps (:data:`Bitmap`: the buffer and the bit of
row 0, so sliced arrays need no copy); a caller holding a numpy null mask instead (struct
validity, list children) packs it with :func:`bitmap_of`.

The ``hash_*`` functions go further: with :class:`Sha3Native` (an OpenSSL SHA3-256 state, the
SHA3 hashlib runs) the C loops build a column's stream 32 KiB at a time on the stack and update
the state with each piece, asking for the next piece's input while SHA3 runs, so the column is
read from memory while SHA3 works rather than before. Without libcrypto the ``*_pieces``
generators build the stream a staging buffer at a time (:data:`STAGE_BYTES`, two buffers used
in turn) for hashlib: never written whole to fresh memory (page faults, zeroing by the kernel)
nor read back from it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from coordinator.errors import DataError

_LIB_PATH: Final = Path(__file__).resolve().parents[2] / "build" / "native" / "libodf_stream.so"

# Bytes the C loops may write past the stream they return: fixed-size moves of short values
# (odf_prefixed), whole-vector stores (odf_fixed).
_SLACK: Final = 32
_FIXED_SLACK: Final = 64

STAGE_BYTES: int = 1 << 20
"""Size of each of the two staging buffers of the ``*_pieces`` generators. 1 MiB stays in a
core's L2 cache (2 MiB here) with room for SHA3's reads, and makes the Python and ctypes
overhead per piece (a few microseconds) negligible next to SHA3's ~2 ms over it. Tests shrink
it to cut streams into many pieces."""

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p

Bitmap: TypeAlias = tuple[Any, int]
"""A validity bitmap (``pyarrow.Buffer`` or numpy ``uint8`` array; bit set = valid row, least
significant bit first, as Arrow lays it out) and the bit index of row 0 in it."""


def _load() -> ctypes.CDLL | None:
    if os.environ.get("ODF_NATIVE_HASH", "1") == "0" or not _LIB_PATH.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(_LIB_PATH))
        # A library built from an older native/odf_stream.c lacks odf_bool (and takes byte
        # masks) or a later function (odf_prefixed_hash): treat it as absent until `make
        # setup` rebuilds it.
        lib.odf_bool.argtypes = [_PTR, _I64, _PTR, _I64, _I64, _PTR]
        lib.odf_prefixed_fill.restype = _I64
        lib.odf_simd.restype = ctypes.c_int
        lib.odf_prefixed_hash.restype = _I64
    except (OSError, AttributeError):  # stale, foreign-architecture or old build: use numpy
        return None
    lib.odf_bool.restype = _I64
    lib.odf_prefixed.argtypes = [_PTR, _I64, _PTR, ctypes.c_int, _I64, _PTR, _I64, _PTR, _PTR]
    lib.odf_prefixed.restype = _I64
    lib.odf_prefixed_fill.argtypes = [*lib.odf_prefixed.argtypes[:-1], _PTR, _PTR, _I64]
    lib.odf_fixed.argtypes = [_PTR, _I64, _PTR, _I64, _I64, _PTR]
    lib.odf_fixed.restype = _I64
    lib.odf_simd.argtypes = [ctypes.c_int]
    lib.odf_simd.restype = ctypes.c_int
    lib.odf_fixed_hash.argtypes = [_PTR, _I64, _PTR, _I64, _I64, _PTR, _PTR, _I64]
    lib.odf_fixed_hash.restype = _I64
    lib.odf_bool_hash.argtypes = [_PTR, _I64, _PTR, _I64, _I64, _PTR, _PTR, _I64]
    lib.odf_bool_hash.restype = _I64
    lib.odf_prefixed_hash.argtypes = [*lib.odf_prefixed.argtypes[:-1], _PTR, _PTR, _I64]
    lib.odf_prefixed_hash.restype = _I64
    return lib


LIB: ctypes.CDLL | None = _load()
"""The loaded library, or None; tests set it to None to exercise the fallback."""


class _Crypto:
    """OpenSSL's libcrypto as hashlib uses it: SHA3-256 states the C loops can update."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.EVP_MD_CTX_new.restype = _PTR
        lib.EVP_MD_CTX_new.argtypes = []
        lib.EVP_MD_CTX_free.argtypes = [_PTR]
        lib.EVP_MD_CTX_free.restype = None
        lib.EVP_MD_CTX_copy_ex.argtypes = [_PTR, _PTR]
        lib.EVP_MD_CTX_copy_ex.restype = ctypes.c_int
        lib.EVP_sha3_256.restype = _PTR
        lib.EVP_sha3_256.argtypes = []
        lib.EVP_DigestInit_ex.argtypes = [_PTR, _PTR, _PTR]
        lib.EVP_DigestInit_ex.restype = ctypes.c_int
        lib.EVP_DigestUpdate.argtypes = [_PTR, _PTR, ctypes.c_size_t]
        lib.EVP_DigestUpdate.restype = ctypes.c_int
        lib.EVP_DigestFinal_ex.argtypes = [_PTR, _PTR, _PTR]
        lib.EVP_DigestFinal_ex.restype = ctypes.c_int
        self.md = lib.EVP_sha3_256()
        self.update_fn = ctypes.cast(lib.EVP_DigestUpdate, _PTR).value


def _load_crypto() -> _Crypto | None:
    if LIB is None:
        return None
    try:
        # The libcrypto hashlib's _hashlib is linked against (already loaded in this process).
        crypto = _Crypto(ctypes.CDLL("libcrypto.so.3"))
        probe = Sha3Native.__new__(Sha3Native)
        probe._init(crypto, b"abc")
        if probe.digest() != hashlib.sha3_256(b"abc").digest():
            return None
    except (OSError, AttributeError, NativeHashError):
        return None
    return crypto


class NativeHashError(DataError):
    """OpenSSL refused a SHA3 operation of the compiled path (out of memory)."""


class Sha3Native:
    """A SHA3-256 state in OpenSSL (the SHA3 of hashlib) that the compiled loops update
    directly: :func:`hash_fixed`, :func:`hash_booleans`, :func:`hash_prefixed` build a
    column's stream a piece at a time in cache and hash each piece there. ``update`` and
    ``digest`` behave as hashlib's. Create with :func:`new_sha3`."""

    def _init(self, crypto: _Crypto, data: bytes) -> None:
        self._crypto = crypto
        self.hashed = 0  # bytes taken so far: the C loops align their updates to SHA3 blocks
        self.ctx = crypto.lib.EVP_MD_CTX_new()
        if not self.ctx or not crypto.lib.EVP_DigestInit_ex(self.ctx, crypto.md, None):
            raise NativeHashError("EVP_DigestInit_ex failed")
        if data:
            self.update(data)

    def update(self, data: Any) -> None:
        """Hash ``data`` (bytes, a numpy array or a pyarrow Buffer); the GIL is released."""
        view = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        view = np.ascontiguousarray(view).view(np.uint8).reshape(-1)
        if not len(view):
            return
        if not self._crypto.lib.EVP_DigestUpdate(self.ctx, _addr(view), len(view)):
            raise NativeHashError("EVP_DigestUpdate failed")
        self.hashed += len(view)

    def digest(self) -> bytes:
        """The digest so far (the state stays usable, as with hashlib)."""
        lib = self._crypto.lib
        copy = lib.EVP_MD_CTX_new()
        try:
            out = ctypes.create_string_buffer(32)
            if not lib.EVP_MD_CTX_copy_ex(copy, self.ctx) or not lib.EVP_DigestFinal_ex(
                copy, out, None
            ):
                raise NativeHashError("EVP_DigestFinal_ex failed")
            return out.raw
        finally:
            lib.EVP_MD_CTX_free(copy)

    def __del__(self) -> None:
        ctx = getattr(self, "ctx", None)
        if ctx:
            self._crypto.lib.EVP_MD_CTX_free(ctx)
            self.ctx = None


def _count(state: Sha3Native, result: int) -> None:
    """Account for the bytes a compiled loop hashed into ``state`` (-1: it failed)."""
    if result < 0:
        raise NativeHashError("the compiled stream assembly could not update SHA3")
    state.hashed += result


CRYPTO: _Crypto | None = None


def new_sha3(data: bytes = b"") -> Sha3Native | None:
    """A :class:`Sha3Native` seeded with ``data``, or None without the library or libcrypto
    (callers then use ``hashlib.sha3_256`` and the ``*_pieces`` generators)."""
    crypto = CRYPTO
    if LIB is None or crypto is None:
        return None
    state = Sha3Native.__new__(Sha3Native)
    state._init(crypto, data)
    return state


def hash_fixed(
    state: Sha3Native, values: npt.NDArray[np.uint8], width: int, valid: Bitmap | None, n: int
) -> bool:
    """Hash the stream of :func:`fixed` into ``state``, built and hashed a piece at a time
    (GIL released); False without the library."""
    lib = LIB
    if lib is None or not n:
        return lib is not None
    vals = np.ascontiguousarray(values)
    bits, bit_off = _bits(valid)
    update = state._crypto.update_fn
    done = lib.odf_fixed_hash(_addr(vals), width, bits, bit_off, n, update, state.ctx, state.hashed)
    _count(state, done)
    return True


def hash_booleans(state: Sha3Native, values: Bitmap, valid: Bitmap | None, n: int) -> bool:
    """Hash the stream of :func:`booleans` into ``state``; False without the library."""
    lib = LIB
    if lib is None or not n:
        return lib is not None
    bits, bit_off = _bits(valid)
    update = state._crypto.update_fn
    done = lib.odf_bool_hash(
        _addr(values[0]), int(values[1]), bits, bit_off, n, update, state.ctx, state.hashed
    )
    _count(state, done)
    return True


def hash_prefixed(
    state: Sha3Native, valid: Bitmap | None, body: Any, body_offsets: npt.NDArray[Any]
) -> bool:
    """Hash the stream of :func:`prefixed` with length prefixes into ``state``; False without
    the library."""
    lib = LIB
    if lib is None or body_offsets.dtype not in (np.int32, np.int64):
        return False
    offsets = np.ascontiguousarray(body_offsets)
    n = len(offsets) - 1
    if not n:
        return True
    body_bytes = int(offsets[-1]) - int(offsets[0])
    body_arr = (
        np.frombuffer(body, dtype=np.uint8, count=body_bytes)
        if body_bytes
        else np.zeros(1, dtype=np.uint8)
    )
    bits, bit_off = _bits(valid)
    off64 = 1 if offsets.dtype == np.int64 else 0
    update = state._crypto.update_fn
    done = lib.odf_prefixed_hash(
        bits,
        bit_off,
        _addr(offsets),
        off64,
        n,
        _addr(body_arr),
        body_bytes,
        None,
        update,
        state.ctx,
        state.hashed,
    )
    _count(state, done)
    return True


def simd(enable: bool) -> bool:
    """Use the AVX-512 VBMI kernels for fixed-width columns with nulls (the default where the
    CPU has them) or the scalar loops; returns whether the kernels are in use (False without
    the library). Both produce the same bytes; tests run each."""
    lib = LIB
    return bool(lib.odf_simd(1 if enable else 0)) if lib is not None else False


def _addr(obj: Any) -> int:
    """Address of a numpy array's or a pyarrow Buffer's first byte (the caller keeps it alive)."""
    if isinstance(obj, np.ndarray):
        return int(obj.ctypes.data)
    if isinstance(obj, pa.Buffer):
        return int(obj.address)
    return int(np.frombuffer(obj, dtype=np.uint8).ctypes.data)


def _bits(valid: Bitmap | None) -> tuple[int | None, int]:
    if valid is None:
        return None, 0
    return _addr(valid[0]), int(valid[1])


def bitmap_of(null: npt.NDArray[np.bool_]) -> Bitmap:
    """The validity bitmap of a null mask (True = null), packed for the C loops."""
    return np.packbits(np.logical_not(null), bitorder="little"), 0


def prefixed(
    valid: Bitmap | None,
    body: Any,
    body_offsets: npt.NDArray[Any],
    prefix: npt.NDArray[np.int64] | None,
) -> npt.NDArray[np.uint8] | None:
    """``u64 prefix[i] || body[i]`` per valid row, ``0x00`` per null row; None without the
    library.

    Same contract as ``hashing._prefixed_stream``: ``body`` starts at ``body_offsets[0]``;
    ``valid`` (None: no nulls) covers the ``len(body_offsets) - 1`` rows.
    """
    lib = LIB
    if lib is None or body_offsets.dtype not in (np.int32, np.int64):
        return None
    offsets = np.ascontiguousarray(body_offsets)
    n = len(offsets) - 1
    body_bytes = int(offsets[-1]) - int(offsets[0])
    body_arr = (
        np.frombuffer(body, dtype=np.uint8, count=body_bytes)
        if body_bytes
        else np.zeros(1, dtype=np.uint8)
    )
    out = np.empty(8 * n + body_bytes + _SLACK, dtype=np.uint8)
    pre = None if prefix is None else np.ascontiguousarray(prefix, dtype=np.int64)
    bits, bit_off = _bits(valid)
    written = lib.odf_prefixed(
        bits,
        bit_off,
        _addr(offsets),
        1 if offsets.dtype == np.int64 else 0,
        n,
        _addr(body_arr),
        body_bytes,
        None if pre is None else _addr(pre),
        _addr(out),
    )
    return out[:written]


def fixed(
    values: npt.NDArray[np.uint8], width: int, valid: Bitmap | None, n: int
) -> npt.NDArray[np.uint8] | None:
    """Stream of ``n`` fixed-width rows with one ``0x00`` per null row; None without the
    library. ``values`` holds the ``n * width`` value bytes from row 0."""
    lib = LIB
    if lib is None:
        return None
    vals = np.ascontiguousarray(values)
    out = np.empty(n * width + _FIXED_SLACK, dtype=np.uint8)
    bits, bit_off = _bits(valid)
    written = lib.odf_fixed(_addr(vals), width, bits, bit_off, n, _addr(out))
    return out[:written]


def booleans(values: Bitmap, valid: Bitmap | None, n: int) -> npt.NDArray[np.uint8] | None:
    """Stream of ``n`` boolean rows (``0x01`` false, ``0x02`` true, ``0x00`` null) from the
    value bitmap; None without the library."""
    lib = LIB
    if lib is None:
        return None
    out = np.empty(max(1, n), dtype=np.uint8)
    bits, bit_off = _bits(valid)
    lib.odf_bool(_addr(values[0]), int(values[1]), bits, bit_off, n, _addr(out))
    return out[:n]


def _stages(size: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """Two staging buffers of ``size`` bytes: a piece handed out stays intact while the next
    one is built (the pipelined hasher hashes piece k while the generator fills piece k + 1)."""
    return np.empty(size, dtype=np.uint8), np.empty(size, dtype=np.uint8)


def fixed_pieces(
    values: npt.NDArray[np.uint8], width: int, valid: Bitmap | None, n: int
) -> Iterator[npt.NDArray[np.uint8]] | None:
    """The stream of :func:`fixed` in pieces of at most :data:`STAGE_BYTES`; None without the
    library. A piece is a view of a staging buffer: it holds its bytes until the generator has
    been advanced twice more."""
    lib = LIB
    if lib is None:
        return None
    return _fixed_pieces(lib, np.ascontiguousarray(values), width, valid, n)


def _fixed_pieces(
    lib: ctypes.CDLL, vals: npt.NDArray[np.uint8], width: int, valid: Bitmap | None, n: int
) -> Iterator[npt.NDArray[np.uint8]]:
    # Whole 64-row words per piece (the C loop reads the bitmap a word at a time).
    rows = max(64, (STAGE_BYTES // max(1, width)) // 64 * 64)
    rows = max(1, min(rows, n))
    stages = _stages(rows * width + _FIXED_SLACK)
    addrs = (_addr(stages[0]), _addr(stages[1]))
    base = _addr(vals) if n else 0
    bits, bit_off = _bits(valid)
    fill = lib.odf_fixed
    turn = 0
    for start in range(0, n, rows):
        m = min(rows, n - start)
        written = fill(base + start * width, width, bits, bit_off + start, m, addrs[turn])
        yield stages[turn][:written]
        turn ^= 1


def booleans_pieces(
    values: Bitmap, valid: Bitmap | None, n: int
) -> Iterator[npt.NDArray[np.uint8]] | None:
    """The stream of :func:`booleans` in pieces, as :func:`fixed_pieces`; None without the
    library."""
    lib = LIB
    if lib is None:
        return None
    return _booleans_pieces(lib, values, valid, n)


def _booleans_pieces(
    lib: ctypes.CDLL, values: Bitmap, valid: Bitmap | None, n: int
) -> Iterator[npt.NDArray[np.uint8]]:
    rows = max(1, min(max(64, STAGE_BYTES // 64 * 64), n))
    stages = _stages(max(1, rows))
    addrs = (_addr(stages[0]), _addr(stages[1]))
    vbits, val_off = _addr(values[0]), int(values[1])
    bits, bit_off = _bits(valid)
    fill = lib.odf_bool
    turn = 0
    for start in range(0, n, rows):
        m = min(rows, n - start)
        fill(vbits, val_off + start, bits, bit_off + start, m, addrs[turn])
        yield stages[turn][:m]
        turn ^= 1


def prefixed_pieces(
    valid: Bitmap | None, body: Any, body_offsets: npt.NDArray[Any]
) -> Iterator[npt.NDArray[np.uint8]] | None:
    """The stream of :func:`prefixed` with length prefixes (strings, binaries) in pieces, as
    :func:`fixed_pieces`; None without the library. A row too long for a staging buffer comes
    as its own pieces, the prefix and the value straight from ``body``."""
    lib = LIB
    if lib is None or body_offsets.dtype not in (np.int32, np.int64):
        return None
    return _prefixed_pieces(lib, valid, body, np.ascontiguousarray(body_offsets))


def _prefixed_pieces(
    lib: ctypes.CDLL, valid: Bitmap | None, body: Any, offsets: npt.NDArray[Any]
) -> Iterator[npt.NDArray[np.uint8]]:
    n = len(offsets) - 1
    first = int(offsets[0])
    body_bytes = int(offsets[-1]) - first
    body_arr = (
        np.frombuffer(body, dtype=np.uint8, count=body_bytes)
        if body_bytes
        else np.zeros(1, dtype=np.uint8)
    )
    size = min(STAGE_BYTES, 8 * n + body_bytes + _SLACK)
    stages = _stages(size)
    addrs = (_addr(stages[0]), _addr(stages[1]))
    bits, bit_off = _bits(valid)
    off64 = 1 if offsets.dtype == np.int64 else 0
    row = ctypes.c_int64(0)
    row_addr = ctypes.addressof(row)
    args = (bits, bit_off, _addr(offsets), off64, n, _addr(body_arr), body_bytes, None, row_addr)
    fill = lib.odf_prefixed_fill
    turn = 0
    while row.value < n:
        at = row.value
        written = fill(*args, addrs[turn], size)
        if written:
            yield stages[turn][:written]
            turn ^= 1
            continue
        # Row `at` alone does not fit a staging buffer: hash it from where it is.
        lo, hi = int(offsets[at]) - first, int(offsets[at + 1]) - first
        if bits is not None and not _bit(valid, at):
            yield np.zeros(1, dtype=np.uint8)
        else:
            yield np.array([hi - lo], dtype="<i8").view(np.uint8)
            yield body_arr[lo:hi]
        row.value = at + 1


def _bit(valid: Bitmap | None, row: int) -> bool:
    """Is ``row`` valid in the bitmap (True without one)?"""
    if valid is None:
        return True
    bit = int(valid[1]) + row
    byte = np.frombuffer(valid[0], dtype=np.uint8, count=1, offset=bit >> 3)[0]
    return bool((int(byte) >> (bit & 7)) & 1)


CRYPTO = _load_crypto()
