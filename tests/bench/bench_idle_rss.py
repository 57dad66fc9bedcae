"""Idle RSS of a real ``odf-node run``: the daemon and its libp2p process, median of N runs.

Each run: a fresh home (test config: random loopback ports, IPFS off), the daemon starts, serves
RPC, the console, HTTP transfer and gossip, sits idle ``--settle`` seconds, then VmRSS of the
daemon and of its libp2p child is read from ``/proc/<pid>/status``. With ``--ipfs`` the daemon
has its embedded IPFS node on, and that child's VmRSS is reported as ``ipfs`` (not part of
``total``, which stays the node's own Python processes) and ``whole`` is all three, what the
machine gives a node with everything on. The node starts on first use (``[ipfs] start =
"lazy"``, the default), so an idle node has none (``ipfs`` 0, ``ipfs_started`` false);
``--ipfs-start eager`` measures it running. Must run loopback-only:

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


def _ipfs_rss_mb(home: Path) -> float | None:
    """VmRSS (MiB) of the embedded IPFS node, found by the PID file the daemon writes next to
    its repo (``node/daemon/ipfs_process.py``; js-ipfs renames its process, so the command line
    cannot tell); None when it has not started."""
    pid_file = home / "ipfs.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text().strip())
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--source", default=str(Path(__file__).resolve().parents[2]))
    p.add_argument("--settle", type=float, default=20.0, help="seconds idle before reading RSS")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ipfs", action="store_true", help="run and measure the embedded IPFS node")
    p.add_argument(
        "--ipfs-start",
        choices=("lazy", "eager"),
        default=None,
        help="[ipfs] start (default: the node's, lazy); an older --source knows no such key",
    )
    args = p.parse_args()
    src = Path(args.source).resolve()
    sys.path[:0] = [str(src), str(src / "tests")]
    import daemon_harness as dh

    dh.ROOT = src  # the daemon runs with cwd=src, so that tree's packages are imported
    runs = []
    started: list[bool] = []
    for _ in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="odf-bench-idle-"))
        ipfs: dict[str, str] = {"mode": "embedded" if args.ipfs else "none"}
        if args.ipfs_start:
            ipfs["start"] = args.ipfs_start
        node = dh.NodeProcess(work / "node", "node", config={"ipfs": ipfs})
        try:
            node.init()
            node.launch()
            node.wait_ready()
            assert node.proc is not None
            time.sleep(args.settle)
            rss = dh.node_rss_mb(node.proc.pid)
            if args.ipfs:
                ipfs_mb = _ipfs_rss_mb(node.home)
                started.append(ipfs_mb is not None)
                rss["ipfs"] = ipfs_mb or 0.0
                rss["whole"] = round(rss["total"] + rss["ipfs"], 1)
            runs.append(rss)
        finally:
            node.stop()
            shutil.rmtree(work, ignore_errors=True)
    out = {
        k: {
            "median_mb": round(statistics.median(r.get(k, 0.0) for r in runs), 2),
            "runs_mb": [r.get(k, 0.0) for r in runs],
        }
        for k in ("daemon", "libp2p", "total", *(("ipfs", "whole") if args.ipfs else ()))
    }
    out["settle_s"] = args.settle
    if args.ipfs:
        out["ipfs_started"] = all(started)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
