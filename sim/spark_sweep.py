"""Trust-policy sweeps as Spark jobs: each simulation one Spark task (``docs/simulation.md``).

The grid is policies x malicious fraction x colluders inside the trusted set x seeds. Every cell
is one deterministic simulation (:func:`sim.simulator.run`, the same code as ``odf-node sim
run``); Spark only distributes them: ``local[*]`` on this machine by default, any
``spark://host:7077`` master for a cluster (the distributed engine users already run when one
machine is too small). The driver collects the per-seed results and summarises each cell with a
95 % confidence interval over seeds (Student's t): the fooled fraction, replays per node and the
median time to trust.

"Colluders inside the trusted set": the malicious false attesters are the same in every cell of
a malicious fraction; ``inside`` of them are listed among the trusted attesters (with the honest
public attesters), the others attest from outside the set. The set only matters to ``quorum``
and ``sample``: ``verify-all`` replays everything and ``reputation`` weighs every signer.

PySpark is imported only here, and only when a sweep runs; ``p2p`` and ``coordinator`` never
import it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import os
import statistics
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sim.scenario import Scenario, load

POLICIES: Final = ("verify-all", "quorum", "sample", "reputation")
MALICIOUS: Final = (0.1, 0.3)
INSIDE: Final = (0, 2, 3)
SEEDS: Final = tuple(range(1, 11))
SCENARIO: Final = "sweep"

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (then the normal's).
_T95: Final = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Cell:
    """One grid cell: a policy, a malicious fraction and the colluders inside the trusted set."""

    policy: str
    malicious: float
    inside: int

    def overrides(self) -> dict[str, Any]:
        """The scenario overrides of this cell (``--set`` keys of ``odf-node sim run``)."""
        return {
            "policy.name": self.policy,
            "policy.trusted": "attesters",
            "policy.trusted_colluders": self.inside,
            "adversary.malicious_fraction": self.malicious,
        }


@dataclass(frozen=True, slots=True)
class Task:
    """One simulation: a cell, a seed and the scenario with the cell's overrides applied."""

    cell: Cell
    seed: int
    scenario: Scenario


def tasks(
    scenario: str = SCENARIO,
    policies: Sequence[str] = POLICIES,
    malicious: Sequence[float] = MALICIOUS,
    inside: Sequence[int] = INSIDE,
    seeds: Sequence[int] = SEEDS,
) -> list[Task]:
    """Every (cell, seed) of the grid, scenarios loaded (and validated) on the driver."""
    out: list[Task] = []
    for pol, mal, ins in itertools.product(policies, malicious, inside):
        cell = Cell(pol, mal, ins)
        sc = load(scenario, cell.overrides())
        out.extend(Task(cell, seed, sc) for seed in seeds)
    return out


def run_task(task: Task) -> dict[str, Any]:
    """Run one simulation (on a Spark executor): the cell, the seed and the metrics it needs."""
    from sim.simulator import run

    res = run(task.scenario, task.seed)
    keep = (
        "seed",
        "honest_nodes",
        "malicious_nodes",
        "bad_heads",
        "bad_head_receipts",
        "bad_heads_trusted",
        "bad_accept_probability",
        "replays_per_node",
        "time_to_trust_s",
        "trusted_heads",
        "engine_s_per_trusted_head",
        "delivery_ratio",
        "wall_s",
    )
    return {"cell": dataclasses.asdict(task.cell)} | {k: res[k] for k in keep}


def _local(master: str) -> bool:
    return master.startswith("local")


def _ship_packages(context: Any) -> None:
    """Send the pure-Python packages a simulation imports to a cluster's executors.

    Executors still need the third-party libraries (``cryptography``, …): install odf-node's
    dependencies there (``docs/simulation.md``).
    """
    root = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix="odf-sim-"))
    archive = tmp / "odf_sim_packages.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for package in ("sim", "p2p", "coordinator"):
            for f in sorted((root / package).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    z.write(f, f.relative_to(root).as_posix())
    context.addPyFile(str(archive))


def run_on_spark(
    grid: list[Task], master: str = "local[*]", app_name: str = "odf-node-sim-sweep"
) -> list[dict[str, Any]]:
    """Run every task of ``grid`` as one Spark task on ``master``; results in grid order."""
    from pyspark.sql import SparkSession  # heavy (a JVM): only when a sweep runs

    builder = SparkSession.builder.master(master).appName(app_name)
    if _local(master):
        # The local driver and executors talk over loopback only (and run inside unshare -rn).
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
        # The Python workers run this interpreter (its virtualenv has the simulator's
        # dependencies), not the first python3 on PATH; PySpark reads only the environment
        # variable for that (not spark.pyspark.python). A cluster's workers use their own.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    try:
        context = spark.sparkContext
        if not _local(master):
            _ship_packages(context)
        # One partition per simulation: each is one Spark task, scheduled wherever a core is free.
        rdd = context.parallelize(grid, numSlices=max(1, len(grid)))
        return list(rdd.map(run_task).collect())
    finally:
        spark.stop()


def ci95(values: Iterable[float]) -> tuple[float, float] | None:
    """Mean and half-width of the 95 % confidence interval (Student's t) of ``values``."""
    xs = list(values)
    if not xs:
        return None
    mean = statistics.fmean(xs)
    if len(xs) == 1:
        return mean, math.nan
    t = _T95[len(xs) - 2] if len(xs) - 1 <= len(_T95) else 1.96
    return mean, t * statistics.stdev(xs) / math.sqrt(len(xs))


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell: fooled fraction, replays per node, median time to trust (95 % CIs)."""
    cells: dict[tuple[str, float, int], list[dict[str, Any]]] = {}
    for r in rows:
        c = r["cell"]
        cells.setdefault((c["policy"], c["malicious"], c["inside"]), []).append(r)
    out = []
    for (policy, malicious, inside), rs in cells.items():
        ttt = [r["time_to_trust_s"]["p50"] for r in rs if r["time_to_trust_s"]]
        out.append(
            {
                "policy": policy,
                "malicious": malicious,
                "inside": inside,
                "seeds": len(rs),
                "fooled": ci95(r["bad_accept_probability"] for r in rs),
                "fooled_seeds": sum(1 for r in rs if r["bad_heads_trusted"] > 0),
                "fooled_max": max(r["bad_accept_probability"] for r in rs),
                "replays_per_node": ci95(r["replays_per_node"] for r in rs),
                "time_to_trust_p50_s": ci95(ttt),
                "time_to_trust_seeds": len(ttt),
            }
        )
    return out


def _ci(v: tuple[float, float] | None, digits: int) -> str:
    if v is None:
        return "-"
    mean, half = v
    if math.isnan(half):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def markdown(summary: list[dict[str, Any]]) -> str:
    """The summary as a markdown table (mean ± 95 % CI half-width over seeds)."""
    lines = [
        "| policy | malicious | colluders inside | fooled fraction | seeds fooled | "
        "replays / node | time to trust p50 (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        lines.append(
            f"| {s['policy']} | {s['malicious']:.0%} | {s['inside']} | {_ci(s['fooled'], 3)} | "
            f"{s['fooled_seeds']} / {s['seeds']} | {_ci(s['replays_per_node'], 1)} | "
            f"{_ci(s['time_to_trust_p50_s'], 1)} |"
        )
    return "\n".join(lines) + "\n"


def table_csv(summary: list[dict[str, Any]]) -> str:
    """The summary as CSV: means and CI half-widths in separate columns."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    metrics = ("fooled", "replays_per_node", "time_to_trust_p50_s")
    w.writerow(
        ["policy", "malicious", "inside", "seeds", "fooled_seeds", "fooled_max"]
        + [f"{m}_{part}" for m in metrics for part in ("mean", "ci95")]
    )
    for s in summary:
        row: list[Any] = [s[k] for k in ("policy", "malicious", "inside", "seeds")]
        row += [s["fooled_seeds"], s["fooled_max"]]
        for m in metrics:
            row += list(s[m]) if s[m] is not None else ["", ""]
        w.writerow(row)
    return buf.getvalue()


def write(rows: list[dict[str, Any]], out: Path, plot: bool = True) -> list[dict[str, Any]]:
    """Write ``sweep.json`` (every run), ``table.csv``, ``table.md`` and the plot; the summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows)
    (out / "sweep.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    (out / "table.csv").write_text(table_csv(summary))
    (out / "table.md").write_text(markdown(summary))
    if plot:
        from sim import plots  # matplotlib is slow to import: only when plotting

        plots.policy_sweep(summary, out / "policy_sweep.png")
    return summary


__all__ = [
    "INSIDE",
    "MALICIOUS",
    "POLICIES",
    "SCENARIO",
    "SEEDS",
    "Cell",
    "Task",
    "ci95",
    "markdown",
    "run_on_spark",
    "run_task",
    "summarise",
    "table_csv",
    "tasks",
    "write",
]
