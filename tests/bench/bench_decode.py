"""Benchmark: decoding hostile metadata blocks and Arrow schemas (amplification shapes).

A FlatBuffers vector may hold N offsets to one object; a decoder that follows them builds that
object N times. The decoders charge every object they build against the buffer's own size (see
``docs/resource-budget.md``, "Metadata blocks and schemas") and reject what exceeds it. This
script feeds the shapes of ``tests/hostile_flatbuffers.py`` at sizes up to the 16 MiB block cap
(``PullOptions.max_block_size``):

* ``block-flat``: ``SetInfo.keywords`` = n offsets to one string of half the block;
* ``block-nested``: ``temporal_tables`` = n offsets to one table whose ``primary_key`` holds n
  offsets to one string (n * n strings);
* ``block-dense``: honest, n distinct 2-byte keywords and no sharing (the largest legitimate
  decode of tiny objects, for comparison);
* ``schema-flat``, ``schema-nested``, ``schema-dense``: the same in a bare Arrow ``Schema``
  (``Schema.fields`` / ``Struct`` children sharing one ``Field``; honest distinct fields).

Each case runs in a fresh subprocess, which reads the bytes, resets its peak RSS to the current
one (``/proc/self/clear_refs``), decodes, and reports the time and the growth of its peak RSS
(``VmHWM``), compared with the buffer's size. Targets: every hostile case rejected in under 1 s
with extra peak RSS under 2x the buffer's size (plus 1 MiB, the allocator's granularity). The
honest shapes are reported for reference: their cost is that of the objects they really hold.

Usage: .venv/bin/python tests/bench/bench_decode.py [--sizes 65536,1048576,...] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

import hostile_flatbuffers as hf

MIB = 1 << 20
BLOCK_CAP = 16 * MIB  # node/transfer/pull.py PullOptions.max_block_size
DEFAULT_SIZES = (64 << 10, MIB, 4 * MIB, BLOCK_CAP)
TIMEOUT_S = 120.0
TARGET_S = 1.0
TARGET_RSS_RATIO = 2.0
RSS_SLACK = MIB  # the allocator's granularity (pymalloc arenas are 1 MiB)


# name -> (decoder, builder of a buffer of about ``size`` bytes, hostile?). The payload is split
# so that the buffer lands near ``size``.
SHAPES: dict[str, tuple[str, Callable[[int], bytes], bool]] = {
    "block-flat": ("block", lambda s: hf.flat_keywords_block(s // 8, s // 2), True),
    "block-nested": (
        "block",
        lambda s: hf.nested_temporal_tables_block(s // 8 - 64, s // 8 - 64),
        True,
    ),
    "block-dense": ("block", lambda s: hf.dense_keywords_block(s // 12 - 64, 2), False),
    "schema-flat": ("schema", lambda s: hf.flat_fields_schema(s // 8, s // 2), True),
    "schema-nested": (
        "schema",
        lambda s: hf.nested_struct_schema(s // 8 - 64, s // 8 - 64),
        True,
    ),
    "schema-dense": ("schema", lambda s: hf.dense_fields_schema(s // 64 - 8), False),
}


def _peak_rss() -> int:
    """This process's peak RSS in bytes: ``VmHWM``, else ``ru_maxrss``.

    ``ru_maxrss`` also keeps the peak of the process image replaced by ``exec`` (a fork of the
    parent, which holds every case's buffer), so it is only the fallback.
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(decoder: str, path: str) -> None:
    """Decode one buffer and print {result, seconds, rss_before, rss_after} (bytes) as JSON."""
    from coordinator.errors import DecodeError
    from coordinator.metadata import decode_block
    from coordinator.metadata.arrow_schema import decode_arrow_schema

    decode: Callable[[bytes], object] = decode_block if decoder == "block" else decode_arrow_schema
    data = Path(path).read_bytes()
    # Imports peak above what is resident now: hand freed heap back to the kernel and reset the
    # high-water mark to the current RSS (Linux >= 4.0), so that the peak after decoding
    # measures the decode alone (the parent fixes glibc's mmap threshold for the same reason:
    # large buffers are mapped and unmapped, never recycled from already-resident heap).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # the growth is then measured from the imports' peak: an underestimate
    before = _peak_rss()
    t0 = time.perf_counter()
    try:
        value = decode(data)
        result = "decoded"
    except DecodeError as e:
        value = None
        result = type(e).__name__
    seconds = time.perf_counter() - t0
    after = _peak_rss()
    del value
    print(json.dumps({"result": result, "seconds": seconds, "before": before, "after": after}))


@dataclass(frozen=True)
class Row:
    """One case's outcome."""

    shape: str
    hostile: bool
    size: int
    result: str
    seconds: float
    extra_rss: int | None  # None: the child timed out or crashed

    @property
    def ratio(self) -> float | None:
        """Extra peak RSS over the buffer's size."""
        return None if self.extra_rss is None else self.extra_rss / self.size

    @property
    def within_target(self) -> bool:
        """Under 1 s and 2x the size in extra RSS (plus the allocator's granularity)."""
        return (
            self.seconds <= TARGET_S
            and self.extra_rss is not None
            and self.extra_rss <= TARGET_RSS_RATIO * self.size + RSS_SLACK
        )


def run_case(shape: str, size: int) -> Row:
    """Build the case and decode it in a fresh interpreter."""
    decoder, build, hostile = SHAPES[shape]
    data = build(size)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.bin"
        path.write_bytes(data)
        del data
        cmd = [sys.executable, __file__, "--child", decoder, str(path)]
        # A fixed mmap threshold: large buffers are mapped and unmapped, so the peak RSS moves
        # with them instead of hiding in already-resident heap.
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}
        t0 = time.perf_counter()
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=env
            )
        except subprocess.TimeoutExpired:
            return Row(shape, hostile, size, f"timeout>{TIMEOUT_S:.0f}s", TIMEOUT_S, None)
        if out.returncode != 0:
            tail = (out.stderr.strip().splitlines() or ["?"])[-1]
            return Row(shape, hostile, size, f"crash: {tail[:40]}", time.perf_counter() - t0, None)
        size = path.stat().st_size
    report = json.loads(out.stdout.strip().splitlines()[-1])
    extra = int(report["after"]) - int(report["before"])
    return Row(shape, hostile, size, str(report["result"]), float(report["seconds"]), extra)


def print_row(row: Row, header: bool) -> None:
    """One line of the table."""
    if header:
        head = ("shape", "bytes", "result", "time", "extra RSS", "x size")
        print("{:14} {:>10} {:>13} {:>10} {:>10} {:>6}".format(*head))
    extra = "-" if row.extra_rss is None else f"{row.extra_rss / MIB:.1f} MiB"
    ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
    if not row.hostile:
        note = "  (honest, for reference)"
    else:
        note = "" if row.within_target else "  OVER TARGET"
    print(
        f"{row.shape:14} {row.size:>10,} {row.result:>13} {row.seconds * 1000:>8.1f}ms "
        f"{extra:>10} {ratio:>6}{note}",
        flush=True,
    )


def main() -> None:
    """Run every shape at every size and print the table (or JSON)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("DECODER", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return

    rows: list[Row] = []
    for shape in args.shapes.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            rows.append(run_case(shape, size))
            if not args.json:
                print_row(rows[-1], header=len(rows) == 1)
    if args.json:
        print(json.dumps([{**asdict(r), "within_target": r.within_target} for r in rows], indent=2))
        return
    over = sum(1 for r in rows if r.hostile and not r.within_target)
    print(
        f"targets (hostile shapes): <= {TARGET_S:.0f} s and extra peak RSS <= "
        f"{TARGET_RSS_RATIO:.0f}x the buffer (+{RSS_SLACK >> 20} MiB); {over} case(s) outside"
    )


if __name__ == "__main__":
    main()
