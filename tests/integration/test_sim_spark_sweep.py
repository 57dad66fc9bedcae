"""The trust-policy sweep as real Spark jobs on ``local[*]`` (``sim/spark_sweep.py``).

A small grid (a 24-node, 5-minute base scenario; quorum and sample; 30 % malicious; 2 and 3
colluders inside a 3-of-N trusted set; seeds 1-3) runs one simulation per Spark task. Spark only
distributes: each task's result equals the same simulation run in this process. The table
and the plot are written, and the acceptance point holds: quorum with fewer than k colluders
inside the trusted set is fooled in no seed. The full grid is ``make bench-sim-sweep``.

The Spark part runs in a child process, as ``odf-node sim spark-sweep`` does: a JVM started in
the test process would stay for the whole session with this sweep's options, and every later
in-process Spark session of the suite (the engine sandbox corpus checks the engine's own JVM
options) would silently get it instead of its own.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from netns import require_loopback_only

from sim import spark_sweep

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SMALL = """\
name = "sweep-small"
seed = 1
nodes = 24
duration_s = 300
[topology]
outbound = 3
[workload]
datasets = 2
head_interval_s = 30
attester_fraction = 0.25
verify_s_per_slice = 10
[policy]
name = "quorum"
trusted = "attesters"
k = 3
[adversary]
malicious_fraction = 0.3
spoof_owners = 1
spoof_fraction = 1.0
"""


def test_a_small_sweep_runs_as_spark_tasks(tmp_path: Path) -> None:
    require_loopback_only()  # Spark binds its driver to 127.0.0.1 only
    scenario = tmp_path / "small.toml"
    scenario.write_text(SMALL)
    grid = spark_sweep.tasks(str(scenario), ("quorum", "sample"), (0.3,), (2, 3), (1, 2, 3))
    assert len(grid) == 12
    rows = _run_on_spark_in_a_child(scenario, tmp_path / "rows.json")
    assert [(r["cell"]["policy"], r["cell"]["inside"], r["seed"]) for r in rows] == [
        (t.cell.policy, t.cell.inside, t.seed) for t in grid
    ]
    # Spark ran the very simulation: the same numbers as in this process (wall time aside).
    for i in (0, 7):
        here = json.loads(json.dumps(spark_sweep.run_task(grid[i])))
        assert {k: v for k, v in rows[i].items() if k != "wall_s"} == {
            k: v for k, v in here.items() if k != "wall_s"
        }

    summary = spark_sweep.write(rows, tmp_path / "out")
    by = {(s["policy"], s["inside"]): s for s in summary}
    safe = by[("quorum", 2)]
    assert safe["seeds"] == 3 and safe["fooled_seeds"] == 0 and safe["fooled_max"] == 0.0
    assert all(
        r["bad_head_receipts"] > 0 and r["bad_heads_trusted"] == 0
        for r in rows
        if r["cell"]["policy"] == "quorum" and r["cell"]["inside"] == 2
    )
    # With k colluders inside the set the same quorum is fooled: the guarantee is exactly "< k".
    assert by[("quorum", 3)]["fooled_seeds"] > 0
    assert safe["replays_per_node"] is not None and safe["time_to_trust_p50_s"] is not None

    out = tmp_path / "out"
    table = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    assert len(table) == 4 and {r["policy"] for r in table} == {"quorum", "sample"}
    md = (out / "table.md").read_text()
    assert "| quorum | 30% | 2 | 0.000 ± 0.000 | 0 / 3 |" in md
    assert (out / "policy_sweep.png").stat().st_size > 10_000
    assert (out / "sweep.json").exists()


_CHILD = """\
import json, sys
from sim import spark_sweep
grid = spark_sweep.tasks(sys.argv[1], ("quorum", "sample"), (0.3,), (2, 3), (1, 2, 3))
with open(sys.argv[2], "w") as f:
    json.dump(spark_sweep.run_on_spark(grid, "local[*]"), f)
"""


def _run_on_spark_in_a_child(scenario: Path, out: Path) -> list[dict[str, Any]]:
    """The test's grid run by ``run_on_spark`` in a fresh interpreter (its own JVM)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(scenario), str(out)],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows
