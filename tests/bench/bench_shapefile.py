"""The EsriShapefile read step: throughput, memory and a bomb (docs/resource-budget.md).

1. A zipped point shapefile of ``N`` records (a text, an integer and a decimal field) read
   through :func:`coordinator.ingest.readers.read_batches`: records/s, decompressed MiB/s,
   peak RSS.
2. A bomb: a ~1 MiB zip whose ``.shp`` and ``.dbf`` decompress to 256 MiB, read with a
   64 MiB ``max_decompressed_bytes``: it must be refused once 64 MiB are out, with the peak
   RSS of the process not growing with it (the archive is streamed, not extracted).

Usage: ``python tests/bench/bench_shapefile.py [N]`` (default 200,000).
"""

from __future__ import annotations

import io
import resource
import struct
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import shapefile as pyshp

from coordinator.errors import DecompressBudgetExceeded
from coordinator.ingest.readers import read_batches
from coordinator.metadata import model as m


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _points(n: int) -> tuple[bytes, int]:
    files = {"shp": io.BytesIO(), "shx": io.BytesIO(), "dbf": io.BytesIO()}
    w = pyshp.Writer(**files, shapeType=pyshp.POINT)
    w.field("name", "C", size=16)
    w.field("population", "N", size=10, decimal=0)
    w.field("area", "N", size=12, decimal=3)
    for i in range(n):
        w.point(30.0 + i * 1e-6, 50.0 - i * 1e-6)
        w.record(f"place-{i}", i, i / 8)
    w.close()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for ext, f in files.items():
            z.writestr(f"points.{ext}", f.getvalue())
    return buf.getvalue(), len(files["shp"].getvalue()) + len(files["dbf"].getvalue())


def _bomb(records: int) -> bytes:
    """Point records at (0, 0) and blank one-field records: they compress about 200 to 1."""
    shp_len = 100 + records * 28
    header = struct.pack(">7i", 9994, 0, 0, 0, 0, 0, shp_len // 2) + struct.pack(
        "<2i4d4d", 1000, 1, 0, 0, 0, 0, 0, 0, 0, 0
    )
    dbf_header = struct.pack("<4BIHH20x", 3, 124, 1, 1, records, 32 + 32 + 1, 1 + 100)
    field = b"note".ljust(11, b"\0") + b"C" + b"\0" * 4 + bytes([100, 0]) + b"\0" * 14
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("bomb.shp", "w", force_zip64=True) as w:
            w.write(header)
            piece = b"".join(
                struct.pack(">2i", 1, 10) + struct.pack("<i2d", 1, 0.0, 0.0) for _ in range(4096)
            )
            for _ in range(records // 4096):
                w.write(piece)
        with z.open("bomb.dbf", "w", force_zip64=True) as w:
            w.write(dbf_header + field + b"\r")
            blank = b" " * (101 * 4096)
            for _ in range(records // 4096):
                w.write(blank)
    return buf.getvalue()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    step = m.ReadStepEsriShapefile(
        ddl_schema=("name STRING", "population BIGINT", "area DOUBLE", "geometry STRING")
    )
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        data, raw = _points(n)
        p = d / "points.zip"
        p.write_bytes(data)
        before = _peak_mib()
        t0 = time.perf_counter()
        rows = sum(b.num_rows for b in read_batches(step, p))
        seconds = time.perf_counter() - t0
        print(
            f"{rows:,} points, zip {len(data):,} B, .shp+.dbf {raw:,} B: {seconds:.2f} s, "
            f"{rows / seconds:,.0f} records/s, {raw / seconds / (1 << 20):.1f} MiB/s; "
            f"peak RSS {_peak_mib():.0f} MiB (before: {before:.0f} MiB)"
        )

        bomb = d / "bomb.zip"
        records = 2 << 20  # 56 MiB of .shp and 202 MiB of .dbf
        bomb.write_bytes(_bomb(records))
        budget = 64 << 20
        step = m.ReadStepEsriShapefile(ddl_schema=("note STRING",))
        before = _peak_mib()
        t0 = time.perf_counter()
        try:
            seen = sum(b.num_rows for b in read_batches(step, bomb, max_decompressed_bytes=budget))
            outcome = f"ACCEPTED (wrong), {seen:,} rows"
        except DecompressBudgetExceeded:
            outcome = "refused"
        seconds = time.perf_counter() - t0
        print(
            f"bomb: zip {bomb.stat().st_size:,} B -> {165 + records * 129:,} B, "
            f"budget {budget:,} B: {outcome} after {seconds:.2f} s; peak RSS {_peak_mib():.0f} MiB "
            f"(before: {before:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
