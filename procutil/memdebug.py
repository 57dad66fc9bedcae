"""Allocation tracing for leak hunts: ``ODF_NODE_TRACEMALLOC=1`` and ``node.debug_memory``.

A daemon started with ``ODF_NODE_TRACEMALLOC=1`` (or a frame depth, e.g. ``=10``) runs Python's
``tracemalloc`` from its first line of ``run`` on, and its RPC gains ``node.debug_memory``: the
first call (or one with ``baseline: true``) takes the baseline snapshot, each later call
answers the allocation sites that grew most since it. Off by default: tracing slows every
allocation and costs memory of its own. The libp2p process (``p2p/libp2p_child.py``) inherits
the variable and traces itself too: each ``SIGUSR2`` takes its baseline (first) or writes its
growth since (later) as one ``memdebug {json}`` line to its standard error, the daemon's log.
Engine workers are not traced. docs/operations.md ("Hunting a leak").

Every answer also carries ``native``: what tracemalloc cannot see, the native allocators of the
process (:func:`native_memory`: Arrow's memory pool and glibc's ``mallinfo2``), so that a
resident-size growth can be told apart from a Python-heap growth.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import tracemalloc
from typing import Any

ENV = "ODF_NODE_TRACEMALLOC"

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""The repository's root, cut from file names in stacks."""

_baseline: list[tracemalloc.Snapshot] = []
"""The baseline snapshot (none until the first call)."""


def start_if_requested() -> bool:
    """Start tracing when ``ODF_NODE_TRACEMALLOC`` asks for it; whether tracing runs."""
    value = os.environ.get(ENV, "")
    if not value or value == "0":
        return False
    if not tracemalloc.is_tracing():
        depth = int(value) if value.isdigit() and int(value) > 1 else 1
        tracemalloc.start(depth)
    return True


def _snapshot() -> tracemalloc.Snapshot:
    # The tracer's own bookkeeping is not the node's memory.
    return tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__),)
    )


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33+): every field a ``size_t``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mb(n: int) -> float:
    return round(n / 2**20, 2)


def _sqlite_memory() -> dict[str, float] | None:
    """What SQLite holds (every connection of the process: page caches, statements, schema),
    from ``sqlite3_status64`` of the library the ``sqlite3`` module is linked to; None when
    SQLite is not loaded or the symbol cannot be reached."""
    if "_sqlite3" not in sys.modules:
        return None
    try:
        lib = ctypes.CDLL(sys.modules["_sqlite3"].__file__)
        status = lib.sqlite3_status64
    except (OSError, AttributeError, TypeError):
        return None
    cur, high = ctypes.c_int64(), ctypes.c_int64()
    if status(0, ctypes.byref(cur), ctypes.byref(high), 0) != 0:  # SQLITE_STATUS_MEMORY_USED
        return None
    return {"memory_used_mb": _mb(cur.value), "highwater_mb": _mb(high.value)}


def native_memory() -> dict[str, Any]:
    """Arrow's default pool (backend, bytes it holds now and at most) if Arrow is loaded,
    SQLite's memory if it is loaded, and glibc's heap (``mallinfo2``: bytes obtained from the
    system by ``brk``/arenas, in use, free inside them, and in ``mmap``-ed chunks) where the
    libc has it; ``None`` for what is not there."""
    out: dict[str, Any] = {"arrow": None, "glibc": None, "sqlite": _sqlite_memory()}
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        pool = arrow.default_memory_pool()
        out["arrow"] = {
            "backend": pool.backend_name,
            "allocated_mb": _mb(pool.bytes_allocated()),
            "max_mb": _mb(pool.max_memory() or 0),
            "total_allocated_mb": _mb(arrow.total_allocated_bytes()),
        }
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return out
    fn.restype = _MallInfo2
    info = fn()
    out["glibc"] = {
        "arena_mb": _mb(info.arena),
        "in_use_mb": _mb(info.uordblks),
        "free_mb": _mb(info.fordblks),
        "mmap_mb": _mb(info.hblkhd),
        "releasable_top_mb": _mb(info.keepcost),
    }
    return out


def _short(path: str) -> str:
    """A frame's file relative to the package roots it lives under (stacks stay readable)."""
    for root in ("site-packages/", _REPO):
        if root in path:
            return path.split(root, 1)[1]
    return path.rsplit("/lib/", 1)[-1]  # the standard library: ``python3.11/…``


def debug_memory(baseline: bool = False, top: int = 15) -> dict[str, Any]:
    """Take the baseline snapshot (first call, or ``baseline``), else the top growth since it;
    with the native allocators' figures either way."""
    current, peak = tracemalloc.get_traced_memory()
    out: dict[str, Any] = {
        "traced_mb": round(current / 2**20, 2),
        "peak_mb": round(peak / 2**20, 2),
        "native": native_memory(),
        "top_growth": [],
    }
    snap = _snapshot()
    if baseline or not _baseline:
        _baseline[:] = [snap]
        out["baseline"] = True
        return out
    out["baseline"] = False
    # With a frame depth (``ODF_NODE_TRACEMALLOC=10``) the growth is grouped by whole stack, so
    # that a site inside a library (``trio.Event``'s generated ``__init__``) names its caller.
    by_stack = tracemalloc.get_traceback_limit() > 1
    stats = snap.compare_to(_baseline[0], "traceback" if by_stack else "lineno")
    # Everything the Python heap gained, to set beside the resident size's growth.
    out["growth_total_kb"] = round(sum(s.size_diff for s in stats) / 1024, 1)
    for stat in stats[:top]:
        frames = list(stat.traceback)  # oldest first
        frame = frames[-1]
        row: dict[str, Any] = {
            "site": f"{frame.filename}:{frame.lineno}",
            "size_diff_kb": round(stat.size_diff / 1024, 1),
            "size_kb": round(stat.size / 1024, 1),
            "count_diff": stat.count_diff,
        }
        if by_stack:
            row["stack"] = [f"{_short(f.filename)}:{f.lineno}" for f in reversed(frames[-8:])]
        out["top_growth"].append(row)
    return out
