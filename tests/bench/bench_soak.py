"""Soak benchmark of one daemon: many subscriptions and a steady announcement load.

Inside a private loopback-only namespace (the script re-executes itself under ``unshare -rn``):

1. builds ``--datasets`` (default 1,000) small root datasets in a publisher repository served
   over HTTP with the Simple Transfer Protocol (``node.transfer.server``);
2. starts one real daemon (``odf-node run``; IPFS off, gossip on) and measures its **idle RSS**
   (no engine worker running, nothing subscribed);
3. subscribes it to every dataset over JSON-RPC;
4. for ``--minutes`` (default 10) appends a block to a dataset and gossips its signed head
   announcement, round-robin, at ``--rate`` (default 50/s) spread over ``--publishers`` (25) libp2p
   hosts (as a real network spreads load over peers); the daemon pulls each head over HTTP,
   checks it and attests it. Like owner nodes, the publishers answer the daemon's anti-entropy
   requests with each dataset's latest signed announcement (gossip may lose a message; the
   protocol repairs the head, and the benchmark measures that it does);
5. times a ``node.status`` call every second from a separate process (``rpc_probe.py``, as a
   CLI would call it; ``rpc.ping`` likewise, for comparison) and samples RSS, CPU
   (``/proc/<pid>/stat``) and queue depths every 5 s. The load generator itself (this process:
   the publishers and the owners' HTTP server, on other machines in a real network) runs at
   nice 10 once the daemon and the probes have started, so its own CPU use does not stand in
   front of the daemon's on a 2-core machine;
6. after the load stops, waits up to ``--settle-minutes`` (5) until every subscription's accepted
   head is its owner's head.

Reported: RPC ``node.status`` p50/p99, event-loop lag p99 (from the daemon's
``odf_event_loop_lag_seconds`` histogram, as the upper bound of the bucket holding the 99th
percentile, over the load phase only), announcements offered vs the daemon's outcomes by reason
(each offered announcement must be accepted, or ignored/rejected with a reason), time until every
subscription was at head, verification throughput (verifications finished per second) and RSS
of each of the node's processes (daemon, libp2p process) and of the whole: median, max, final
and the slope (least squares, MB/min) over each third of the load phase, so that a plateau
(last third flat) is told from a rise; the daemon's native allocators (``node.debug_memory``:
glibc's heap, SQLite, Arrow's pool) are sampled every minute. With ``--trace`` the daemon and its
libp2p process run ``tracemalloc`` (``ODF_NODE_TRACEMALLOC``): baselines at ``--trace-baseline``
minutes into the load, and the allocation sites that grew most since are reported at its end
(docs/operations.md, "Hunting a leak").

Usage: .venv/bin/python tests/bench/bench_soak.py [--datasets 1000] [--rate 50] [--minutes 10]
                                                  [--trace [--trace-baseline 2]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
"""


LOAD_GENERATOR_NICE = 10


def slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (units per minute) of ``(seconds, value)`` points."""
    from bench_longrun import slope_per_hour

    per_h = slope_per_hour(points)
    return None if per_h is None else round(per_h / 60, 2)


def rss_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per process (and ``total``): median, max, final RSS (MB) and the slope (MB/min) over each
    third of the samples: a plateau has a last third near 0."""
    out: dict[str, Any] = {}
    for name in samples[0]["rss_mb_by_process"]:
        series = [(s["t"], s["rss_mb_by_process"].get(name, 0.0)) for s in samples]
        n = max(1, len(series) // 3)
        thirds = [series[:n], series[n : 2 * n], series[2 * n :]]
        out[name] = {
            "median": round(statistics.median(v for _, v in series), 1),
            "max": round(max(v for _, v in series), 1),
            "final": round(series[-1][1], 1),
            "slope_mb_per_min_by_third": [slope_per_min(t) for t in thirds],
        }
    return out


def cpu_s(pid: int) -> float:
    """CPU seconds of the daemon and its libp2p process together."""
    from daemon_harness import node_cpu_s

    return node_cpu_s(pid)


def prometheus(url: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def lag_p99_bound(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Upper bound (s) of the histogram bucket holding the 99th percentile of the lag samples."""
    prefix = "odf_event_loop_lag_seconds_bucket{le="
    buckets = sorted(
        (float(k[len(prefix) + 1 : -2]), after[k] - before.get(k, 0.0))
        for k in after
        if k.startswith(prefix)
    )
    total = buckets[-1][1] if buckets else 0.0
    for le, count in buckets:
        if total and count >= 0.99 * total:
            return le
    return None


def gc_pauses(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Per generation: collections, and the upper bound (s) of the bucket holding the slowest."""
    out: dict[str, Any] = {}
    for gen in ("0", "1", "2"):
        prefix = f'odf_gc_pause_seconds_bucket{{generation="{gen}",le="'
        buckets = sorted(
            (float(k[len(prefix) : -2]), after[k] - before.get(k, 0.0))
            for k in after
            if k.startswith(prefix)
        )
        total = buckets[-1][1] if buckets else 0.0
        slowest = next((le for le, n in buckets if total and n >= total), None)
        out[gen] = {"collections": int(total), "slowest_le_s": slowest}
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench_longrun import libp2p_growth, signal_libp2p
    from daemon_harness import NodeProcess, node_rss_mb

    from coordinator.identity import load_private_key
    from coordinator.metadata import model as m
    from coordinator.metadata.snapshot import snapshots_from_yaml
    from coordinator.metadata.timestamp import Timestamp
    from coordinator.storage.repository import DatasetRepository
    from node.transfer.server import start_server
    from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
    from p2p.transport import HEADS_PROTOCOL, dataset_topic
    from p2p.wire import (
        FetchLocations,
        HeadAnnouncement,
        decode_heads_request,
        encode_heads_response,
        sign_message,
    )

    work = Path(tempfile.mkdtemp(prefix="odf-soak-"))
    result: dict[str, Any] = {"datasets": args.datasets, "rate": args.rate, "minutes": args.minutes}
    env = {"ODF_NODE_TRACEMALLOC": args.trace} if args.trace else {}
    node = NodeProcess(work / "node", "soak", config={"ipfs": {"mode": "none"}}, env=env)
    publishers: list[Libp2pTransport] = []
    probes: dict[str, subprocess.Popen[str]] = {}
    runner = None
    try:
        clock = [1_700_000_000_000_000_000]

        def tick() -> Timestamp:
            clock[0] += 1_000_000
            return Timestamp(clock[0])

        repo = DatasetRepository(
            work / "pub" / "datasets", work / "pub" / "keys", clock=tick, durable=False
        )
        t0 = time.monotonic()
        handles = [
            repo.create_from_snapshot(snapshots_from_yaml(SNAPSHOT.format(name=f"ds{i}"))[0])
            for i in range(args.datasets)
        ]
        keys = {h.id: load_private_key(repo.key_path(h.id)) for h in handles}
        result["setup_datasets_s"] = round(time.monotonic() - t0, 1)
        runner, port = await start_server(repo)
        base = f"http://127.0.0.1:{port}"

        node.init()
        node.launch()
        await asyncio.to_thread(node.wait_ready, 180)
        assert node.proc is not None
        pid = node.proc.pid
        await asyncio.sleep(10)
        result["idle_rss_mb_by_process"] = node_rss_mb(pid)
        result["idle_rss_mb"] = result["idle_rss_mb_by_process"]["total"]
        result["idle_engine_running"] = node.call("node.status")["engine"]["running"]
        # node.status (and rpc.ping, for comparison) timed from processes of their own, as a
        # CLI or the console calls the node; the in-process timing below shares this process's
        # interpreter with 25 libp2p hosts and the HTTP server, and is reported for comparison. The
        # probes start now, before this process lowers its priority, and wait for the load.
        probes.update(
            {
                m: subprocess.Popen(
                    [
                        sys.executable,
                        str(ROOT / "tests" / "bench" / "rpc_probe.py"),
                        node.url,
                        node.token,
                        "--seconds",
                        str(args.minutes * 60),
                        "--method",
                        m,
                        "--wait-stdin",
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for m in ("node.status", "rpc.ping")
            }
        )
        # From here on this process (the load generator: 25 publishers and the owners' HTTP
        # server, which in a real network run on other machines) yields the CPU to the daemon
        # and the probes; it still gets every cycle they leave idle.
        os.nice(args.load_nice)
        result["load_generator_nice"] = args.load_nice

        latest: dict[Any, bytes] = {}  # dataset -> its newest signed announcement

        async def serve_heads(peer: str, data: bytes) -> bytes:
            return encode_heads_response(
                [latest[d] for d in decode_heads_request(data) if d in latest]
            )

        for i in range(args.publishers):
            t = Libp2pTransport(Libp2pConfig(node_seed=bytes([0x40 + i]) * 32))
            t.set_request_handler(HEADS_PROTOCOL, serve_heads)
            await t.start()
            publishers.append(t)
        addr = node.call("node.status")["p2p"]["listen_addrs"][0]
        for t in publishers:
            await t.connect(addr)
        t0 = time.monotonic()
        for h in handles:
            node.call("subscriptions.add", did=h.id.as_did_str())
        result["subscribe_1000_s"] = round(time.monotonic() - t0, 1)
        # Until every publisher knows the daemon joined every topic (py-libp2p publishes a
        # message only to peers it knows joined its topic): the load starts on a formed network.
        node_peer = node.call("node.status")["p2p"]["peer_id"]
        topics = [dataset_topic(h.id.as_multibase()) for h in handles]
        t0 = time.monotonic()
        missing = len(topics) * len(publishers)
        while missing and time.monotonic() - t0 < 300:
            await asyncio.sleep(2)
            missing = 0
            for t in publishers:
                known = await t.topic_peers()
                missing += sum(node_peer not in known.get(topic, ()) for topic in topics)
        result["gossip_joined_s"] = round(time.monotonic() - t0, 1)
        result["gossip_joins_missing"] = missing

        datasets: dict[Any, Any] = {}
        samples: list[dict[str, float]] = []
        rpc_ms: list[float] = []
        sent = 0
        interval = 1.0 / args.rate
        end = time.monotonic() + args.minutes * 60
        http_url = node.call("node.status")["http_url"]
        metrics0 = prometheus(http_url)
        cpu0, wall0 = cpu_s(pid), time.monotonic()
        next_sample = time.monotonic() + 5
        # A traced daemon answers node.debug_memory with a snapshot (seconds of its time): its
        # native figures are sampled only untraced.
        next_native = float("inf") if args.trace else time.monotonic()
        native: list[dict[str, Any]] = []
        trace_at = wall0 + args.trace_baseline * 60 if args.trace else float("inf")
        next_rpc = time.monotonic() + 1
        next_send = time.monotonic()
        rpc_tasks: list[asyncio.Task[float]] = []

        async def timed_status() -> float:
            t1 = time.perf_counter()
            await asyncio.to_thread(node.call, "node.status")
            return (time.perf_counter() - t1) * 1000

        for probe in probes.values():
            assert probe.stdin is not None
            probe.stdin.write("go\n")
            probe.stdin.flush()
        while time.monotonic() < end:
            h = handles[sent % len(handles)]
            ds = datasets.get(h.id) or datasets.setdefault(h.id, repo.open(h.id.as_did_str()))
            st = ds.state()
            new = ds.append(
                m.MetadataBlock(
                    system_time=tick(),
                    prev_block_hash=st.head,
                    sequence_number=st.sequence_number + 1,
                    event=m.SetInfo(description=f"revision {sent}"),
                )
            )
            ann = HeadAnnouncement(
                dataset=h.id,
                head=new,
                sequence=st.sequence_number + 1,
                prev_head=st.head,
                epoch=0,
                locations=FetchLocations((), (f"{base}/{h.id.as_did_str()}",)),
                issued_at_ns=time.time_ns(),
                nonce=secrets.token_bytes(16),
            )
            env = sign_message(ann, keys[h.id]).envelope
            latest[h.id] = env
            await publishers[sent % len(publishers)].publish(
                dataset_topic(h.id.as_multibase()), env
            )
            sent += 1
            now = time.monotonic()
            if now >= next_rpc:
                next_rpc = now + 1
                rpc_tasks.append(asyncio.create_task(timed_status()))
            if now >= next_sample:
                next_sample = now + 5
                status = await asyncio.to_thread(node.call, "node.status")
                by_process = node_rss_mb(pid)
                samples.append(
                    {
                        "t": round(now - wall0, 1),
                        "rss_mb": by_process["total"],
                        "rss_mb_by_process": by_process,
                        "cpu_pct": 100 * (cpu_s(pid) - cpu0) / (now - wall0),
                        "verify_queue": status["work"]["verify"],
                        "running": status["running_work"],
                    }
                )
                print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
            if now >= next_native:
                next_native = now + 60
                mem = await asyncio.to_thread(node.call, "node.debug_memory")
                native.append({"t": round(now - wall0, 1), **mem["native"]})
            if now >= trace_at:
                # Baselines of both traced processes (the daemon's answer is its snapshot).
                trace_at = float("inf")
                await asyncio.to_thread(node.call, "node.debug_memory", baseline=True)
                signal_libp2p(node)
            next_send += interval
            delay = next_send - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        elapsed = time.monotonic() - wall0
        if args.trace:
            growth = await asyncio.to_thread(node.call, "node.debug_memory")
            result["tracemalloc_daemon"] = {
                k: growth.get(k) for k in ("traced_mb", "growth_total_kb", "top_growth")
            }
            lp = await libp2p_growth(node)
            result["tracemalloc_libp2p"] = {
                k: lp.get(k) for k in ("traced_mb", "growth_total_kb", "top_growth")
            }
        result["native_memory_by_minute"] = native
        result["rss_mb_by_process"] = rss_summary(samples)
        rpc_ms += await asyncio.gather(*rpc_tasks)
        probed: dict[str, list[float]] = {}
        for m, proc in probes.items():
            out, _ = await asyncio.to_thread(proc.communicate, None, 120)
            probed[m] = [float(line.split()[1]) for line in out.splitlines() if line.strip()]
        metrics1 = prometheus(http_url)
        result["event_loop_lag_p99_s_bucket"] = lag_p99_bound(metrics0, metrics1)
        result["gc_pauses_under_load"] = gc_pauses(metrics0, metrics1)
        verified_during = sum(
            v - metrics0.get(k, 0.0)
            for k, v in metrics1.items()
            if k.startswith("odf_verifications_total")
        )
        result["verifications_per_s_under_load"] = round(verified_during / elapsed, 2)
        # Settle: every subscription at its owner's head?
        heads = {h.id.as_did_str(): str(repo.open(h.id.as_did_str()).head()) for h in handles}
        t_stop = time.monotonic()
        at_head = 0
        while time.monotonic() - t_stop < args.settle_minutes * 60:
            rows = await asyncio.to_thread(node.call, "subscriptions.list")
            at_head = sum(1 for r in rows if heads.get(r["did"]) == r["accepted_head"])
            if at_head == len(heads):
                break
            await asyncio.sleep(5)
        result["all_at_head_after_load_s"] = (
            round(time.monotonic() - t_stop, 1) if at_head == len(heads) else None
        )
        result["at_head_at_end"] = at_head
        metrics2 = prometheus(http_url)
        result["gossip_outcomes"] = {
            k: v
            for k, v in metrics2.items()
            if k.startswith(
                ("odf_announcements_total", "odf_pulls_total", "odf_verifications_total")
            )
        }
        result["verifications_total"] = sum(
            v for k, v in metrics2.items() if k.startswith("odf_verifications_total")
        )
        events = node.call("node.events", kind="verify.verified", limit=1)
        verified_total = node.call("work.list", state="done")
        result.update(
            {
                "announcements_sent": sent,
                "achieved_rate": round(sent / elapsed, 1),
                "rss_mb_median": round(statistics.median(s["rss_mb"] for s in samples), 1),
                "rss_mb_max": round(max(s["rss_mb"] for s in samples), 1),
                "rss_mb_final": round(samples[-1]["rss_mb"], 1),
                "cpu_pct_avg": round(100 * (cpu_s(pid) - cpu0) / elapsed, 1),
                "verify_queue_max": max(s["verify_queue"] for s in samples),
                "verify_queue_final": samples[-1]["verify_queue"],
                "rpc_ms_p50": round(pct(probed["node.status"], 0.5), 1),
                "rpc_ms_p99": round(pct(probed["node.status"], 0.99), 1),
                "rpc_ms_max": round(max(probed["node.status"], default=float("nan")), 1),
                "rpc_samples": len(probed["node.status"]),
                "ping_ms_p50": round(pct(probed["rpc.ping"], 0.5), 1),
                "ping_ms_p99": round(pct(probed["rpc.ping"], 0.99), 1),
                "rpc_ms_p50_timed_in_load_generator": round(pct(rpc_ms, 0.5), 1),
                "rpc_ms_p99_timed_in_load_generator": round(pct(rpc_ms, 0.99), 1),
                "work_done": len(verified_total),
                "any_verified": bool(events),
                "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            }
        )
        return result
    finally:
        for probe in probes.values():
            if probe.poll() is None:
                probe.kill()
                probe.wait()
        for t in publishers:
            await t.stop()
        node.stop()
        if runner is not None:
            await runner.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", type=int, default=1000)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--publishers", type=int, default=25)
    p.add_argument("--settle-minutes", type=float, default=5.0)
    p.add_argument(
        "--load-nice",
        type=int,
        default=LOAD_GENERATOR_NICE,
        help="niceness of the load generator once the load starts (lower it when other\n"
        "background jobs at nice 10 share the machine and the offered rate falls short)",
    )
    p.add_argument(
        "--trace",
        default="",
        metavar="DEPTH",
        help="run the daemon and its libp2p process with tracemalloc (ODF_NODE_TRACEMALLOC=DEPTH,\n"
        "e.g. 1 or 10) and report the allocation sites that grew most after --trace-baseline",
    )
    p.add_argument(
        "--trace-baseline",
        type=float,
        default=2.0,
        help="minutes into the load phase at which the traced baselines are taken",
    )
    args = p.parse_args()
    if os.environ.get("ODF_SOAK_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_SOAK_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
