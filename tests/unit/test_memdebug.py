"""``node.debug_memory``'s native figures (node/daemon/memdebug.py): Arrow's pool, glibc's heap."""

from __future__ import annotations

import sys

import pyarrow as pa

from node.daemon.memdebug import native_memory


def test_arrow_pool_backend_and_bytes_follow_an_allocation() -> None:
    assert "pyarrow" in sys.modules
    before = native_memory()["arrow"]
    assert before["backend"] == pa.default_memory_pool().backend_name
    buf = pa.allocate_buffer(16 * 2**20)
    during = native_memory()["arrow"]
    assert during["allocated_mb"] - before["allocated_mb"] >= 15.9
    assert during["max_mb"] >= during["allocated_mb"]
    del buf
    assert native_memory()["arrow"]["allocated_mb"] <= during["allocated_mb"] - 15.9


def test_glibc_heap_counts_a_large_malloc() -> None:
    # The node runs on glibc (Debian images); mallinfo2 is glibc 2.33+.
    before = native_memory()["glibc"]
    # 32 MiB is above glibc's mmap threshold: one mmap-ed chunk.
    block = bytearray(32 * 2**20)
    during = native_memory()["glibc"]
    assert during["mmap_mb"] - before["mmap_mb"] >= 31.9  # figures rounded to 0.01
    assert during["in_use_mb"] >= 0 and during["free_mb"] >= 0
    del block
    assert native_memory()["glibc"]["mmap_mb"] <= during["mmap_mb"] - 31.9
