"""Benchmark: replay verification of an N-block derivative history with the warm engine worker.

Builds a root dataset with N pushes, a derivative (two-step map/filter) transformed N times
through the engine worker (one ExecuteTransform per push), then measures:

* worker cold start: first request of a fresh ``EngineClient`` (JVM + SparkSession + request);
* verify: ``replay_transforms`` over the N blocks with the warm worker (s/block);
* direct: the same SQL over the same input slices run directly in a warm in-process Spark
  session (read + filter + temp views + write one parquet file, no protocol, no hashing);
* ratio verify / direct (target <= 1.3).

Usage: ``python tests/bench/bench_verify.py [--blocks 100] [--rows 1000] [--master local[2]]``
(run it inside ``unshare -rn`` with lo up to mirror the test suite's network namespace).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.metadata import model as m  # noqa: E402
from coordinator.transform.plan import OutputPaths, clear_outputs, plan_replay  # noqa: E402
from coordinator.transform.run import run_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    Clock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from coordinator.transform.verify import replay_transforms  # noqa: E402
from node.engine_client import EngineClient  # noqa: E402

QUERIES = [
    ("big", "SELECT * FROM cities WHERE population > 100"),
    (None, "SELECT op, event_time, upper(city) AS city, population * 2 AS pop2 FROM big"),
]


def csv(block: int, rows: int) -> str:
    lines = ["event_time,city,population"]
    for i in range(rows):
        day = 1 + (block * rows + i) // 86400
        sec = (block * rows + i) % 86400
        lines.append(
            f"2020-01-{min(day, 28):02d}T{sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}Z,"
            f"c{i % 97},{(i * 37) % 1000}"
        )
    return "\n".join(lines) + "\n"


def direct_run(spark: object, plan_req: object, out: Path) -> float:
    """The same SQL straight in Spark: read, filter, views, write; returns seconds."""
    from pyspark.sql import functions as F  # noqa: N812

    t = time.perf_counter()
    s = spark.newSession()  # type: ignore[attr-defined]
    for inp in plan_req.query_inputs:  # type: ignore[attr-defined]
        df = s.read.parquet(*[str(p) for p in inp.data_paths])
        iv = inp.offset_interval
        df = df.filter((F.col("offset") >= iv.start) & (F.col("offset") <= iv.end))
        df.coalesce(1).orderBy("offset").createOrReplaceTempView(inp.query_alias)
    for alias, q in QUERIES:
        s.sql(q).createOrReplaceTempView(alias or "__output__")
    s.sql("SELECT * FROM __output__").write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=100)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--verify-master",
        default=None,
        help="replay on another master (e.g. local-cluster[2,1,1024]) than the history was built",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        clock = Clock()
        root = make_root(tmp, "root")
        der = make_derivative(tmp, "der", [(root, "cities")], QUERIES)
        inputs = inputs_of(root)

        client = EngineClient(master=args.master, idle_timeout=0)
        push_csv(root, tmp / "in", csv(0, args.rows), clock)
        t = time.perf_counter()
        run_transform(der, inputs, client, clock=clock)
        cold = time.perf_counter() - t
        print(f"worker cold start + first transform: {cold:.1f} s (master {args.master})")

        t = time.perf_counter()
        for b in range(1, args.blocks):
            push_csv(root, tmp / "in", csv(b, args.rows), clock)
            run_transform(der, inputs, client, clock=clock)
        build = time.perf_counter() - t
        n_et = sum(1 for _, b in der.iter_blocks() if isinstance(b.event, m.ExecuteTransform))
        print(
            f"history: {n_et} ExecuteTransform blocks, "
            f"transforms {build / max(1, n_et - 1):.3f} s/block"
        )

        times: list[float] = []
        last = [time.perf_counter()]

        def on_block(done: int, total: int, _h: object) -> None:
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

        if args.verify_master:
            client.close()
            client = EngineClient(master=args.verify_master, idle_timeout=0)
            t = time.perf_counter()
            client.start()
            print(f"verify worker ({args.verify_master}) start: {time.perf_counter() - t:.1f} s")
            last[0] = time.perf_counter()
        t = time.perf_counter()
        report = replay_transforms(der, inputs, client, listener=on_block)
        verify = time.perf_counter() - t
        assert report.ok, report.to_dict()
        per_block = verify / n_et
        print(
            f"verify (replay, warm worker, {args.verify_master or args.master}): "
            f"{verify:.1f} s total, {per_block:.3f} s/block "
            f"(median {statistics.median(times):.3f})"
        )
        client.close()

        # Direct baseline in a warm in-process session with the same settings.
        from engine.spark_engine import create_spark_session

        spark = create_spark_session(args.master)
        blocks = [
            (h, b)
            for h, b in reversed(list(der.iter_blocks()))
            if isinstance(b.event, m.ExecuteTransform)
        ]
        direct_times = []
        for i, (_h, b) in enumerate(blocks):
            paths = OutputPaths.under(tmp / "direct" / str(i))
            clear_outputs(paths)
            plan = plan_replay(der, inputs, b, paths=paths)
            direct_times.append(direct_run(spark, plan.request, tmp / "direct" / f"o{i}"))
        warm = direct_times[1:] or direct_times
        direct = statistics.mean(warm)
        print(
            f"direct SQL in Spark: {direct:.3f} s/block (median {statistics.median(warm):.3f}); "
            f"ratio verify/direct = {per_block / direct:.2f}"
        )
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
