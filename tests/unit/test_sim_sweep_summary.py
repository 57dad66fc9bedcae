"""The Spark sweep's statistics and tables (``sim/spark_sweep.py``), without Spark."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sim import spark_sweep
from sim.scenario import ScenarioError


def row(
    policy: str, inside: int, seed: int, fooled: float, replays: float, ttt: float | None
) -> dict[str, Any]:
    """One simulation's result as :func:`sim.spark_sweep.run_task` returns it (the fields used)."""
    return {
        "cell": {"policy": policy, "malicious": 0.3, "inside": inside},
        "seed": seed,
        "bad_accept_probability": fooled,
        "bad_heads_trusted": 1 if fooled else 0,
        "replays_per_node": replays,
        "time_to_trust_s": {"p50": ttt} if ttt is not None else None,
    }


def test_ci95_is_students_t_over_seeds() -> None:
    mean, half = spark_sweep.ci95([1.0, 2.0, 3.0])
    # mean 2, s = 1, t(0.975, 2 df) = 4.303: 4.303 / sqrt(3)
    assert mean == 2.0 and half == pytest.approx(4.303 / math.sqrt(3))
    mean, half = spark_sweep.ci95([5.0] * 10)
    assert (mean, half) == (5.0, 0.0)
    one = spark_sweep.ci95([7.0])
    assert one is not None and one[0] == 7.0 and math.isnan(one[1])
    assert spark_sweep.ci95([]) is None


def test_summary_counts_fooled_seeds_and_skips_seeds_that_trusted_nothing() -> None:
    rows = [
        row("quorum", 2, 1, 0.0, 8.0, 20.0),
        row("quorum", 2, 2, 0.0, 10.0, None),
        row("quorum", 3, 1, 0.1, 8.0, 21.0),
        row("quorum", 3, 2, 0.0, 8.0, 22.0),
    ]
    (safe, fooled) = spark_sweep.summarise(rows)
    assert safe["fooled_seeds"] == 0 and safe["time_to_trust_seeds"] == 1
    assert safe["replays_per_node"][0] == 9.0
    assert fooled["fooled_seeds"] == 1 and fooled["fooled_max"] == 0.1
    md = spark_sweep.markdown([safe, fooled])
    assert "| quorum | 30% | 2 | 0.000 ± 0.000 | 0 / 2 | 9.0 ± 12.7 | 20.0 |" in md
    csv = spark_sweep.table_csv([safe, fooled]).splitlines()
    assert csv[0].startswith("policy,malicious,inside,seeds,fooled_seeds,fooled_max,fooled_mean")
    assert len(csv) == 3


def test_the_grid_is_checked_on_the_driver() -> None:
    grid = spark_sweep.tasks(policies=("quorum",), malicious=(0.1,), inside=(2,), seeds=(1, 2))
    assert [(t.cell.policy, t.seed) for t in grid] == [("quorum", 1), ("quorum", 2)]
    assert grid[0].scenario.policy.trusted_colluders == 2
    with pytest.raises(ScenarioError, match="unknown policy"):
        spark_sweep.tasks(policies=("trust-me",), seeds=(1,))
