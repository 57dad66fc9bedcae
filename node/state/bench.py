"""Latency of the state DB's hot calls on a real file (WAL, synchronous=FULL).

Run: ``.venv/bin/python -m node.state.bench [DIR]`` (DIR: where the temporary DB goes, default
the system temp dir; it is deleted afterwards). Prints the median and p90 per call, measured
with 2,000 future-dated items already queued so ``claim`` searches a non-trivial queue.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from node.state.store import NodeState

BACKLOG = 2000
ROUNDS = 300


def _round(s: NodeState, i: int, lat: dict[str, list[float]]) -> None:
    """One enqueue -> claim -> complete cycle plus a head and an event, each timed."""
    did = f"did:odf:x{i}"
    t0 = time.perf_counter()
    s.enqueue("fetch", did, None, {"i": i})
    t1 = time.perf_counter()
    item = s.claim(time.time_ns())
    t2 = time.perf_counter()
    assert item is not None
    s.complete(item.id)
    t3 = time.perf_counter()
    s.record_accepted_head(did, 0, i, "f1620" + "a" * 64, "p", b"e" * 300)
    t4 = time.perf_counter()
    s.log_event("tick", did, {"i": i})
    t5 = time.perf_counter()
    lat["enqueue"].append(t1 - t0)
    lat["claim"].append(t2 - t1)
    lat["complete"].append(t3 - t2)
    lat["record_accepted_head"].append(t4 - t3)
    lat["log_event"].append(t5 - t4)


def run(directory: Path | None) -> dict[str, list[float]]:
    """Measure each call ``ROUNDS`` times; return seconds per call, by call name."""
    lat: dict[str, list[float]] = {
        k: [] for k in ("enqueue", "claim", "complete", "record_accepted_head", "log_event")
    }
    with (
        tempfile.TemporaryDirectory(dir=directory) as tmp,
        NodeState.open(Path(tmp) / "state.db", time.time_ns) as s,
    ):
        for i in range(BACKLOG):
            did, head = f"did:odf:bg{i % 50}", f"f1620{i:064x}"
            s.enqueue("verify", did, head, {"i": i}, not_before_ns=2**62)
        for i in range(ROUNDS):
            _round(s, i, lat)
    return lat


def main() -> None:
    """Print median and p90 per call."""
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    for name, values in run(directory).items():
        p90 = sorted(values)[int(len(values) * 0.9)]
        print(f"{name:22s} median {statistics.median(values) * 1e3:.3f} ms  p90 {p90 * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
