"""Benchmark: push-ingest a large CSV file; report throughput and the ingest's peak RSS.

Generates a CSV of about ``--size`` bytes (default 1 GiB) into a temporary directory (Arrow's
CSV writer, in 1M-row chunks, so generation itself needs little memory)::

    event_time (TIMESTAMP), id (BIGINT), city (STRING), value (DOUBLE), flag (BOOLEAN),
    note (STRING)

then ingests it into a fresh root dataset with a CSV push source in a **child process**, which
reports its own ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (peak RSS: the interpreter,
imports and the ingest), plus the RSS just before the ingest started.

``--order shuffled`` shuffles the event times within the file (forcing the external sort);
``--merge ledger`` / ``snapshot`` use those strategies with ``id`` as the primary key
(Snapshot holds the whole snapshot in memory by design: a file over ``--snapshot-bytes`` of
Arrow data, default ``push.MAX_SNAPSHOT_BYTES``, is refused; the generator writes at least
1M rows, about 80 MB, so pass a larger value to measure it). ``--merge upsert`` uses
UpsertStream on ``id`` (no op column: every row an upsert), which holds the whole file the
same way, up to ``--stream-bytes`` (default ``push.MAX_STREAM_BYTES``).

Usage: .venv/bin/python tests/bench/bench_ingest.py [--size BYTES] [--order sorted|shuffled]
       [--merge append|ledger|snapshot|upsert] [--block-bytes N] [--run-bytes N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))

SCHEMA = (
    "event_time TIMESTAMP",
    "id BIGINT",
    "city STRING",
    "value DOUBLE",
    "flag BOOLEAN",
    "note STRING",
)
_CHUNK_ROWS = 1_000_000
_CITIES = ["Vancouver", "Kyiv", "Seattle", "Odesa", "Lisbon", "Nairobi", "Osaka", "Lima"]


def generate_csv(path: Path, size: int, order: str, seed: int = 1) -> tuple[int, int]:
    """Write a CSV of about ``size`` bytes; returns (rows, bytes)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    start_ms = 1_577_836_800_000  # 2020-01-01
    rows = 0
    with open(path, "wb") as f:
        f.write(b"event_time,id,city,value,flag,note\n")
        while f.tell() < size:
            n = _CHUNK_ROWS
            ids = np.arange(rows, rows + n, dtype=np.int64)
            if order == "sorted":
                ts = start_ms + ids * 1000
            else:
                ts = start_ms + rng.integers(0, 10**9, n)
            notes = pa.array(rng.integers(0, 10**12, n)).cast(pa.string())
            table = pa.table(
                {
                    "event_time": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                    "id": ids,
                    "city": pa.array(_CITIES).take(pa.array(rng.integers(0, len(_CITIES), n))),
                    "value": rng.random(n) * 1000,
                    "flag": rng.random(n) < 0.5,
                    "note": pa.compute.binary_join_element_wise("note-", notes, ""),
                }
            )
            pacsv.write_csv(table, f, write_options=pacsv.WriteOptions(include_header=False))
            rows += n
        return rows, f.tell()


def child(
    directory: Path,
    merge: str,
    block_bytes: int,
    run_bytes: int,
    snapshot_bytes: int,
    stream_bytes: int,
) -> None:
    """Create the dataset, ingest ``input.csv`` and print a JSON report."""
    from coordinator.identity import DatasetId
    from coordinator.ingest import ingest
    from coordinator.metadata import model as m
    from coordinator.metadata.timestamp import Timestamp
    from coordinator.storage import Dataset

    strategy: m.MergeStrategy
    if merge == "append":
        strategy = m.MergeStrategyAppend()
    elif merge == "ledger":
        strategy = m.MergeStrategyLedger(primary_key=("id",))
    elif merge == "upsert":
        strategy = m.MergeStrategyUpsertStream(primary_key=("id",))
    else:
        strategy = m.MergeStrategySnapshot(primary_key=("id",))
    ds = Dataset.create(directory / "dataset")
    t0 = Timestamp.parse("2024-01-01T00:00:00Z")
    for ev in (
        m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"bench"), dataset_kind=m.DatasetKind.ROOT),
        m.AddPushSource(
            source_name="bench",
            read=m.ReadStepCsv(ddl_schema=SCHEMA, header=True),
            merge=strategy,
        ),
    ):
        st = ds.state()
        ds.append(
            m.MetadataBlock(
                system_time=t0,
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=ev,
            )
        )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    res = ingest(
        ds,
        [directory / "input.csv"],
        clock=lambda: t0,
        block_bytes=block_bytes,
        run_bytes=run_bytes,
        snapshot_bytes=snapshot_bytes,
        stream_bytes=stream_bytes,
    )
    elapsed = time.perf_counter() - start
    (s,) = res.slices
    print(
        json.dumps(
            {
                "seconds": elapsed,
                "records": res.num_records,
                "parquet_bytes": s.size,
                "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "rss_before_ingest_kib": rss_before,
                "logical_hash": s.logical_hash.to_multibase(),
            }
        )
    )


def main() -> None:
    """Parse arguments, generate the input, run the child, print the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", type=int, default=1 << 30, help="CSV size in bytes (default 1 GiB)")
    p.add_argument("--order", choices=("sorted", "shuffled"), default="sorted")
    p.add_argument("--merge", choices=("append", "ledger", "snapshot", "upsert"), default="append")
    p.add_argument("--block-bytes", type=int, default=4 << 20)
    p.add_argument("--run-bytes", type=int, default=32 << 20)
    p.add_argument(
        "--snapshot-bytes",
        type=int,
        default=40 << 20,
        help="largest snapshot a Snapshot merge takes (push.MAX_SNAPSHOT_BYTES)",
    )
    p.add_argument(
        "--stream-bytes",
        type=int,
        default=40 << 20,
        help="largest input an UpsertStream merge takes (push.MAX_STREAM_BYTES)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--generate", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        child(
            args.child,
            args.merge,
            args.block_bytes,
            args.run_bytes,
            args.snapshot_bytes,
            args.stream_bytes,
        )
        return
    if args.generate is not None:
        print(json.dumps(generate_csv(args.generate, args.size, args.order)))
        return
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as d:
        directory = Path(d)
        # Both steps run in child processes: a forked child starts with its parent's RSS as its
        # ru_maxrss, so the parent must stay small.
        t = time.perf_counter()
        gen = subprocess.run(
            [
                sys.executable,
                __file__,
                "--generate",
                str(directory / "input.csv"),
                "--size",
                str(args.size),
                "--order",
                args.order,
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        rows, size = json.loads(gen.stdout)
        gen_seconds = time.perf_counter() - t
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(directory),
                "--merge",
                args.merge,
                "--block-bytes",
                str(args.block_bytes),
                "--run-bytes",
                str(args.run_bytes),
                "--snapshot-bytes",
                str(args.snapshot_bytes),
                "--stream-bytes",
                str(args.stream_bytes),
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        report = json.loads(out.stdout.strip().splitlines()[-1])
    mib = size / (1 << 20)
    report.update(
        {
            "input_bytes": size,
            "input_rows": rows,
            "order": args.order,
            "merge": args.merge,
            "generate_seconds": gen_seconds,
            "mib_per_s": mib / report["seconds"],
            "rows_per_s": report["records"] / report["seconds"],
            "cpus": os.cpu_count(),
        }
    )
    if args.json:
        print(json.dumps(report, indent=2))
        return
    parquet_mib = report["parquet_bytes"] / (1 << 20)
    print(
        f"input   : {mib:,.0f} MiB CSV, {rows:,} rows ({args.order} event time), "
        f"merge={args.merge}\n"
        f"ingest  : {report['seconds']:.1f} s -> {report['mib_per_s']:.1f} MiB/s, "
        f"{report['rows_per_s']:,.0f} rows/s; parquet {parquet_mib:,.0f} MiB\n"
        f"peak RSS: {report['peak_rss_kib'] / 1024:,.0f} MiB "
        f"(before ingest {report['rss_before_ingest_kib'] / 1024:,.0f} MiB)"
    )


if __name__ == "__main__":
    main()
