"""``node.debug_memory``'s native figures (procutil/memdebug.py): Arrow's pool, glibc's heap."""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pytest

from procutil.memdebug import native_memory


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
    def held(g: dict[str, float]) -> float:
        # A large block is mmap-ed when the heap has no free chunk for it, else carved from a
        # free one an earlier test of this process left: either way it is held, in one figure.
        return g["in_use_mb"] + g["mmap_mb"]

    before = native_memory()["glibc"]
    block = bytearray(32 * 2**20)
    during = native_memory()["glibc"]
    assert held(during) - held(before) >= 31.9  # figures rounded to 0.01
    assert during["in_use_mb"] >= 0 and during["free_mb"] >= 0
    del block
    assert held(native_memory()["glibc"]) <= held(during) - 31.9


def test_the_libp2p_process_reports_its_growth_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The libp2p process has no RPC: ``SIGUSR2`` writes baseline, then growth, to stderr."""
    from p2p import libp2p_child
    from procutil import memdebug

    memdebug._baseline.clear()  # another test of this process may have taken one
    tracemalloc.start()
    try:
        libp2p_child._report_memory()
        kept = [bytearray(1024) for _ in range(2000)]  # ~2 MB that stays
        libp2p_child._report_memory()
    finally:
        tracemalloc.stop()
    lines = capsys.readouterr().err.splitlines()
    first, second = (json.loads(line.removeprefix("memdebug ")) for line in lines)
    assert first["baseline"] is True and first["top_growth"] == []
    assert second["baseline"] is False
    top = second["top_growth"][0]
    assert "test_memdebug.py" in top["site"] and top["size_diff_kb"] >= 1900
    assert len(kept) == 2000


def test_sqlite_memory_follows_a_connections_cache() -> None:
    import sqlite3

    before = native_memory()["sqlite"]
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,)] * 4000)  # ~4 MB of pages
    during = native_memory()["sqlite"]
    assert during["memory_used_mb"] - (before["memory_used_mb"] if before else 0) >= 3.5
    assert during["highwater_mb"] >= during["memory_used_mb"]
    conn.close()
    assert native_memory()["sqlite"]["memory_used_mb"] <= during["memory_used_mb"] - 3.5


def _keep_blocks(n: int) -> list[bytearray]:
    return [bytearray(1024) for _ in range(n)]


def test_with_a_frame_depth_growth_is_grouped_by_stack_and_totalled() -> None:
    """With ``ODF_NODE_TRACEMALLOC=10`` a site names its callers (a library's generated
    ``__init__`` alone says nothing), and the Python heap's whole growth is given."""
    from procutil import memdebug

    memdebug._baseline.clear()
    tracemalloc.start(10)
    try:
        memdebug.debug_memory(baseline=True)
        kept = _keep_blocks(2000)  # ~2 MB that stays, made by a helper of this test
        out = memdebug.debug_memory()
    finally:
        tracemalloc.stop()
        memdebug._baseline.clear()
    assert len(kept) == 2000
    assert out["growth_total_kb"] >= 2000
    top = out["top_growth"][0]
    assert top["site"].endswith("test_memdebug.py:" + str(_keep_blocks.__code__.co_firstlineno + 1))
    assert top["stack"][0] == "tests/unit/test_memdebug.py:" + top["site"].rsplit(":", 1)[1]
    # The caller is named too: the test's line that called the helper.
    call = 1 + Path(__file__).read_text().splitlines().index(
        "        kept = _keep_blocks(2000)  # ~2 MB that stays, made by a helper of this test"
    )
    assert f"tests/unit/test_memdebug.py:{call}" in top["stack"][1:]
