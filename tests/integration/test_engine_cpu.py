"""Per-request CPU-time budget of the engine worker (real DataFusion worker processes).

A request whose worker process tree burns more CPU than ``EngineClient.cpu_limit`` fails with
the typed ``TransformCpuExceeded`` (``EngineCpuExceeded`` from ``run_transform``), whose
message names the setting to raise, long before the wall-clock timeout; the worker is killed
and the next request is served by a fresh one. Both protocols: the framed one the node uses
for DataFusion, and gRPC (Spark's, whose path is the same ``_attempts`` code).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator.transform.engines import DATAFUSION_VERSIONS
from coordinator.transform.model import (
    CPU_LIMIT_SETTING,
    TransformCpuExceeded,
    TransformInternalError,
    TransformSuccess,
)
from coordinator.transform.run import EngineCpuExceeded, run_transform
from coordinator.transform.testing import StepClock, inputs_of, make_derivative, make_root, push_csv
from node.engine_client import EngineClient, process_tree_cpu
from node.engine_router import datafusion_python
from tests.golden.test_datafusion_engine import request

pytestmark = pytest.mark.integration

ROWS = [(i, 0, f"c{i}", i) for i in range(2000)]
BURN = (
    "SELECT f.event_time, f.city, s.k FROM foo f CROSS JOIN (SELECT sum(a.population + "
    "b.population + c.population) AS k FROM foo a, foo b, foo c) s"
)
"""8e9 rows summed over a three-way cross join of 2,000 rows: minutes of CPU, little memory,
nothing the sandbox refuses."""
BUDGET = 2.0


def test_process_tree_cpu_counts_live_and_reaped_children() -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    before = process_tree_cpu(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while process_tree_cpu(child.pid) < 0.6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_tree_cpu(child.pid) >= 0.6  # a live child
    finally:
        child.kill()
        child.wait()
    assert process_tree_cpu(child.pid) == 0.0  # gone
    # Reaped: its time is in our cutime now.
    assert process_tree_cpu(os.getpid()) - before >= 0.6


@pytest.mark.parametrize("protocol", ["frames", "grpc"])
def test_request_over_cpu_budget_fails_typed_and_worker_recovers(
    tmp_path: Path, protocol: str
) -> None:
    python = datafusion_python(DATAFUSION_VERSIONS[0])
    with EngineClient(
        engine="datafusion",
        python=str(python),
        idle_timeout=0,
        protocol=protocol,
        cpu_limit=BUDGET,
        cpu_poll=0.2,
        request_timeout=120,
    ) as client:
        assert isinstance(client.execute_transform(request(tmp_path / "ok")), TransformSuccess)
        pid = client.pid
        t0 = time.monotonic()
        resp = client.execute_transform(
            request(tmp_path / "burn", queries=[(None, BURN)], rows=ROWS)
        )
        elapsed = time.monotonic() - t0
        assert isinstance(resp, TransformCpuExceeded), resp
        assert isinstance(resp, TransformInternalError)  # a replay treats it as an engine error
        assert resp.limit_seconds == BUDGET
        assert BUDGET < resp.used_seconds < BUDGET + 3
        assert CPU_LIMIT_SETTING in resp.message and "CPU" in resp.message
        assert elapsed < 30, elapsed  # the budget stopped it, not the 120 s wall clock
        assert client.starts == 1  # killed, not retried
        # A fresh worker serves the next request; the budget is per request.
        req = request(tmp_path / "ok2")
        assert isinstance(client.execute_transform(req), TransformSuccess)
        assert client.starts == 2 and client.pid != pid


def test_run_transform_raises_engine_cpu_exceeded(tmp_path: Path) -> None:
    """The typed error reaches ``dataset transform`` as ``EngineCpuExceeded``; no commit."""

    class OverBudget:
        def execute_transform(self, _request: object) -> TransformCpuExceeded:
            return TransformCpuExceeded(
                message=f"over budget (raise {CPU_LIMIT_SETTING})",
                limit_seconds=1.0,
                used_seconds=1.5,
            )

    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n", clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], [(None, "SELECT * FROM cities")])
    head = der.head()
    with pytest.raises(EngineCpuExceeded) as err:
        run_transform(der, inputs_of(root), OverBudget(), clock=clock)  # type: ignore[arg-type]
    assert (err.value.limit_seconds, err.value.used_seconds) == (1.0, 1.5)
    assert CPU_LIMIT_SETTING in str(err.value)
    assert der.head() == head
