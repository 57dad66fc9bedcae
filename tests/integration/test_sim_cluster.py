"""Real-cluster mode: 10 real node processes on the cluster scenario's topology and latencies.

The test re-runs ``python -m sim.cluster cluster`` under ``unshare -rn`` (a fresh loopback-only
network namespace, nested in the one the suite uses) like ``test_p2p_cluster.py``. Links are
userspace delay proxies (no netem/veth on this kernel; see ``sim/cluster.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_real_cluster_matches_the_scenario_and_reports_the_sim_ratio() -> None:
    if shutil.which("unshare") is None:
        pytest.fail("unshare(1) is required to isolate the cluster in a network namespace")
    cmd = f"ip link set lo up && exec {sys.executable} -m sim.cluster cluster --json"
    proc = subprocess.run(
        ["unshare", "-rn", "bash", "-c", cmd],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=85,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(res)
    assert res["real_nodes"] >= 10
    assert res["delivery_ratio"] >= 0.95, res
    assert res["sim_delivery_ratio"] == 1.0, res
    # The proxies impose the scenario's link latencies: no real delivery can beat the ideal
    # (shortest-path) latency the simulator computes for the same links.
    assert res["latency_ms"]["p50"] >= 0.9 * res["sim_ideal_latency_ms"]["p50"], res
    assert res["ratio_real_over_sim_p50"] > 0 and res["ratio_real_over_sim_p99"] > 0
