"""Benchmark: replay of an N-block DataFusion derivative vs direct DataFusion SQL vs Spark.

Builds a root dataset with N pushes and two derivatives over it with the same two-step
map/filter: one ``engine: datafusion`` (transformed N times on the DataFusion 51 worker, block
times in kamu's DataFusion-51 era so the inferred release is tried first), one
``engine: spark`` (transformed N times on the Spark worker). Then, each over ``--rounds``
passes (order rotated per round, load average printed), seconds per block:

* **verify, DataFusion worker**: ``replay_transforms`` over the N blocks through the node's
  engine router (planning, the node's framed protocol, sandbox, the worker's transform and its
  Arrow IPC output, the node's logical hash of it, comparison);
* **direct DataFusion SQL**: in a process of the same DataFusion 51 environment (all blocks
  once untimed to warm it, then timed), per block:
  a fresh ``SessionContext`` (one target partition; its configuration built once, as the
  engine's), the slice file registered, the offset
  filter, the two queries, the system columns added and one parquet file written. No sandbox,
  protocol, hashing or comparison. Every direct output's logical hash is checked against the
  published one (outside the timing);
* **verify, in process** (decomposition): the same ``replay_transforms`` in one process of the
  DataFusion 51 environment with the engine class called directly (no framed protocol, no
  second process: the hashing and the engine take turns);
* **direct + hash**: the direct pass plus the logical hash of its outputs (what any verifier
  must compute to compare with the published block), timed in this process;
* **direct - write**: the direct pass without the time it spent writing its Parquet files (a
  replay on the node's workers writes none: the worker leaves each output as an Arrow IPC file
  and the node hashes it, see ``coordinator/transform/output.py``);
* **verify, Spark worker**: ``replay_transforms`` of the Spark derivative (same queries, one
  block per push of the first ``--spark-blocks`` pushes: Spark costs ~1 s per block warm) on
  the warm Spark worker.

Headline: verify DataFusion / direct DataFusion (target <= 1.3x), and Spark / DataFusion.

Usage: ``python tests/bench/bench_datafusion.py [--blocks 100] [--rows 1000] [--rounds 3]
[--spark-blocks 20] [--datafusion-workers N]`` (``make bench-datafusion`` runs it in a
loopback-only namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.data import logical_hash  # noqa: E402
from coordinator.metadata import model as m  # noqa: E402
from coordinator.metadata.timestamp import Timestamp  # noqa: E402
from coordinator.multiformats import Multihash  # noqa: E402
from coordinator.storage.dataset import Dataset  # noqa: E402
from coordinator.transform.engines import NEWEST_DATAFUSION  # noqa: E402
from coordinator.transform.plan import OutputPaths, plan_replay  # noqa: E402
from coordinator.transform.run import run_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    StepClock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from coordinator.transform.verify import replay_transforms  # noqa: E402
from node.engine_client import EngineClient  # noqa: E402
from node.engine_router import EngineRouter, datafusion_python  # noqa: E402

QUERIES = [
    ("big", "SELECT * FROM cities WHERE population > 100"),
    (None, "SELECT op, event_time, upper(city) AS city, population * 2 AS pop2 FROM big"),
]
START = Timestamp.parse("2026-02-01T00:00:00Z")

DIRECT = r"""
import json, sys, time, os
import numpy as np, pyarrow as pa, pyarrow.parquet as pq, datafusion
jobs = json.load(open(sys.argv[1]))
queries = json.loads(sys.argv[2])
out_dir = sys.argv[3]
# Built once, as the engine does (a fresh session per block from it).
cfg = (datafusion.SessionConfig().with_target_partitions(1)
       .set("datafusion.sql_parser.enable_ident_normalization", "false"))
writing = [0.0]
def one(j):
    ctx = datafusion.SessionContext(cfg)
    ctx.register_parquet("raw", j["path"], file_extension="")
    ctx.sql(f'CREATE VIEW cities AS SELECT * FROM raw WHERE "offset" >= {j["start"]} '
            f'AND "offset" <= {j["end"]}')
    for alias, q in queries:
        df = ctx.sql(q)
        ctx.register_view(alias or "__output__", df)
    t = pa.Table.from_batches(ctx.table("__output__").collect())
    n = t.num_rows
    t = t.set_column(t.schema.get_field_index("city"), "city", t.column("city").cast(pa.string()))
    ms_utc = pa.timestamp("ms", tz="UTC")
    st = pa.array(np.full(n, j["system_time_ms"], dtype=np.int64)).cast(ms_utc)
    cols = [pa.array(np.arange(j["next_offset"], j["next_offset"] + n, dtype=np.int64)),
            t.column("op"), st] + [t.column(c) for c in t.schema.names if c != "op"]
    names = ["offset", "op", "system_time"] + [c for c in t.schema.names if c != "op"]
    w0 = time.perf_counter()
    pq.write_table(pa.table(cols, names=names), os.path.join(out_dir, j["name"]),
                   compression="snappy", store_schema=False)
    writing[0] += time.perf_counter() - w0
for j in jobs:  # warm-up pass, untimed (the worker it is compared with is warm too)
    one(j)
writing[0] = 0.0
t0, c0 = time.perf_counter(), time.process_time()
for j in jobs:
    one(j)
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "writing": writing[0]}))
"""

INPROCESS = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from coordinator.storage.dataset import Dataset
from coordinator.transform.testing import inputs_of
from coordinator.transform.verify import replay_transforms
from engine.datafusion_engine import DataFusionEngine
tmp = Path(sys.argv[2])
root, der = Dataset(tmp / "root"), Dataset(tmp / "der")
engine = DataFusionEngine()
replay_transforms(der, inputs_of(root), engine)  # warm-up pass, untimed
t0 = time.perf_counter()
report = replay_transforms(der, inputs_of(root), engine)
assert report.ok, report
print(json.dumps({"seconds": time.perf_counter() - t0, "blocks": report.blocks_replayed}))
"""


def csv(block: int, rows: int) -> str:
    """One push of ``rows`` rows (the ``block``-th)."""
    lines = ["event_time,city,population"]
    for i in range(rows):
        sec = (block * rows + i) % 86400
        lines.append(
            f"2020-01-{1 + block % 28:02d}T{sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}Z,"
            f"c{i % 97},{(i * 37) % 1000}"
        )
    return "\n".join(lines) + "\n"


def load() -> str:
    """The 1/5/15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def transforms(der: Dataset) -> list[tuple[Multihash, m.MetadataBlock]]:
    """The ExecuteTransform blocks, oldest first."""
    return [
        (h, b)
        for h, b in reversed(list(der.iter_blocks()))
        if isinstance(b.event, m.ExecuteTransform)
    ]


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def verify_round(
    der: Dataset, inputs: Any, engine: Any, n: int, workers: list[int] | None = None
) -> tuple[float, float]:
    """One full replay: wall seconds per block, CPU seconds per block (this process and the
    ``workers`` processes together)."""
    w0 = sum(process_cpu(w) for w in workers or [])
    t0, c0 = time.perf_counter(), time.process_time()
    report = replay_transforms(der, inputs, engine)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    if workers:
        cpu += sum(process_cpu(w) for w in workers) - w0
    assert report.ok and report.blocks_replayed == n, report
    return dt / n, cpu / n


def direct_jobs(
    der: Dataset, inputs: Any, scratch: Path
) -> tuple[list[dict[str, Any]], dict[str, Multihash]]:
    """What the direct pass runs per block, and the published logical hash per output name."""
    jobs, expected = [], {}
    for h, b in transforms(der):
        plan = plan_replay(der, inputs, b, paths=OutputPaths.under(scratch / "unused"))
        (inp,) = plan.request.query_inputs
        (path,) = inp.data_paths
        assert inp.offset_interval is not None
        name = str(h)
        jobs.append(
            {
                "name": name,
                "path": str(path),
                "start": inp.offset_interval.start,
                "end": inp.offset_interval.end,
                "next_offset": plan.request.next_offset,
                "system_time_ms": b.system_time.epoch_ns // 1_000_000,
            }
        )
        assert isinstance(b.event, m.ExecuteTransform) and b.event.new_data is not None
        expected[name] = b.event.new_data.logical_hash
    return jobs, expected


def direct_round(
    jobs: list[dict[str, Any]], expected: dict[str, Multihash], scratch: Path
) -> tuple[float, float, float, float]:
    """The direct pass in the DataFusion 51 environment, per block: wall seconds, hashing
    seconds (outside the timing, as every output's hash is checked), CPU seconds and the
    seconds of the wall time spent writing Parquet."""
    out = scratch / "direct"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    jobs_file = scratch / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    proc = subprocess.run(
        [
            str(datafusion_python("51.0.0")),
            "-c",
            DIRECT,
            str(jobs_file),
            json.dumps(QUERIES),
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    timed = json.loads(proc.stdout.strip().splitlines()[-1])
    seconds, cpu, writing = timed["seconds"], timed["cpu"], timed["writing"]
    t0 = time.perf_counter()
    for name, lh in expected.items():
        assert logical_hash(out / name) == lh.to_multibase(), f"direct output differs at {name}"
    hashing = time.perf_counter() - t0
    n = len(jobs)
    return float(seconds) / n, hashing / n, float(cpu) / n, float(writing) / n


def inprocess_round(tmp: Path) -> float:
    """``replay_transforms`` with the DataFusion engine in the same process (no gRPC)."""
    proc = subprocess.run(
        [str(datafusion_python("51.0.0")), "-c", INPROCESS, str(ROOT), str(tmp)],
        check=True,
        capture_output=True,
        text=True,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(out["seconds"]) / int(out["blocks"])


def main() -> None:
    """Build, measure, report."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=100)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--spark-blocks", type=int, default=20, help="0: no Spark comparison")
    p.add_argument(
        "--datafusion-workers",
        type=int,
        default=None,
        help="most DataFusion workers per release (default: the node's, two on two cores)",
    )
    args = p.parse_args()
    n = args.blocks
    tmp = Path(tempfile.mkdtemp(prefix="odf-bench-df-"))
    spark_client = EngineClient(master="local[2]", idle_timeout=0)
    router = EngineRouter(
        lambda: spark_client, idle_timeout=0, datafusion_workers=args.datafusion_workers
    )
    try:
        clock = StepClock(START)
        root = make_root(tmp, "root")
        der = make_derivative(tmp, "der", [(root, "cities")], QUERIES, engine="datafusion")
        sder = make_derivative(tmp, "sder", [(root, "cities")], QUERIES, engine="spark")
        inputs = inputs_of(root)
        build = {"datafusion": 0.0, "spark": 0.0}
        for i in range(n):
            push_csv(root, tmp / "in", csv(i, args.rows), clock)
            t0 = time.perf_counter()
            assert run_transform(der, inputs, router, clock=clock) is not None
            build["datafusion"] += time.perf_counter() - t0
            if i < args.spark_blocks:
                # one Spark block per push too, so both derivatives have the same N slices
                t0 = time.perf_counter()
                assert run_transform(sder, inputs, router, clock=clock) is not None
                build["spark"] += time.perf_counter() - t0
        print(
            f"built {n} blocks x {args.rows} rows: DataFusion {build['datafusion']:.1f} s, "
            f"Spark {build['spark']:.1f} s",
            flush=True,
        )
        jobs, expected = direct_jobs(der, inputs, tmp)
        # Warm both ways (untimed): the DataFusion worker and the direct pass's page cache.
        verify_round(der, inputs, router, n)
        verify_round(der, inputs, router, n)  # a second worker, if started by the first, is up
        workers = sum(c.ready for c in router.datafusion_pool(NEWEST_DATAFUSION))
        print(f"DataFusion 51 workers ready: {workers}", flush=True)
        direct_round(jobs, expected, tmp)
        passes = ["verify-df", "inproc-df", "direct-df"] + (
            ["verify-spark"] if args.spark_blocks else []
        )
        results: dict[str, list[float]] = {k: [] for k in [*passes, "direct+hash", "direct-write"]}
        cpu: dict[str, list[float]] = {"verify-df": [], "direct-df": []}
        for r in range(args.rounds):
            order = passes[r % len(passes) :] + passes[: r % len(passes)]
            for name in order:
                if name == "verify-df":
                    pool = router.datafusion_pool(NEWEST_DATAFUSION)
                    pids = [c.pid for c in pool if c.pid is not None]
                    wall, used = verify_round(der, inputs, router, n, pids)
                    results[name].append(wall)
                    cpu[name].append(used)
                elif name == "inproc-df":
                    results[name].append(inprocess_round(tmp))
                elif name == "direct-df":
                    sql, hashing, used, writing = direct_round(jobs, expected, tmp)
                    results[name].append(sql)
                    results["direct+hash"].append(sql + hashing)
                    results["direct-write"].append(sql - writing)
                    cpu[name].append(used)
                else:
                    sn = len(transforms(sder))
                    results[name].append(verify_round(sder, inputs, router, sn)[0])
            print(
                f"round {r + 1} (load {load()}): "
                + ", ".join(f"{k} {v[-1] * 1000:.1f} ms/block" for k, v in results.items())
                + "; CPU "
                + ", ".join(f"{k} {v[-1] * 1000:.1f}" for k, v in cpu.items()),
                flush=True,
            )
        med = {k: statistics.median(v) for k, v in results.items()}
        print(f"\n{n} blocks x {args.rows} rows, {args.rounds} rounds, medians (s/block):")
        for k, v in med.items():
            print(f"  {k:13s} {v:.4f}")
        print(
            f"  verify-df / direct-df = {med['verify-df'] / med['direct-df']:.2f}x (target <= 1.3x)"
        )
        print(f"  inproc-df / direct-df = {med['inproc-df'] / med['direct-df']:.2f}x")
        print(f"  verify-df / direct+hash = {med['verify-df'] / med['direct+hash']:.2f}x")
        print(f"  verify-df / direct-write = {med['verify-df'] / med['direct-write']:.2f}x")
        ratios = [v / d for v, d in zip(results["verify-df"], results["direct-df"], strict=True)]
        print(
            "  verify-df / direct-df per round: "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + f" (median {statistics.median(ratios):.2f}x)"
        )
        # CPU time: the replay's two processes (node + worker) against the direct process.
        # On a loaded machine the wall ratio also measures scheduling; this one only the work.
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        print(
            f"  CPU per block: verify-df {cmed['verify-df'] * 1000:.2f} ms (node + worker), "
            f"direct-df {cmed['direct-df'] * 1000:.2f} ms; "
            f"ratio {cmed['verify-df'] / cmed['direct-df']:.2f}x"
        )
        if "verify-spark" in med:
            print(f"  verify-spark / verify-df = {med['verify-spark'] / med['verify-df']:.2f}x")
    finally:
        router.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
