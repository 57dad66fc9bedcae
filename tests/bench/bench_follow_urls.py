"""Follow-by-URL benchmark: one daemon polling 1,000 sources of one Simple Transfer Protocol server.

Inside a private loopback-only namespace (the script re-executes itself under ``unshare -rn``):

1. builds a home with ``--datasets`` (default 1,000) small root datasets (one repository, no
   fsync: the home is scratch) and serves it with ``odf-node serve-http``, behind a counting
   HTTP/1.1 proxy run by this script: every request is counted at the server side with its
   path kind, status and bytes on the wire in each direction (request head up, response head
   and body down);
2. starts one real daemon (``odf-node run``; IPFS off) with ``[follow] poll_interval_s`` =
   ``--interval`` (default 10 s, so that polls happen during the run: 1,000 sources are ~100
   polls/s), ``max_connections`` = ``--max-connections`` (default 32, the default setting);
3. times ``node.status`` every 100 ms from a separate process (``rpc_probe.py``) for
   ``--baseline`` seconds before anything is followed (the idle figure, for comparison);
4. subscribes the daemon to every dataset by URL (``subscriptions.add`` with the URL, from
   ``--writers`` threads) and waits until the verification queue is empty;
5. waits until every source had its first poll (unconditional: no validator yet), then for
   ``--seconds`` (default 60) times ``node.status`` every 100 ms from a separate process
   while the daemon polls, and samples the daemon's open TCP connections to the source every
   0.5 s (``/proc/net/tcp`` of the namespace: established sockets whose remote port is the
   server's).

Reported: RPC ``node.status`` p50 / p99 / max (idle and under the polls; target p99 <= 250 ms),
the source connections over time (median, max; bound: ``max_connections``), per idle poll the
requests and bytes counted at the server (target: one conditional ``refs/head`` request
answered ``304``, no other request), the daemon's polls by outcome (its
``odf_source_polls_total`` counters), its event-loop lag p99 and GC pauses (as
``bench_soak.py`` reads them), its CPU and RSS, and the machine's load average.

Usage: .venv/bin/python tests/bench/bench_follow_urls.py [--datasets 1000] [--interval 10]
       [--seconds 60] [--max-connections 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

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
        header: true
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
"""


# ---- the counting proxy


@dataclass
class Tally:
    """Requests counted at the server, by (path kind, status)."""

    requests: dict[str, int] = field(default_factory=dict)
    up: dict[str, int] = field(default_factory=dict)
    down: dict[str, int] = field(default_factory=dict)
    open_now: int = 0
    open_max: int = 0
    accepted: int = 0
    unparsed: int = 0

    def add(self, key: str, up: int, down: int) -> None:
        self.requests[key] = self.requests.get(key, 0) + 1
        self.up[key] = self.up.get(key, 0) + up
        self.down[key] = self.down.get(key, 0) + down

    def snapshot(self) -> dict[str, Any]:
        return {"requests": dict(self.requests), "up": dict(self.up), "down": dict(self.down)}


def _kind(path: str) -> str:
    """``refs/head``, ``blocks``, ``data``, ``checkpoints`` or ``other`` of a request path."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[-2:] == ["refs", "head"]:
        return "refs/head"
    if len(parts) >= 2 and parts[-2] in ("blocks", "data", "checkpoints"):
        return parts[-2]
    return "other"


def _headers(head: bytes) -> dict[str, str]:
    out = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        out[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return out


class CountingProxy:
    """A TCP proxy in front of the transfer server that parses the HTTP/1.1 exchanges it relays
    (no pipelining: the client sends one request at a time on a connection, as aiohttp does)
    and counts each request with the response's status and the bytes of both."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.tally = Tally()

    async def start(self) -> int:
        server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self._server = server
        return int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self._server.close()

    async def _conn(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        t = self.tally
        t.accepted += 1
        t.open_now += 1
        t.open_max = max(t.open_max, t.open_now)
        pending: deque[tuple[str, int]] = deque()
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            t.open_now -= 1
            cw.close()
            return

        async def upward() -> None:
            buf = b""
            while True:
                chunk = await cr.read(65536)
                if not chunk:
                    break
                uw.write(chunk)
                buf += chunk
                while (end := buf.find(b"\r\n\r\n")) >= 0:
                    head, buf = buf[: end + 4], buf[end + 4 :]
                    path = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
                    pending.append((_kind(path), len(head)))
                await uw.drain()
            uw.write_eof()

        async def downward() -> None:
            buf = b""
            body_left = 0
            size = 0
            key = ""
            up = 0
            while True:
                chunk = await ur.read(65536)
                if not chunk:
                    break
                cw.write(chunk)
                buf += chunk
                while buf:
                    if body_left:
                        n = min(body_left, len(buf))
                        body_left -= n
                        size += n
                        buf = buf[n:]
                        if not body_left:
                            t.add(key, up, size)
                        continue
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head, buf = buf[: end + 4], buf[end + 4 :]
                    status = head.split(b" ", 2)[1].decode()
                    hdrs = _headers(head[:-4])
                    kind, up = pending.popleft() if pending else ("other", 0)
                    key, size = f"{kind} {status}", len(head)
                    if "chunked" in hdrs.get("transfer-encoding", ""):
                        t.unparsed += 1  # not expected from the transfer server: flagged
                    length = 0 if status in ("304", "204") else int(hdrs.get("content-length", 0))
                    body_left = length
                    if not body_left:
                        t.add(key, up, size)
                await cw.drain()
            cw.close()

        try:
            await asyncio.gather(upward(), downward())
        except (OSError, IndexError, ValueError):
            pass
        finally:
            t.open_now -= 1
            uw.close()
            cw.close()


# ---- measurements


def source_connections(port: int) -> int:
    """Established TCP connections to ``port`` from this namespace's clients (the daemon)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == port:
                n += 1
    return n


def prometheus(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def probe(node: Any, seconds: float) -> subprocess.Popen[str]:
    """``rpc_probe.py``: ``node.status`` every 100 ms for ``seconds``, in a process of its own."""
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "bench" / "rpc_probe.py"),
            node.url,
            node.token,
            "--seconds",
            str(seconds),
            "--every",
            "0.1",
            "--method",
            "node.status",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def probe_result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=600)
    ms = [float(line.split()[1]) for line in out.splitlines() if line.strip()]
    return {
        "samples": len(ms),
        "p50_ms": round(pct(ms, 0.5), 1),
        "p99_ms": round(pct(ms, 0.99), 1),
        "max_ms": round(max(ms, default=float("nan")), 1),
    }


def build_home(home: Path, n: int) -> list[str]:
    """``odf-node init`` and ``n`` root datasets (no fsync: a scratch home). Their aliases."""
    from coordinator.metadata.snapshot import snapshots_from_yaml
    from coordinator.storage.repository import DatasetRepository
    from node.home import NodeHome, system_clock

    subprocess.run(
        [sys.executable, "-m", "node.cli", "init", "--home", str(home)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    h = NodeHome(home)
    repo = DatasetRepository(
        h.datasets_path, h.dataset_keys_path, clock=system_clock, durable=False
    )
    names = [f"ds{i}" for i in range(n)]
    for name in names:
        repo.create_from_snapshot(snapshots_from_yaml(SNAPSHOT.format(name=name))[0])
    return names


def polls(metrics: dict[str, float]) -> dict[str, float]:
    return {
        k.split('outcome="', 1)[1].split('"', 1)[0]: v
        for k, v in metrics.items()
        if k.startswith("odf_source_polls_total{")
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench_soak import gc_pauses, lag_p99_bound
    from daemon_harness import NodeProcess, node_cpu_s, node_rss_mb
    from netns import require_loopback_only

    require_loopback_only()
    work = Path(tempfile.mkdtemp(prefix="odf-follow-urls-"))
    result: dict[str, Any] = {
        "datasets": args.datasets,
        "poll_interval_s": args.interval,
        "max_connections": args.max_connections,
        "cpus": os.cpu_count(),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }
    node = NodeProcess(
        work / "node",
        "follower",
        config={
            "ipfs": {"mode": "none"},
            "follow": {
                "poll_interval_s": args.interval,
                "jitter": 0.1,
                "max_connections": args.max_connections,
            },
        },
    )
    server: subprocess.Popen[bytes] | None = None
    proxy: CountingProxy | None = None
    try:
        t0 = time.monotonic()
        names = await asyncio.to_thread(build_home, work / "source", args.datasets)
        result["build_home_s"] = round(time.monotonic() - t0, 1)
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            server_port = int(s.getsockname()[1])
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "node.cli",
                "serve-http",
                "--home",
                str(work / "source"),
                "--port",
                str(server_port),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proxy = CountingProxy(server_port)
        port = await proxy.start()
        base = f"http://127.0.0.1:{port}"

        node.init()
        node.launch()
        await asyncio.to_thread(node.wait_ready, 180)
        for _ in range(100):  # serve-http up?
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{server_port}/ds0/refs/head", timeout=2)
                break
            except OSError:
                await asyncio.sleep(0.2)
        assert node.proc is not None
        pid = node.proc.pid
        http_url = node.call("node.status")["http_url"]
        if args.baseline > 0:
            result["rpc_idle"] = await asyncio.to_thread(probe_result, probe(node, args.baseline))

        def subscribe(name: str) -> None:
            node.call("subscriptions.add", did=f"{base}/{name}")

        t0 = time.monotonic()
        with ThreadPoolExecutor(args.writers) as pool:
            await asyncio.to_thread(lambda: list(pool.map(subscribe, names)))
        result["subscribe_s"] = round(time.monotonic() - t0, 1)
        rows = node.call("subscriptions.list")
        result["subscriptions_by_url"] = sum(1 for r in rows if r.get("source"))

        def queue_empty() -> bool:
            w = node.call("node.status")["work"]
            return not any(w.values())

        t0 = time.monotonic()
        while not await asyncio.to_thread(queue_empty) and time.monotonic() - t0 < 600:
            await asyncio.sleep(1)
        result["verify_queue_drained_s"] = round(time.monotonic() - t0, 1)
        # The first poll of a source is unconditional (no validator yet, a 200); wait until
        # every source had it, so that the measured phase holds idle polls only.
        settle = 1.2 * args.interval if args.settle is None else args.settle
        before = proxy.tally.snapshot()["requests"].get("refs/head 200", 0)
        await asyncio.sleep(settle)
        result["settled_s"] = round(settle, 1)
        # refs/head answered 200 while settling: the sources' first polls.
        result["first_polls"] = proxy.tally.snapshot()["requests"].get("refs/head 200", 0) - before

        # The measured phase: polls only.
        metrics0 = await asyncio.to_thread(prometheus, http_url)
        tally0 = proxy.tally.snapshot()
        cpu0, wall0 = node_cpu_s(pid), time.monotonic()
        rpc = probe(node, args.seconds)
        conns: list[tuple[float, int]] = []
        rss: list[float] = []
        next_rss = wall0
        while rpc.poll() is None:
            now = time.monotonic()
            conns.append((round(now - wall0, 1), source_connections(port)))
            if now >= next_rss:
                rss.append(node_rss_mb(pid)["total"])
                next_rss = now + 5
            await asyncio.sleep(0.5)
        elapsed = time.monotonic() - wall0
        result["rpc_under_polls"] = await asyncio.to_thread(probe_result, rpc)
        cpu = node_cpu_s(pid) - cpu0
        metrics1 = await asyncio.to_thread(prometheus, http_url)
        result["event_loop_lag_p99_s_bucket"] = lag_p99_bound(metrics0, metrics1)
        result["gc_pauses"] = gc_pauses(metrics0, metrics1)
        tally1 = proxy.tally.snapshot()
        p0, p1 = polls(metrics0), polls(metrics1)
        daemon_polls = {k: int(v - p0.get(k, 0.0)) for k, v in p1.items() if v - p0.get(k, 0.0)}
        counted: dict[str, dict[str, int]] = {}
        for key, n in tally1["requests"].items():
            d = n - tally0["requests"].get(key, 0)
            if d:
                counted[key] = {
                    "requests": d,
                    "up_bytes": tally1["up"][key] - tally0["up"].get(key, 0),
                    "down_bytes": tally1["down"][key] - tally0["down"].get(key, 0),
                }
        idle = counted.get("refs/head 304", {"requests": 0, "up_bytes": 0, "down_bytes": 0})
        n_idle = idle["requests"]
        total_requests = sum(c["requests"] for c in counted.values())
        n_polls = sum(daemon_polls.values())
        values = [c for _, c in conns]
        result.update(
            {
                "measured_s": round(elapsed, 1),
                "server_requests": counted,
                "server_requests_per_s": round(total_requests / elapsed, 1),
                "daemon_polls": daemon_polls,
                "requests_per_poll": round(total_requests / n_polls, 3) if n_polls else None,
                "idle_poll": {
                    "requests": 1 if n_idle else 0,
                    "status": 304,
                    "up_bytes": round(idle["up_bytes"] / n_idle, 1) if n_idle else None,
                    "down_bytes": round(idle["down_bytes"] / n_idle, 1) if n_idle else None,
                },
                "source_connections": {
                    "median": statistics.median(values) if values else None,
                    "max": max(values, default=0),
                    "bound": args.max_connections,
                    "timeline_every_10th": conns[::10],
                },
                "proxy_connections_accepted": proxy.tally.accepted,
                "proxy_connections_max_open": proxy.tally.open_max,
                "proxy_unparsed_responses": proxy.tally.unparsed,
                "daemon_cpu_pct": round(100 * cpu / elapsed, 1),
                "daemon_rss_mb_max": max(rss, default=float("nan")),
                "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
            }
        )
        return result
    finally:
        node.stop()
        if proxy is not None:
            await proxy.close()
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", type=int, default=1000)
    p.add_argument("--interval", type=float, default=10.0, help="[follow] poll_interval_s")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the measured phase")
    p.add_argument("--baseline", type=float, default=20.0, help="idle node.status timing (s)")
    p.add_argument("--max-connections", type=int, default=32, help="[follow] max_connections")
    p.add_argument(
        "--settle",
        type=float,
        default=None,
        help="wait after subscribing before measuring (default: 1.2 x interval, so that\n"
        "every source had its first, unconditional poll)",
    )
    p.add_argument("--writers", type=int, default=4, help="subscribing RPC client threads")
    args = p.parse_args()
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
