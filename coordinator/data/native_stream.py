"""Optional compiled stream assembly for the logical hash (``native/odf_stream.c``).

``make setup`` builds ``build/native/libodf_stream.so`` when a C compiler is present; this
module loads it with ctypes. When it is absent (the image, a machine without ``cc``) every
function returns ``None`` and :mod:`coordinator.data.hashing` keeps its numpy path, which
produces the same bytes. ``ODF_NATIVE_HASH=0`` disables the library.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

_LIB_PATH: Final = Path(__file__).resolve().parents[2] / "build" / "native" / "libodf_stream.so"

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p


def _load() -> ctypes.CDLL | None:
    if os.environ.get("ODF_NATIVE_HASH", "1") == "0" or not _LIB_PATH.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(_LIB_PATH))
    except OSError:  # a stale or foreign-architecture build: fall back to numpy
        return None
    lib.odf_prefixed.argtypes = [_PTR, _PTR, ctypes.c_int, _I64, _PTR, _I64, _PTR, _PTR]
    lib.odf_prefixed.restype = _I64
    lib.odf_fixed.argtypes = [_PTR, _I64, _PTR, _I64, _PTR]
    lib.odf_fixed.restype = _I64
    return lib


LIB: ctypes.CDLL | None = _load()
"""The loaded library, or None; tests set it to None to exercise the fallback."""


def _addr(arr: npt.NDArray[Any]) -> int:
    return int(arr.ctypes.data)


def prefixed(
    null: npt.NDArray[np.bool_] | None,
    body: Any,
    body_offsets: npt.NDArray[Any],
    prefix: npt.NDArray[np.int64] | None,
) -> npt.NDArray[np.uint8] | None:
    """``u64 prefix[i] || body[i]`` per row, ``0x00`` per null row; None without the library.

    Same contract as ``hashing._prefixed_stream``: ``body`` starts at ``body_offsets[0]``.
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
    out = np.empty(8 * n + body_bytes + 16, dtype=np.uint8)  # 16: short-copy slack
    null_arr = None if null is None else np.ascontiguousarray(null, dtype=np.bool_)
    pre = None if prefix is None else np.ascontiguousarray(prefix, dtype=np.int64)
    written = lib.odf_prefixed(
        None if null_arr is None else _addr(null_arr),
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
    values: npt.NDArray[np.uint8], width: int, null: npt.NDArray[np.bool_]
) -> npt.NDArray[np.uint8] | None:
    """Fixed-width stream with one ``0x00`` per null row; None without the library."""
    lib = LIB
    if lib is None:
        return None
    vals = np.ascontiguousarray(values)
    mask = np.ascontiguousarray(null, dtype=np.bool_)
    n = len(mask)
    out = np.empty(max(1, n * width), dtype=np.uint8)
    written = lib.odf_fixed(_addr(vals), width, _addr(mask), n, _addr(out))
    return out[:written]
