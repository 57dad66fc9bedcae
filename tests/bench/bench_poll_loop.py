"""CPU per poll of the source follower, split by thread (main loop vs transfer loop thread).

In one process, as in the daemon: :class:`~node.app.follow.SourceFollower` runs on the main
loop and probes over :class:`~node.adapters.transfer.TransferAdapter` on a
:class:`~node.adapters.loop_thread.LoopThread`; ``--sources`` (default 1,000) sources whose
heads never change, polled every ``--interval`` seconds (default 10) from a minimal HTTP server
in another process (``ETag`` / ``304``, as ``odf-node serve-http`` answers). After one interval
(every source had its first poll), for ``--seconds`` (default 30): CPU seconds of each thread
(``/proc/self/task``) and the main loop's lag (a 10 ms sleep's overshoot, p50/p99/max). Run it
with ``--sources 0`` for the lag loop's own CPU, to subtract from the main thread's.

Usage: .venv/bin/python tests/bench/bench_poll_loop.py [--sources 1000] [--interval 10]
       [--seconds 30]   (re-executes itself under ``unshare -rn``)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SERVER = """
import sys
from aiohttp import web
head, port = sys.argv[1], int(sys.argv[2])
tag = '"' + head + '"'
async def ref(r):
    if r.headers.get("If-None-Match") == tag:
        return web.Response(status=304, headers={"ETag": tag})
    return web.Response(text=head, headers={"ETag": tag})
app = web.Application()
app.router.add_get("/{d}/refs/head", ref)
web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
"""


def thread_cpu() -> dict[str, tuple[str, float]]:
    """CPU seconds of each thread of this process, by thread id: (name, seconds)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        name = stat.split("(", 1)[1].rsplit(")", 1)[0]
        fields = stat.rsplit(")", 1)[1].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from coordinator.identity import generate_private_key
    from coordinator.multiformats import Multihash
    from node.adapters.loop_thread import LoopThread
    from node.adapters.transfer import TransferAdapter
    from node.app.follow import FollowSettings, SourceFollower, _Source
    from node.app.metrics import NodeMetrics

    head = Multihash.sha3_256(b"bench").to_multibase()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = subprocess.Popen([sys.executable, "-c", SERVER, head, str(port)])
    thread = LoopThread("odf-transfer")
    thread.start()
    adapter = TransferAdapter(cast(Any, None), lambda: None, loop_thread=thread)
    none = cast(Any, None)
    follower = SourceFollower(
        none,
        none,
        none,
        adapter,
        none,
        none,
        NodeMetrics(),
        none,
        lambda: 0,
        generate_private_key(b"\x02" * 32),
        none,
        settings=FollowSettings(poll_interval_s=args.interval, concurrency=32),
        rng=random.random,
    )
    task: asyncio.Future[None] | None = None
    try:
        await asyncio.sleep(2)  # the server starts
        now = time.monotonic()
        for i in range(args.sources):
            did = generate_private_key(i.to_bytes(4, "big") * 8).dataset_id()
            src = _Source(did, f"http://127.0.0.1:{port}/ds{i}", None)
            src.head, src.sequence = Multihash.from_multibase(head), 1
            follower._by_did[did] = src
            follower._schedule(src, now + args.interval * random.random())
        task = asyncio.ensure_future(follower.run())
        await asyncio.sleep(args.interval * 1.2)
        cpu0, polls0 = thread_cpu(), follower.polls
        lags: list[float] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append((time.perf_counter() - t - 0.01) * 1000)
        cpu1, polls = thread_cpu(), follower.polls - polls0
        lags.sort()
        threads = {}
        for tid, (name, sec) in cpu1.items():
            used = sec - cpu0.get(tid, (name, 0.0))[1]
            if used > 0.05:
                label = "main" if tid == str(os.getpid()) else f"{name}-{tid}"
                threads[label] = {
                    "cpu_s": round(used, 2),
                    "ms_per_poll": round(1000 * used / polls, 3) if polls else None,
                }
        return {
            "sources": args.sources,
            "interval_s": args.interval,
            "polls": polls,
            "threads": threads,
            "main_loop_lag_ms": {
                "p50": round(lags[len(lags) // 2], 2),
                "p99": round(lags[int(len(lags) * 0.99)], 2),
                "max": round(lags[-1], 2),
            },
            "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        }
    finally:
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # the poll loop ends with the bench
                pass
        await adapter.close()
        thread.stop()
        server.terminate()
        server.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sources", type=int, default=1000)
    p.add_argument("--interval", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=30.0)
    args = p.parse_args()
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
