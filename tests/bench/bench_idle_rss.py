"""Idle RSS of a real ``odf-node run``: the daemon and its libp2p process, median of N runs.

Each run: a fresh home (test config: random loopback ports, IPFS off), the daemon starts, serves
RPC, the console, HTTP transfer and gossip, sits idle ``--settle`` seconds, then VmRSS of the
daemon and of its libp2p child is read from ``/proc/<pid>/status``. Must run loopback-only:

    unshare -rn bash -c 'ip link set lo up && exec .venv/bin/python tests/bench/bench_idle_rss.py'

``--source DIR`` starts the daemon from another checkout (e.g. an exported older commit), with
the same interpreter, to compare before/after the same way.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--source", default=str(Path(__file__).resolve().parents[2]))
    p.add_argument("--settle", type=float, default=20.0, help="seconds idle before reading RSS")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    src = Path(args.source).resolve()
    sys.path[:0] = [str(src), str(src / "tests")]
    import daemon_harness as dh

    dh.ROOT = src  # the daemon runs with cwd=src, so that tree's packages are imported
    runs = []
    for _ in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="odf-bench-idle-"))
        node = dh.NodeProcess(work / "node", "node", config={"ipfs": {"mode": "none"}})
        try:
            node.init()
            node.launch()
            node.wait_ready()
            assert node.proc is not None
            time.sleep(args.settle)
            runs.append(dh.node_rss_mb(node.proc.pid))
        finally:
            node.stop()
            shutil.rmtree(work, ignore_errors=True)
    out = {
        k: {
            "median_mb": statistics.median(r.get(k, 0.0) for r in runs),
            "runs_mb": [r.get(k, 0.0) for r in runs],
        }
        for k in ("daemon", "libp2p", "total")
    }
    out["settle_s"] = args.settle
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
