"""Benchmark: replay verification of an N-block derivative history vs the same SQL run directly.

Builds a root dataset with N pushes and a derivative (two-step map/filter) transformed N times
through a spawned engine worker (one ExecuteTransform per push), then measures, each over
``--rounds`` full passes (median reported, seconds per block):

* **cold start**: the first request of a fresh ``EngineClient`` (JVM + SparkSession + request);
* **verify, spawned worker**: ``replay_transforms`` over the N blocks with the warm worker
  process, as the node runs it;
* **verify, same session**: the same replay through the real worker code (``EngineServicer``
  behind gRPC on a unix socket) hosted in this process, over the SparkSession that the direct
  baseline uses;
* **direct**: the same SQL, same data, same SparkSession, doing what it takes to produce the
  same output file: read the input slice (offset filter, one partition sorted by offset, as
  the reference requires for the row order), register the views, run the queries, add the
  system columns (offset, op, system_time), write one parquet file and move it into place.
  No sandbox, protocol, checkpoint, hashing or comparison. Each direct output's logical hash
  is checked against the published one (outside the timing), so both sides produce the same
  data.

The headline ratio is *verify, same session* / *direct*. Every round runs all three passes
(spawned worker, same session, direct), so they see the same load, and the order rotates from
round to round so no pass is always first (the load average is printed per round). Before
timing, the in-process session replays and runs directly the first ``--warmup`` blocks
(untimed, both ways): the spawned worker's JVM has just run the N-block build, and without a
comparable warm-up the first timed pass in the fresh session measures JIT compilation of the
Spark write path rather than the engine (round 1 was the outlier of every earlier run).

Usage: ``python tests/bench/bench_verify.py [--blocks 100] [--rows 1000] [--rounds 3]
[--warmup 20] [--master local[2]]`` (run it inside ``unshare -rn`` with lo up, like the test
suite).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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
from coordinator.multiformats import Multihash  # noqa: E402
from coordinator.storage.dataset import Dataset  # noqa: E402
from coordinator.transform.plan import OutputPaths, clear_outputs, plan_replay  # noqa: E402
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

QUERIES = [
    ("big", "SELECT * FROM cities WHERE population > 100"),
    (None, "SELECT op, event_time, upper(city) AS city, population * 2 AS pop2 FROM big"),
]


def csv(block: int, rows: int) -> str:
    """One push of ``rows`` rows (the ``block``-th)."""
    lines = ["event_time,city,population"]
    for i in range(rows):
        day = 1 + (block * rows + i) // 86400
        sec = (block * rows + i) % 86400
        lines.append(
            f"2020-01-{min(day, 28):02d}T{sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}Z,"
            f"c{i % 97},{(i * 37) % 1000}"
        )
    return "\n".join(lines) + "\n"


def load() -> str:
    """The 1/5/15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def direct_run(session: Any, req: Any, target: Path) -> None:
    """The block's SQL straight in Spark, producing the same output file as the engine."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.window import Window

    for inp in req.query_inputs:
        df = session.read.parquet(*[str(p) for p in inp.data_paths])
        iv = inp.offset_interval
        off = F.col(inp.vocab.offset_column)
        df = df.filter((off >= iv.start) & (off <= iv.end)).coalesce(1).orderBy(off)
        df.createOrReplaceTempView(inp.query_alias)
    for alias, q in QUERIES:
        session.sql(q).createOrReplaceTempView(alias or "__output__")
    v = req.vocab
    out = session.sql("SELECT * FROM __output__")
    cols = [c for c in out.columns if c != v.operation_type_column]
    out = out.withColumn(
        v.offset_column,
        F.row_number().over(Window.orderBy(F.monotonically_increasing_id())).cast("bigint")
        + F.lit(req.next_offset - 1).cast("bigint"),
    ).withColumn(v.system_time_column, F.lit(req.system_time.to_datetime()).cast("timestamp"))
    out = out.select(v.offset_column, v.operation_type_column, v.system_time_column, *cols)
    tmp = target.parent / ".tmp-direct"
    out.write.mode("overwrite").parquet(str(tmp))
    (part,) = tmp.glob("*.snappy.parquet")
    os.replace(part, target)
    shutil.rmtree(tmp)


def verify_round(der: Dataset, inputs: Any, client: Any, n_blocks: int) -> float:
    """One full replay; seconds per block."""
    t = time.perf_counter()
    report = replay_transforms(der, inputs, client)
    assert report.ok and report.blocks_replayed == n_blocks, report.to_dict()
    return (time.perf_counter() - t) / n_blocks


def direct_round(session: Any, der: Dataset, inputs: Any, work: Path) -> float:
    """The same SQL for every block, directly; seconds per block (hash checks untimed)."""
    chain = reversed(list(der.iter_blocks()))
    blocks = [b for _, b in chain if isinstance(b.event, m.ExecuteTransform)]
    plans = []
    for i, b in enumerate(blocks):
        paths = OutputPaths.under(work / str(i))
        clear_outputs(paths)
        plans.append((b, plan_replay(der, inputs, b, paths=paths)))
    spent = 0.0
    for b, plan in plans:
        target = plan.request.new_data_path
        t = time.perf_counter()
        direct_run(session, plan.request, target)
        spent += time.perf_counter() - t
        assert isinstance(b.event, m.ExecuteTransform) and b.event.new_data is not None
        published = b.event.new_data.logical_hash
        assert Multihash.from_multibase(logical_hash(target)) == published, "outputs differ"
    shutil.rmtree(work, ignore_errors=True)
    return spent / len(plans)


def warm_up(
    client: Any, session: Any, der: Dataset, inputs: Any, work: Path, n_blocks: int
) -> None:
    """Run the first blocks both ways once (untimed): JIT and first-use costs of a new session."""
    from coordinator.transform.model import TransformSuccess

    chain = reversed(list(der.iter_blocks()))
    blocks = [b for _, b in chain if isinstance(b.event, m.ExecuteTransform)][:n_blocks]
    for i, b in enumerate(blocks):
        paths = OutputPaths.under(work / str(i))
        clear_outputs(paths)
        req = plan_replay(der, inputs, b, paths=paths).request
        assert isinstance(client.execute_transform(req), TransformSuccess)
        direct_run(session, req, work / f"direct-{i}.parquet")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    """Run the benchmark and print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=100)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20, help="untimed blocks, both ways")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    print(f"load at start: {load()}")
    from engine.spark_engine import (
        SESSION_SQL_CONF,
        SPARK_DEFAULTS,
        SparkEngine,
        create_spark_session,
    )
    from engine.worker import EngineServicer, build_server

    # This process's own JVM (same-session passes) is launched first, before any gRPC channel
    # exists: launching it (a fork) while the channel to the spawned worker was open failed
    # once with "Java gateway process exited" after a gRPC epoll error. It idles until the
    # spawned worker's cold start and the history build are done.
    spark = create_spark_session(args.master)
    try:
        clock = StepClock()
        root = make_root(tmp, "root")
        der = make_derivative(tmp, "der", [(root, "cities")], QUERIES)
        inputs = inputs_of(root)

        client = EngineClient(master=args.master, idle_timeout=0)
        push_csv(root, tmp / "in", csv(0, args.rows), clock)
        t = time.perf_counter()
        run_transform(der, inputs, client, clock=clock)
        cold = time.perf_counter() - t
        print(f"cold start (worker start + first transform): {cold:.1f} s (master {args.master})")
        t = time.perf_counter()
        for b in range(1, args.blocks):
            push_csv(root, tmp / "in", csv(b, args.rows), clock)
            run_transform(der, inputs, client, clock=clock)
        n = sum(1 for _, b in der.iter_blocks() if isinstance(b.event, m.ExecuteTransform))
        build = (time.perf_counter() - t) / max(1, n - 1)
        print(f"history: {n} blocks, built at {build:.3f} s/block")

        # Same SparkSession for both sides: the worker's servicer is hosted in this process.
        # The spawned worker stays up (idle while the others run) so every round measures
        # all three passes under the same load.
        sock = tmp / "engine.sock"
        server = build_server(EngineServicer(SparkEngine(spark)), f"unix:{sock}")
        server.start()
        local = EngineClient(address=f"unix:{sock}", spawn=False, idle_timeout=0)
        session = spark.newSession()
        for key in SESSION_SQL_CONF:
            session.conf.set(key, SPARK_DEFAULTS[key])
        warm_up(local, session, der, inputs, tmp / "warm", args.warmup)
        passes = {
            "spawned": lambda: verify_round(der, inputs, client, n),
            "verify": lambda: verify_round(der, inputs, local, n),
            "direct": lambda: direct_round(session, der, inputs, tmp / "direct"),
        }
        times: dict[str, list[float]] = {k: [] for k in passes}
        names = list(passes)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for k in order:
                times[k].append(passes[k]())
            print(
                f"  round {r + 1} (order {', '.join(order)}): spawned worker "
                f"{times['spawned'][-1]:.3f}, same session {times['verify'][-1]:.3f}, "
                f"direct {times['direct'][-1]:.3f} s/block; ratio same session/direct "
                f"{times['verify'][-1] / times['direct'][-1]:.2f}; load {load()}"
            )
        client.close()
        local.close()
        server.stop(grace=1).wait()
        spawned, verify_t, direct_t = times["spawned"], times["verify"], times["direct"]
        v_sp, v_ss, d = (statistics.median(x) for x in (spawned, verify_t, direct_t))
        print(f"verify, spawned worker: median {v_sp:.3f} s/block over {args.rounds} rounds")
        print(f"verify, same session:   median {v_ss:.3f} s/block over {args.rounds} rounds")
        print(f"direct, same session:   median {d:.3f} s/block over {args.rounds} rounds")
        print(f"ratio verify/direct (same session): {v_ss / d:.2f} (target <= 1.3)")
        print(f"ratio verify (spawned worker)/direct: {v_sp / d:.2f}")
        per_round = [v / dd for v, dd in zip(verify_t, direct_t, strict=True)]
        print(
            "per-round ratios verify/direct (same session): "
            + " ".join(f"{x:.2f}" for x in per_round)
            + f"; median {statistics.median(per_round):.2f}"
        )
        print(f"load at end: {load()}")
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
