"""A decompression bomb against a polling source's Decompress step (docs/resource-budget.md).

Builds a gzip file and a zip file of about 2 MiB that decompress to 2 GiB, and runs each
through :func:`coordinator.ingest.prepare.prepare` with the default budget
(``ingest.max_decompressed_bytes``, 1 GiB): both must be refused once 1 GiB is out, with no
growth of the process's peak memory (the output is copied in 1 MiB pieces).

Usage: ``python tests/bench/bench_decompress_bomb.py`` (writes up to 1 GiB to a temporary
directory).
"""

from __future__ import annotations

import gzip
import io
import resource
import tempfile
import time
import zipfile
from pathlib import Path

from coordinator.errors import DecompressBudgetExceeded
from coordinator.ingest.prepare import DEFAULT_MAX_DECOMPRESSED_BYTES, prepare
from coordinator.metadata import model as m


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    zeros = b"0" * (64 << 20)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        gz = d / "bomb.gz"
        gz.write_bytes(gzip.compress(zeros, 9) * 32)  # 32 members: 2 GiB
        buf = io.BytesIO()
        with (
            zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z,
            z.open("a", "w", force_zip64=True) as w,
        ):
            for _ in range(32):
                w.write(zeros)
        zp = d / "bomb.zip"
        zp.write_bytes(buf.getvalue())
        del zeros, buf
        before = _peak_mib()
        for path, fmt in ((gz, m.CompressionFormat.GZIP), (zp, m.CompressionFormat.ZIP)):
            work = d / f"work-{fmt.name}"
            work.mkdir()
            t0 = time.perf_counter()
            try:
                prepare((m.PrepStepDecompress(format=fmt),), path, work)
                outcome = "ACCEPTED (wrong)"
            except DecompressBudgetExceeded:
                outcome = "refused"
            seconds = time.perf_counter() - t0
            written = sum(p.stat().st_size for p in work.iterdir())
            print(
                f"{fmt.name}: {path.stat().st_size:,} B -> 2 GiB, budget "
                f"{DEFAULT_MAX_DECOMPRESSED_BYTES:,} B: {outcome} after {seconds:.2f} s, "
                f"{written:,} B written"
            )
        print(f"peak RSS {_peak_mib():.0f} MiB (before the two runs: {before:.0f} MiB)")


if __name__ == "__main__":
    main()
