"""Give freed heap memory back to the operating system (glibc ``malloc_trim``).

A long-running CPython process with several threads (the daemon: its event loop, the state
writer, the transfer loop, reader threads; the libp2p process: its trio thread) frees memory
that glibc keeps in per-thread arenas and at the top of the heap: resident memory then creeps up
with fragmentation although the Python heap does not grow (``make bench-longrun`` with
``ODF_NODE_TRACEMALLOC``: about 2 MB of Python allocations grew after warm-up while RSS grew
three times as much). Both processes call :func:`trim_heap` once a minute. A no-op where libc
has no ``malloc_trim`` (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

_libc: list[Any] = []


def trim_heap() -> bool:
    """``malloc_trim(0)``, and Arrow's pool gives back unused memory if Arrow is loaded;
    whether glibc released anything."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        try:
            arrow.default_memory_pool().release_unused()
        except Exception:  # an optional nicety: never fail the caller
            pass
    if not _libc:
        try:
            _libc.append(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"))
        except OSError:
            _libc.append(None)
    libc = _libc[0]
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return False
    return bool(trim(0))


__all__ = ["trim_heap"]
