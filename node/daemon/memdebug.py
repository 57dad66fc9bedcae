"""Allocation tracing for leak hunts: ``ODF_NODE_TRACEMALLOC=1`` and ``node.debug_memory``.

A daemon started with ``ODF_NODE_TRACEMALLOC=1`` (or a frame depth, e.g. ``=10``) runs Python's
``tracemalloc`` from its first line of ``run`` on, and its RPC gains ``node.debug_memory``: the
first call (or one with ``baseline: true``) takes the baseline snapshot, each later call
answers the allocation sites that grew most since it. Off by default: tracing slows every
allocation and costs memory of its own. Only the daemon process is traced (the libp2p process
and the engine workers are processes of their own). docs/operations.md ("Hunting a leak").
"""

from __future__ import annotations

import os
import tracemalloc
from typing import Any

ENV = "ODF_NODE_TRACEMALLOC"

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


def debug_memory(baseline: bool = False, top: int = 15) -> dict[str, Any]:
    """Take the baseline snapshot (first call, or ``baseline``), else the top growth since it."""
    current, peak = tracemalloc.get_traced_memory()
    out: dict[str, Any] = {
        "traced_mb": round(current / 2**20, 2),
        "peak_mb": round(peak / 2**20, 2),
        "top_growth": [],
    }
    snap = _snapshot()
    if baseline or not _baseline:
        _baseline[:] = [snap]
        out["baseline"] = True
        return out
    out["baseline"] = False
    for stat in snap.compare_to(_baseline[0], "lineno")[:top]:
        frame = stat.traceback[0]
        out["top_growth"].append(
            {
                "site": f"{frame.filename}:{frame.lineno}",
                "size_diff_kb": round(stat.size_diff / 1024, 1),
                "size_kb": round(stat.size / 1024, 1),
                "count_diff": stat.count_diff,
            }
        )
    return out
