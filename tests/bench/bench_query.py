"""``make bench-query``: the cost of reading verified data, against the raw operation on the same
bytes, measured in one run (the machine is shared: ratios, medians and the load are reported).

Shapes (each a function ``shape_*`` returning a dict of figures; later shapes add to the list):

* ``engine_aggregation``: a 1M-row aggregation through the node's query engine adapter
  (:class:`node.adapters.query_engine.DataFusionQueryEngine`: a sandboxed worker process, the
  answer as an Arrow IPC file) against DataFusion run directly on the same parquet files in the
  same release's Python. Target of issue 40: ratio <= 1.2.

Run: ``make bench-query`` (``.venv/bin/python tests/bench/bench_query.py [--rows N] [--runs K]``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from node.adapters.query_engine import DataFusionQueryEngine  # noqa: E402
from node.app.ports import QueryLimits, QueryTable  # noqa: E402
from node.engine_router import datafusion_python  # noqa: E402

AGGREGATION = (
    "select city, count(*) as n, sum(population) as p, avg(population) as a "
    'from "bench.cities" group by city order by city'
)
LIMITS = QueryLimits(deadline_s=120.0, memory_bytes=1 << 30, max_rows=100_000, max_bytes=1 << 30)


def load() -> str:
    """The machine's load averages (1, 5, 15 min)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def make_parquet(folder: Path, rows: int, parts: int = 4) -> list[str]:
    """``rows`` rows of a city/population table in ``parts`` parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = []
    per = rows // parts
    for p in range(parts):
        start = p * per
        idx = pa.array(range(start, start + per), pa.int64())
        t = pa.table(
            {
                "offset": idx,
                "op": pa.array([0] * per, pa.int32()),
                "city": pa.array([f"city-{i % 1000}" for i in range(start, start + per)]),
                "population": pa.array([(i * 7919) % 100_000 for i in range(start, start + per)]),
            }
        )
        f = folder / f"part-{p}.parquet"
        pq.write_table(t, f)
        files.append(str(f))
    return files


_DIRECT = r"""
import sys, time, json, os, tempfile
import datafusion
files = json.loads(sys.argv[1]); sql = sys.argv[2]; runs = int(sys.argv[3])
d = tempfile.mkdtemp()
for k, f in enumerate(files):
    os.symlink(f, os.path.join(d, f"p{k}.parquet"))
times = []
for _ in range(runs):
    t0 = time.perf_counter()
    ctx = datafusion.SessionContext()
    ctx.register_parquet("cities", d)
    ctx.sql(sql.replace('"bench.cities"', "cities")).to_arrow_table()
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""


def direct_times(files: list[str], sql: str, runs: int) -> list[float]:
    """DataFusion in its own Python on the same files, session set-up included (as ours)."""
    out = subprocess.run(
        [str(datafusion_python("51.0.0")), "-c", _DIRECT, json.dumps(files), sql, str(runs)],
        check=True,
        capture_output=True,
        text=True,
    )
    return [float(x) for x in json.loads(out.stdout)]


def shape_engine_aggregation(files: list[str], runs: int) -> dict[str, Any]:
    """The engine adapter vs DataFusion directly, a 1M-row aggregation."""
    table = QueryTable("bench.cities", "did:odf:bench", None, tuple(files))

    async def ours() -> list[float]:
        engine = DataFusionQueryEngine(warm_workers=1)
        times = []
        try:
            await engine.query("select 1", [], LIMITS)  # the first worker starts cold
            for _ in range(runs):
                await asyncio.sleep(1.0)  # the next warm worker is ready, as between queries
                t0 = time.perf_counter()
                await engine.query(AGGREGATION, [table], LIMITS)
                times.append(time.perf_counter() - t0)
        finally:
            await engine.close()
        return times

    mine = asyncio.run(ours())
    raw = direct_times(files, AGGREGATION, runs)
    return {
        "ours_median_s": round(statistics.median(mine), 4),
        "direct_median_s": round(statistics.median(raw), 4),
        "ratio": round(statistics.median(mine) / statistics.median(raw), 3),
        "target_ratio_max": 1.2,
    }


SHAPES: list[tuple[str, Callable[[list[str], int], dict[str, Any]]]] = [
    ("engine_aggregation", shape_engine_aggregation),
]


def main() -> None:
    """Run every shape and print one JSON report."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", default=None, help="run one shape by name")
    args = ap.parse_args()
    report: dict[str, Any] = {"rows": args.rows, "runs": args.runs, "load_before": load()}
    with tempfile.TemporaryDirectory() as tmp:
        files = make_parquet(Path(tmp), args.rows)
        for name, shape in SHAPES:
            if args.only and name != args.only:
                continue
            report[name] = shape(files, args.runs)
    report["load_after"] = load()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
