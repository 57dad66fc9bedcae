"""Spark Connect (``sc://``): refused explicitly, because the sandbox cannot see plans over it.

No Spark Connect server for Spark 3.5 can be installed here (see ``docs/spark-engine.md``), so
these tests check the refusal path with the real worker process: it must exit before creating
any session (a Connect session would run the SQL text on the server before any check), and
the client must report why.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.transform.model import TransformInternalError  # noqa: E402
from coordinator.transform.plan import OutputPaths, clear_outputs, plan_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    StepClock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from node.engine_client import EngineClient  # noqa: E402

pytestmark = pytest.mark.integration

URL = "sc://127.0.0.1:15002"


def test_worker_refuses_a_connect_master_before_any_session() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "engine.worker", "--listen", "127.0.0.1:0", "--master", URL],
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "READY" not in proc.stdout
    assert "Spark Connect (sc://) is refused" in proc.stderr
    assert "py4j" in proc.stderr


def test_client_reports_the_refusal(tmp_path: Path) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n", clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], [(None, "SELECT * FROM cities")])
    paths = OutputPaths.under(tmp_path / "w")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    with EngineClient(master=URL, idle_timeout=0, start_timeout=60) as client:
        resp = client.execute_transform(plan.request)
        assert isinstance(resp, TransformInternalError)
        assert "Spark Connect (sc://) is refused" in resp.message
        assert not client.running
    assert not paths.new_data_path.exists()
