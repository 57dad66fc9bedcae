"""Benchmark: push ingest of hostile inputs at full size; time, peak extra RSS, outcome.

Acceptance points measured (issue 26, items 3 and 4):

* *1 GiB CSV / NDJSON / JSON inputs: peak extra RSS <= 256 MB, a typed error or success*. Each
  case is generated into a temporary directory and ingested by the real
  :func:`coordinator.ingest.ingest` (Append, into a fresh root dataset) in a **fresh child
  process**, which reports the seconds, the outcome (records or the error's type and message)
  and its peak RSS (``ru_maxrss``) minus its RSS just before the ingest (imports done):

  ============================  ===============================================================
  ``sparse``                    ``truncate -s SIZE``: all NUL bytes, no newline (CSV, NDJSON
                                and JSON read the same file)
  ``csv-line``                  one line of ``a`` x SIZE, no newline
  ``ndjson-line``               ``{"city": "`` then ``a`` x SIZE, no newline
  ``json-string``               ``[{"city": "<a x SIZE>"}]``: one gigantic string
  ``json-skipped``              ``{"x": "<\\" x SIZE/2>", "data": [{"city": "a"}]}``, subPath
                                ``data``: a gigantic value on the way to the array
  ``csv-rows``                  ``a,1,2020-01-01T00:00:00Z`` lines: many small rows (success)
  ``ndjson-rows``               ``{"city":"a","population":1}`` lines (success)
  ``json-rows``                 a JSON array of those objects (success)
  ============================  ===============================================================

* *20,000 columns ingest in time linear in the input*: one row of N STRING columns (CSV),
  N = 1,250 ... 20,000, each in a fresh child process; seconds and milliseconds per column.

* with ``--daemon``: the ``sparse`` CSV and the ``ndjson-rows`` file through the
  ``dataset.ingest`` RPC of a real daemon (``tests/daemon_harness.py``, inside a loopback-only
  namespace, IPFS off): the daemon's RSS before, its peak during (``VmHWM``, reset before
  each call) and its RSS 5 s after the answer.

Usage: .venv/bin/python tests/bench/bench_ingest_hostile.py [--size BYTES] [--cases a,b]
       [--columns 1250,2500,...] [--daemon] [--json]
(``make bench-ingest-hostile`` runs everything at 1 GiB.)
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SCHEMA = ("city STRING", "population BIGINT", "at TIMESTAMP")
_PIECE = 8 << 20


def _repeat(path: Path, head: bytes, unit: bytes, size: int, tail: bytes = b"") -> None:
    """Write ``head``, ``unit`` repeated to about ``size`` bytes, then ``tail``."""
    piece = unit * max(1, _PIECE // len(unit))
    with open(path, "wb") as f:
        f.write(head)
        written = 0
        while written + len(piece) <= size:
            f.write(piece)
            written += len(piece)
        f.write(unit * ((size - written) // len(unit)))
        f.write(tail)


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


_ROW = b'{"city":"a","population":1}'
GENERATORS: dict[str, tuple[str, Callable[[Path, int], None], str | None]] = {
    "csv-sparse": ("csv", _sparse, None),
    "ndjson-sparse": ("ndjson", _sparse, None),
    "json-sparse": ("json", _sparse, None),
    "csv-line": ("csv", lambda p, n: _repeat(p, b"", b"a", n), None),
    "ndjson-line": ("ndjson", lambda p, n: _repeat(p, b'{"city": "', b"a", n), None),
    "json-string": ("json", lambda p, n: _repeat(p, b'[{"city": "', b"a", n, b'"}]'), None),
    "json-skipped": (
        "json",
        lambda p, n: _repeat(p, b'{"x": "', b'\\"', n, b'", "data": [{"city": "a"}]}'),
        "data",
    ),
    "csv-rows": ("csv", lambda p, n: _repeat(p, b"", b"a,1,2020-01-01T00:00:00Z\n", n), None),
    "ndjson-rows": ("ndjson", lambda p, n: _repeat(p, b"", _ROW + b"\n", n), None),
    "json-rows": ("json", lambda p, n: _repeat(p, b"[", _ROW + b",", n, _ROW + b"]"), None),
}


def _read_step(fmt: str, schema: tuple[str, ...], sub_path: str | None) -> Any:
    from coordinator.metadata import model as m

    if fmt == "csv":
        return m.ReadStepCsv(ddl_schema=schema)
    if fmt == "ndjson":
        return m.ReadStepNdJson(ddl_schema=schema)
    return m.ReadStepJson(ddl_schema=schema, sub_path=sub_path)


def make_dataset(directory: Path, read: Any) -> Any:
    """A fresh root dataset with one Append push source reading ``read``."""
    from coordinator.identity import DatasetId
    from coordinator.metadata import model as m
    from coordinator.metadata.timestamp import Timestamp
    from coordinator.storage import Dataset

    ds = Dataset.create(directory)
    t0 = Timestamp.parse("2024-01-01T00:00:00Z")
    for ev in (
        m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"bench"), dataset_kind=m.DatasetKind.ROOT),
        m.AddPushSource(source_name="bench", read=read, merge=m.MergeStrategyAppend()),
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
    return ds


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Ingest ``spec["input"]`` into a fresh dataset; the report of this process."""
    from coordinator.errors import OdfNodeError
    from coordinator.ingest import ingest
    from coordinator.metadata.timestamp import Timestamp

    read = _read_step(spec["format"], tuple(spec["schema"]), spec.get("sub_path"))
    ds = make_dataset(Path(spec["dataset"]), read)
    t0 = Timestamp.parse("2024-01-01T00:00:00Z")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        res = ingest(ds, [Path(spec["input"])], clock=lambda: t0)
        outcome = f"ok: {res.num_records:,} records"
    except OdfNodeError as e:
        outcome = f"{type(e).__name__}: {str(e).split(': ', 1)[-1][:150]}"
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": seconds,
        "outcome": outcome,
        "rss_before_mib": before / 1024,
        "peak_extra_mib": (peak - before) / 1024,
    }


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter (its ``ru_maxrss`` is its own).

    The spec goes through a file: 20,000 column names exceed the size of one argument.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="spec-") as f:
        json.dump(spec, f)
        f.flush()
        out = subprocess.run(
            [sys.executable, __file__, "--child", f.name],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            timeout=3600,
        )
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def hostile_cases(names: list[str], size: int, work: Path) -> list[dict[str, Any]]:
    """Generate and ingest each case; one report each."""
    reports = []
    for name in names:
        fmt, generate, sub_path = GENERATORS[name]
        path = work / f"{name}.in"
        generate(path, size)
        report = run_child(
            {
                "format": fmt,
                "schema": SCHEMA,
                "sub_path": sub_path,
                "input": str(path),
                "dataset": str(work / f"ds-{name}"),
            }
        )
        report.update(case=name, input_bytes=path.stat().st_size)
        path.unlink()
        print(_row(report), flush=True)
        reports.append(report)
    return reports


def wide_row(path: Path, columns: int) -> None:
    """One CSV row of ``columns`` values."""
    path.write_text(",".join(f"v{i}" for i in range(columns)) + "\n")


def column_curve(counts: list[int], work: Path) -> list[dict[str, Any]]:
    """One row of N STRING columns, for each N; seconds and ms per column."""
    reports = []
    for n in counts:
        path = work / f"wide-{n}.csv"
        wide_row(path, n)
        report = run_child(
            {
                "format": "csv",
                "schema": [f"c{i} STRING" for i in range(n)],
                "input": str(path),
                "dataset": str(work / f"ds-wide-{n}"),
            }
        )
        report.update(case=f"{n:,} columns", input_bytes=path.stat().st_size)
        report["ms_per_column"] = report["seconds"] * 1000 / n
        print(_row(report) + f"  {report['ms_per_column']:.3f} ms/column", flush=True)
        reports.append(report)
    return reports


def _status_rss(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def _reset_hwm(pid: int) -> None:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (proc(5)).
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def daemon_cases(size: int, work: Path) -> list[dict[str, Any]]:
    """Ingest through the RPC of a real daemon: RSS before, peak during, 5 s after."""
    import daemon_harness as dh

    node = dh.NodeProcess(work / "node", "node", config={"ipfs": {"mode": "none"}})
    node.init()
    node.launch()
    reports = []
    try:
        node.wait_ready()
        assert node.proc is not None
        pid = node.proc.pid
        for name in ("csv-sparse", "ndjson-rows"):
            fmt, generate, _ = GENERATORS[name]
            path = work / f"{name}.in"
            generate(path, size)
            kind = {"csv": "Csv", "ndjson": "NdJson"}[fmt]
            alias = name.replace("-", "")
            schema = ", ".join(f'"{c}"' for c in SCHEMA)
            node.call(
                "dataset.create",
                snapshot_yaml=(
                    f"kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: {alias}\n"
                    f"  kind: Root\n  metadata:\n    - kind: AddPushSource\n"
                    f"      sourceName: default\n      read:\n        kind: {kind}\n"
                    f"        schema: [{schema}]\n      merge:\n        kind: Append\n"
                ),
            )
            time.sleep(2)
            _reset_hwm(pid)
            before = _status_rss(pid, "VmRSS")
            start = time.perf_counter()
            try:
                res = node.call("dataset.ingest", timeout=1800, ref=alias, files=[str(path)])
                outcome = f"ok: {res['records']:,} records"
            except Exception as e:  # the typed JSON-RPC error is the outcome
                outcome = f"{type(e).__name__}: {str(e)[:150]}"
            seconds = time.perf_counter() - start
            peak = _status_rss(pid, "VmHWM")
            time.sleep(5)
            after = _status_rss(pid, "VmRSS")
            path.unlink()
            report = {
                "case": f"daemon {name}",
                "input_bytes": size,
                "seconds": seconds,
                "outcome": outcome,
                "rss_before_mib": before,
                "peak_extra_mib": peak - before,
                "rss_peak_mib": peak,
                "rss_after_mib": after,
            }
            print(
                _row(report) + f"  RSS {before:.0f} -> peak {peak:.0f} -> {after:.0f} MiB after",
                flush=True,
            )
            reports.append(report)
    finally:
        node.stop()
    return reports


def _row(r: dict[str, Any]) -> str:
    return (
        f"{r['case']:<18} {r['input_bytes'] / (1 << 20):>8,.1f} MiB {r['seconds']:>7.1f} s "
        f"peak extra {r['peak_extra_mib']:>6.0f} MiB  {r['outcome'][:90]}"
    )


def main() -> None:
    """Parse arguments, run the cases, print the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", type=int, default=1 << 30, help="input size (default 1 GiB)")
    p.add_argument("--cases", default=",".join(GENERATORS), help="comma-separated case names")
    p.add_argument("--columns", default="1250,2500,5000,10000,20000")
    p.add_argument("--daemon", action="store_true", help="also ingest through a real daemon")
    p.add_argument("--json", action="store_true", help="print the reports as JSON at the end")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(Path(args.child).read_text()))))
        return
    if args.daemon and os.environ.get("ODF_BENCH_NETNS") != "1":
        # the daemon must run in a loopback-only namespace: re-execute inside one
        inner = " ".join(f"'{a}'" for a in [sys.executable, __file__, *sys.argv[1:]])
        os.execvp(
            "unshare",
            ["unshare", "-rn", "bash", "-c", f"ip link set lo up && ODF_BENCH_NETNS=1 {inner}"],
        )
    reports: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-ingest-hostile-") as d:
        work = Path(d)
        names = [c for c in args.cases.split(",") if c]
        if names:
            print(f"hostile inputs, {args.size:,} bytes each (cpus: {os.cpu_count()})")
            reports += hostile_cases(names, args.size, work)
        counts = [int(c) for c in args.columns.split(",") if c]
        if counts:
            print("one row of N STRING columns (CSV)")
            reports += column_curve(counts, work)
        if args.daemon:
            print("through dataset.ingest in a real daemon")
            reports += daemon_cases(args.size, work)
    if args.json:
        print(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()
