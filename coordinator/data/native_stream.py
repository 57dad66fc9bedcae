"""Optional compiled stream assembly for the logical hash (``native/odf_stream.c``).

``make setup`` builds ``build/native/libodf_stream.so`` when a C compiler is present; this
module loads it with ctypes. When it is absent (the image, a machine without ``cc``) every
function returns ``None`` and :mod:`coordinator.data.hashing` keeps its numpy path, which
produces the same bytes. ``ODF_NATIVE_HASH=0`` disables the library.

Nulls reach the C loops as Arrow validity bitmaps (:data:`Bitmap`: the buffer and the bit of
row 0, so sliced arrays need no copy); a caller holding a numpy null mask instead (struct
validity, list children) packs it with :func:`bitmap_of`.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

_LIB_PATH: Final = Path(__file__).resolve().parents[2] / "build" / "native" / "libodf_stream.so"

# Bytes the C loops may write past the stream they return (fixed-size moves of short values).
_SLACK: Final = 32

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
        # masks): treat it as absent until `make setup` rebuilds it.
        lib.odf_bool.argtypes = [_PTR, _I64, _PTR, _I64, _I64, _PTR]
    except (OSError, AttributeError):  # stale, foreign-architecture or old build: use numpy
        return None
    lib.odf_bool.restype = _I64
    lib.odf_prefixed.argtypes = [_PTR, _I64, _PTR, ctypes.c_int, _I64, _PTR, _I64, _PTR, _PTR]
    lib.odf_prefixed.restype = _I64
    lib.odf_fixed.argtypes = [_PTR, _I64, _PTR, _I64, _I64, _PTR]
    lib.odf_fixed.restype = _I64
    return lib


LIB: ctypes.CDLL | None = _load()
"""The loaded library, or None; tests set it to None to exercise the fallback."""


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
    out = np.empty(max(1, n * width), dtype=np.uint8)
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
