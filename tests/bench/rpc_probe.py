"""Times JSON-RPC calls to a daemon from a process of its own, as a CLI or a console would.

Every ``--every`` seconds, for ``--seconds``, one ``--method`` call (a new connection each time,
like the CLI); prints one line per call: ``<method> <milliseconds>``. The soak benchmark runs it
next to its load generator: timing calls from inside the load generator measured that process's
own scheduling (25 libp2p hosts and an HTTP server share its interpreter) as much as the node's.

Usage: python tests/bench/rpc_probe.py URL TOKEN --seconds 600 [--every 1] [--method node.status]
       [--wait-stdin]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from node.rpc.client import call_sync


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("token")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--method", action="append")
    p.add_argument("--wait-stdin", action="store_true", help="start when a line arrives on stdin")
    a = p.parse_args()
    if a.wait_stdin:
        sys.stdin.readline()
    methods = a.method or ["node.status"]
    end = time.monotonic() + a.seconds
    nxt = time.monotonic()
    i = 0
    while time.monotonic() < end:
        method = methods[i % len(methods)]
        i += 1
        t0 = time.perf_counter()
        call_sync(a.url, a.token, method, None, 60.0)
        print(method, round((time.perf_counter() - t0) * 1000, 2), flush=True)
        nxt += a.every
        time.sleep(max(0.0, nxt - time.monotonic()))


if __name__ == "__main__":
    main()
