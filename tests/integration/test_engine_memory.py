"""Per-request memory bound of the engine worker (real worker process, real Spark).

A request whose worker process tree goes over ``EngineClient.memory_limit`` fails with the
typed ``TransformMemoryExceeded`` (``EngineMemoryExceeded`` from ``run_transform``), nothing is
committed, and the next request is served by a fresh worker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.metadata import model as m  # noqa: E402
from coordinator.transform.run import EngineMemoryExceeded, run_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    StepClock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from node.engine_client import EngineClient, process_tree_rss  # noqa: E402

pytestmark = pytest.mark.integration

CSV1 = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n"
CSV2 = "event_time,city,population\n2020-01-03T00:00:00Z,C,3000\n"
MAP = [(None, "SELECT op, event_time, city, population * 2 AS pop2 FROM cities")]
# Two rows, each with a 400 MB string: the JVM must hold at least one of them (plus parquet
# page buffers) at once, far above the 512 MiB of headroom the test grants.
HOG = [(None, "SELECT op, event_time, repeat(city, 400000000) AS blob FROM cities")]
HEADROOM = 512 << 20


def test_process_tree_rss_counts_children() -> None:
    import os
    import subprocess
    import time

    own = process_tree_rss(os.getpid())
    assert own > 10 << 20
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(50):  # the child's interpreter is resident within a moment
            if process_tree_rss(os.getpid()) > own + (2 << 20):
                break
            time.sleep(0.05)
        assert process_tree_rss(os.getpid()) > own + (2 << 20)
        assert 0 < process_tree_rss(child.pid) < process_tree_rss(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert process_tree_rss(child.pid) == 0


def test_request_over_memory_limit_fails_typed_and_worker_recovers(tmp_path: Path) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    inputs = inputs_of(root)
    ok = make_derivative(tmp_path, "ok", [(root, "cities")], MAP)
    hog = make_derivative(tmp_path, "hog", [(root, "cities")], HOG)
    # A roomy heap: the JVM must grow past the limit (and be stopped by the watchdog) rather
    # than die of its own OutOfMemoryError first, which depends on timing on a loaded machine.
    conf = {"spark.driver.memory": "3g"}
    with EngineClient(master="local[1]", idle_timeout=0, spark_conf=conf) as client:
        assert run_transform(ok, inputs, client, clock=clock) is not None
        warm = client.worker_rss()
        assert warm > 100 << 20  # a JVM and a Python interpreter
        client.memory_limit = warm + HEADROOM
        pid = client.pid

        head = hog.head()
        with pytest.raises(EngineMemoryExceeded) as err:
            run_transform(hog, inputs, client, clock=clock)
        assert err.value.limit_bytes == warm + HEADROOM
        assert err.value.peak_bytes > err.value.limit_bytes
        assert "memory limit" in str(err.value)
        assert hog.head() == head  # nothing committed
        assert not client.running and client.starts == 1  # killed, not retried

        # A fresh worker serves the next request within the limit.
        push_csv(root, tmp_path / "in", CSV2, clock)
        r = run_transform(ok, inputs, client, clock=clock)
        assert r is not None and r.event.new_data is not None
        assert r.event.new_data.offset_interval == m.OffsetInterval(start=2, end=2)
        assert client.starts == 2 and client.pid != pid
