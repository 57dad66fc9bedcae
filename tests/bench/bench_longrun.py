"""A compressed month: one node left alone under the churn of a real network, measured for leaks.

Inside a private loopback-only namespace (the script re-executes itself under ``unshare -rn``)
two real daemons run with IPFS off (pulls over HTTP from each other's Simple Transfer Protocol
server): **A**, the node measured, and **B**, its peer. Each owns ``--datasets`` (default 20)
root datasets and follows most of the other's. For ``--minutes`` (default 60):

* **owners publish**: every ``--publish-every`` seconds (2) one owner, A and B in turn, ingests
  a CSV file into one of its datasets (``dataset.ingest`` over RPC); its publish pipeline
  announces the head, the follower pulls, verifies and attests it;
* **followers subscribe and unsubscribe**: every 20 s each node stops following one of the
  other's datasets and follows one it did not (``subscriptions.remove`` / ``subscriptions.add``),
  so a dataset is left, re-followed later and caught up by anti-entropy;
* **peers join and leave**: every 15 s a new peer process (``p2p/devnode.py``: a gossip host,
  the protocol core and its request handlers, with a fresh peer id, as a real network keeps
  bringing new ones) dials A, follows one dataset A follows, stays 30-90 s and leaves by
  exiting; at most 4 at a time;
* **a backup and a restart in the middle**: at half time ``odf-node backup FILE`` of A while it
  runs (then ``odf-node restore`` into a new home: same node id), and B is restarted (SIGTERM,
  then started again on its home; it redials A, its bootstrap peer, and catches up).

The month is compressed: ``[pipeline] keep_finished_work_days`` is 7 days scaled by
``--minutes`` / 30 days (60 min -> 14 min), so finished work is pruned several times during the
run; ``state.db`` grows only by what is kept by design (attestations, disputes, verification
results; the event log up to 100,000 rows), reported as row counts per table. Every 10 s A's
RSS (daemon + libp2p process), open file descriptors (both), ``state.db`` (+ WAL) size and
work-item counts are sampled.

After the load, the nodes settle (``--settle-minutes``, 5): every current subscription must be at
its owner's head and no work item pending, claimed or failed on either node. Reported: the
samples (every 6th), RSS slope (MB/h, least squares over the samples after warm-up) against the
bound of 2 MB/h, fd count range and slope after warm-up (flat: range within 12), ``state.db``
size at each keep window, and ``lost_work_items`` (must be 0). The process exit code is 1 when a
bound is missed.

Warm-up (``--warmup-minutes``) ends by default when the node's bounded per-dataset histories are
full: the protocol core's last announcements (``history_per_dataset``, 16) and the trust
driver's heads (``HEADS_PER_DATASET``, 16) of each dataset fill one entry per head, and each
dataset gets a head every ``2 x --datasets x --publish-every`` seconds (80 s by default: full
after ~21 min), so memory measured before then includes caches filling by design; never less
than a sixth of the run (at most 10 min), never more than half of it. The slope after that
fixed sixth is reported beside (``rss_slope_after_fixed_warmup_mb_per_h``).

Every minute A's native allocators are sampled too (``node.debug_memory``'s ``native``: Arrow's
pool backend and bytes, glibc's heap in use and free), and their slopes after warm-up reported
beside RSS's. ``--daemon-env KEY=VALUE`` (repeatable) sets a variable in A's environment only
(e.g. ``ARROW_DEFAULT_MEMORY_POOL=system``, ``MALLOC_ARENA_MAX=2``) to compare allocators.

With ``ODF_NODE_TRACEMALLOC=1`` set A runs with tracemalloc, and the report ends with the 15
allocation sites that grew most between warm-up and the end (with a frame depth, e.g. ``=10``,
whole stacks), and the Python heap's whole growth (``node.debug_memory``,
docs/operations.md).

Usage: .venv/bin/python tests/bench/bench_longrun.py [--minutes 60]   (make bench-longrun)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
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
        header: true
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
"""

MONTH_MIN = 30 * 24 * 60
RSS_SLOPE_BOUND_MB_H = 2.0
FD_FLAT_RANGE = 12
"""Open descriptors move with the load: up to 4 peer processes and B hold a gossip connection
each, pulls keep HTTP connections alive, a backup opens files. More than this between the
lowest and highest sample after warm-up is not flat (a leak of one descriptor per churned peer
would exceed it within minutes: 4 new peers join a minute)."""


def fd_count(pid: int) -> int:
    """Open file descriptors of the node's own processes (daemon and libp2p) together."""
    from daemon_harness import node_pids

    total = 0
    for p in node_pids(pid).values():
        try:
            total += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return total


def signal_libp2p(node: Any) -> None:
    """Ask A's traced libp2p process for its baseline (first) or growth (later): ``SIGUSR2``
    (procutil/memdebug.py; the answer is a ``memdebug`` line in A's log)."""
    from daemon_harness import node_pids

    pid = node_pids(node.proc.pid).get("libp2p")
    if pid is not None:
        os.kill(pid, signal.SIGUSR2)


async def libp2p_growth(node: Any) -> dict[str, Any]:
    """The traced libp2p process's ``memdebug`` answer since its baseline: the sites that grew
    most (``top_growth``) and the Python heap's whole growth (``growth_total_kb``)."""
    mark = len(node.log_path.read_bytes())
    signal_libp2p(node)
    for _ in range(300):  # a snapshot of a busy process takes a while
        await asyncio.sleep(1)
        for line in node.log_path.read_bytes()[mark:].decode(errors="replace").splitlines():
            if line.startswith("memdebug {"):
                growth: dict[str, Any] = json.loads(line[len("memdebug ") :])
                return growth
    return {}


def _quarter_slopes(after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Total RSS slope over each quarter of the samples after warm-up (from-to in seconds)."""
    out: list[dict[str, Any]] = []
    n = len(after) // 4
    for q in range(4):
        part = after[q * n : (q + 1) * n if q < 3 else len(after)]
        slope = slope_per_hour([(s["t_s"], s["rss_mb"]["total"]) for s in part])
        if part and slope is not None:
            out.append({"t_s": [part[0]["t_s"], part[-1]["t_s"]], "mb_per_h": round(slope, 2)})
    return out


def db_bytes(home: Path) -> int:
    return sum(
        (home / n).stat().st_size for n in ("state.db", "state.db-wal") if (home / n).exists()
    )


def table_rows(home: Path) -> dict[str, int]:
    """Rows per table of a home's state.db (read beside the running daemon: WAL readers do
    not block it)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True, timeout=30)
    try:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith("sqlite_")
        ]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        conn.close()


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    sxy = sum((t - mx) * (v - my) for t, v in points)
    return sxy / sxx * 3600


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from daemon_harness import NodeProcess, node_rss_mb
    from netns import require_loopback_only

    require_loopback_only()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="odf-longrun-"))
    keep_days = 7.0 * args.minutes / MONTH_MIN
    conf = {
        "ipfs": {"mode": "none"},
        "pipeline": {"keep_finished_work_days": keep_days},
    }
    # The value passes through: a frame depth (``=10``) groups the growth by whole stack.
    traced = os.environ.get("ODF_NODE_TRACEMALLOC", "")
    env = {"ODF_NODE_TRACEMALLOC": traced} if traced and traced != "0" else {}
    a_env = dict(env)
    for kv in args.daemon_env:
        key, _, value = kv.partition("=")
        a_env[key] = value
    a = NodeProcess(work / "a", "a", config=conf, env=a_env)
    b = NodeProcess(work / "b", "b", config=conf)
    churn: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
    result: dict[str, Any] = {
        "minutes": args.minutes,
        "datasets_per_owner": args.datasets,
        "keep_finished_work_days": round(keep_days, 5),
        "keep_finished_work_min": round(keep_days * 24 * 60, 1),
        "a_daemon_env": args.daemon_env,
    }

    async def call(node: NodeProcess, method: str, **params: Any) -> Any:
        return await asyncio.to_thread(node.call, method, 300.0, **params)

    try:
        a.init()
        a.launch()
        await asyncio.to_thread(a.wait_ready)
        a_addr = (await call(a, "node.status"))["p2p"]["listen_addrs"][0]
        # B redials A (its bootstrap peer) after its restart; A learns B's new address from that.
        b.config["p2p"]["bootstrap"] = [a_addr]
        b.init()
        b.launch()
        await asyncio.to_thread(b.wait_ready)
        a_pid = a.proc.pid if a.proc else 0
        owned: dict[str, list[str]] = {}
        for node in (a, b):
            yaml = "---\n".join(
                SNAPSHOT.format(name=f"{node.name}{i}") for i in range(args.datasets)
            )
            created = await call(node, "dataset.create", snapshot_yaml=yaml)
            owned[node.name] = [c["id"] for c in created]
        other = {"a": b, "b": a}
        # Each follows three quarters of the other's datasets; the rest rotate in.
        follows: dict[str, list[str]] = {}
        for node in (a, b):
            dids = list(owned[other[node.name].name])
            follows[node.name] = dids[: max(1, len(dids) * 3 // 4)]
            for did in follows[node.name]:
                await call(node, "subscriptions.add", did=did)
        csv = work / "rows.csv"
        csv.write_text("city,population\nA,1\nB,2\n")

        samples: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        ingests = {"a": 0, "b": 0}
        seed_counter = [0]
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        half = t0 + args.minutes * 30
        next_publish = t0
        next_rotate = t0 + 20
        next_join = t0 + 5
        next_sample = t0
        did_middle = False
        traced_baseline = False
        turn = 0

        def join_peer() -> None:
            # A real peer process (p2p/devnode.py: a gossip host, the protocol core and its
            # request handlers) following one dataset A follows; it leaves by exiting.
            seed_counter[0] += 1
            seed = (0x1000 + seed_counter[0]).to_bytes(4, "big").hex() * 8
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "p2p.devnode",
                    "--seed",
                    seed,
                    "--follow",
                    rng.choice(follows["a"]),
                    "--connect",
                    a_addr,
                ],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            churn[seed_counter[0]] = (proc, time.monotonic() + rng.uniform(30, 90))

        rows_middle: dict[str, int] = {}

        async def middle() -> None:
            rows_middle.update(table_rows(a.home))
            t1 = time.monotonic()
            archive = work / "a-backup.tar"
            out = await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable,
                    "-m",
                    "node.cli",
                    "backup",
                    str(archive),
                    "--home",
                    str(a.home),
                    "--json",
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=True,
            )
            backup = json.loads(out.stdout)
            restored = work / "a-restored"
            await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable,
                    "-m",
                    "node.cli",
                    "restore",
                    str(archive),
                    "--home",
                    str(restored),
                ],
                capture_output=True,
                cwd=ROOT,
                check=True,
            )
            st = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "node.cli", "status", "--home", str(restored), "--json"],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=True,
            )
            same_id = json.loads(st.stdout)["node_id"] == backup["node_id"]
            events.append(
                {
                    "t_s": round(t1 - t0),
                    "backup_s": round(time.monotonic() - t1, 2),
                    "backup_bytes": backup["bytes"],
                    "backup_subscriptions": backup["subscriptions"],
                    "restored_same_node_id": same_id,
                }
            )
            t2 = time.monotonic()
            await asyncio.to_thread(b.stop)
            b.launch()
            await asyncio.to_thread(b.wait_ready)
            events.append({"t_s": round(t2 - t0), "b_restart_s": round(time.monotonic() - t2, 1)})

        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + 10
                if env and not traced_baseline and now - t0 >= args.warmup_minutes * 60:
                    traced_baseline = True
                    await call(a, "node.debug_memory", baseline=True)
                    signal_libp2p(a)
                status = await call(a, "node.status")
                native = None
                if not env and len(samples) % 6 == 0:
                    # Without tracing the call is cheap (no snapshot): Arrow's pool, glibc's heap.
                    native = (await call(a, "node.debug_memory"))["native"]
                samples.append(
                    {
                        "t_s": round(now - t0),
                        "rss_mb": node_rss_mb(a_pid),
                        "fds": fd_count(a_pid),
                        "state_db_mb": round(db_bytes(a.home) / 2**20, 3),
                        "work_pending": status["work"],
                        "work_done_stored": len(await call(a, "work.list", state="done")),
                        "peers": status["p2p"]["peers"],
                        "churn_peers": len(churn),
                        **({"native": native} if native is not None else {}),
                    }
                )
                print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
            if now >= next_publish:
                next_publish = now + args.publish_every
                node = (a, b)[turn % 2]
                ds = f"{node.name}{(turn // 2) % args.datasets}"
                turn += 1
                await call(node, "dataset.ingest", ref=ds, files=[str(csv)])
                ingests[node.name] += 1
            if now >= next_rotate:
                next_rotate = now + 20
                for node in (a, b):
                    mine = follows[node.name]
                    spare = [d for d in owned[other[node.name].name] if d not in mine]
                    if spare:
                        gone = mine.pop(rng.randrange(len(mine)))
                        await call(node, "subscriptions.remove", did=gone)
                        new = rng.choice(spare)
                        await call(node, "subscriptions.add", did=new)
                        mine.append(new)
            if now >= next_join and len(churn) < 4:
                next_join = now + 15
                join_peer()
            for key, (proc, leave_at) in list(churn.items()):
                if now >= leave_at:
                    del churn[key]
                    leave(proc)
            if not did_middle and now >= half:
                did_middle = True
                await middle()
            await asyncio.sleep(0.2)
        for proc, _ in churn.values():
            leave(proc)
        churn.clear()
        result["ingests"] = ingests
        result["churn_peers_joined"] = seed_counter[0]
        result["middle"] = events

        # Settle: every current subscription at its owner's head, nothing left to do.
        t_stop = time.monotonic()
        lost: dict[str, Any] = {}
        while True:
            lost = {}
            for node in (a, b):
                heads = {r["id"]: r["head"] for r in await call(other[node.name], "dataset.list")}
                subs = {
                    s["did"]: s["accepted_head"] for s in await call(node, "subscriptions.list")
                }
                behind = [d for d in subs if subs[d] != heads.get(d)]
                open_items = [
                    w
                    for st in ("pending", "claimed", "failed")
                    for w in await call(node, "work.list", state=st)
                ]
                if behind or open_items:
                    lost[node.name] = {"behind": len(behind), "open_or_failed": open_items[:5]}
            if not lost or time.monotonic() - t_stop > args.settle_minutes * 60:
                break
            await asyncio.sleep(5)
        result["settle_s"] = round(time.monotonic() - t_stop, 1)
        result["lost_work_items"] = sum(
            v["behind"] + len(v["open_or_failed"]) for v in lost.values()
        )
        result["lost_detail"] = lost

        warm = args.warmup_minutes * 60
        after = [s for s in samples if s["t_s"] >= warm]
        rss = [(s["t_s"], s["rss_mb"]["total"]) for s in after]
        fds = [s["fds"] for s in after]
        slope = slope_per_hour(rss)
        fixed = fixed_warmup_minutes(args.minutes) * 60
        result.update(
            {
                "warmup_min": args.warmup_minutes,
                "histories_full_min": round(
                    histories_full_minutes(args.datasets, args.publish_every), 1
                ),
                # The same fit from the fixed sixth of the run (at most 10 min) on: what the
                # caches filling adds to it.
                "rss_slope_after_fixed_warmup_mb_per_h": _round(
                    slope_per_hour(
                        [(s["t_s"], s["rss_mb"]["total"]) for s in samples if s["t_s"] >= fixed]
                    )
                ),
                "rss_mb_start": samples[0]["rss_mb"]["total"],
                "rss_mb_after_warmup": rss[0][1] if rss else None,
                "rss_mb_end": samples[-1]["rss_mb"]["total"],
                "rss_mb_max": max(s["rss_mb"]["total"] for s in samples),
                "rss_slope_mb_per_h": round(slope, 2) if slope is not None else None,
                "rss_slope_bound_mb_per_h": RSS_SLOPE_BOUND_MB_H,
                "daemon_rss_slope_mb_per_h": _round(
                    slope_per_hour([(s["t_s"], s["rss_mb"]["daemon"]) for s in after])
                ),
                "libp2p_rss_slope_mb_per_h": _round(
                    slope_per_hour([(s["t_s"], s["rss_mb"].get("libp2p", 0.0)) for s in after])
                ),
                # Where the slope levels off: the same fit over each quarter after warm-up.
                "rss_slope_by_quarter_mb_per_h": _quarter_slopes(after),
                **_native_slopes(after),
                "fds_after_warmup_min_max": [min(fds), max(fds)] if fds else None,
                "fds_slope_per_h": _round(slope_per_hour([(s["t_s"], s["fds"]) for s in after])),
                "state_db_mb_by_keep_window": _by_window(samples, keep_days * 86400),
                "state_db_mb_end": samples[-1]["state_db_mb"],
                # What grows with the month: work items are pruned after the keep window, the
                # event log is capped at 100,000 rows, attestations, disputes and verification
                # results are kept by design (config/default.toml, [pipeline]).
                "state_rows_middle": rows_middle,
                "state_rows_end": table_rows(a.home),
                "done_items_stored_end": samples[-1]["work_done_stored"],
                "samples_every_minute": samples[::6],
                "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            }
        )
        if env:
            daemon_growth = await call(a, "node.debug_memory")
            libp2p = await libp2p_growth(a)
            result["tracemalloc_growth_total_kb"] = daemon_growth.get("growth_total_kb")
            result["tracemalloc_top_growth"] = daemon_growth["top_growth"]
            result["libp2p_tracemalloc_growth_total_kb"] = libp2p.get("growth_total_kb")
            result["libp2p_tracemalloc_top_growth"] = libp2p.get("top_growth", [])
        ok = (
            result["lost_work_items"] == 0
            and slope is not None
            and slope <= RSS_SLOPE_BOUND_MB_H
            and bool(fds)
            and max(fds) - min(fds) <= FD_FLAT_RANGE
        )
        result["meets_bounds"] = ok
        return result
    finally:
        for proc, _ in churn.values():
            leave(proc)
        for n in (a, b):
            n.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}", file=sys.stderr)


def fixed_warmup_minutes(minutes: float) -> float:
    """A sixth of the run, at most 10 minutes."""
    return min(10.0, minutes / 6)


def histories_full_minutes(datasets: int, publish_every_s: float) -> float:
    """When every dataset has had as many heads as the node's per-dataset histories keep: the
    owners take turns, each publishing to its ``datasets`` in turn every ``publish_every_s``."""
    from p2p.core.config import CoreConfig
    from p2p.trust import HEADS_PER_DATASET

    kept = max(HEADS_PER_DATASET, CoreConfig().history_per_dataset)
    return kept * 2 * datasets * publish_every_s / 60


def default_warmup_minutes(minutes: float, datasets: int, publish_every_s: float) -> float:
    """Until the per-dataset histories are full; at least the fixed sixth, at most half the run."""
    full = histories_full_minutes(datasets, publish_every_s)
    return min(max(fixed_warmup_minutes(minutes), full), minutes / 2)


def leave(proc: subprocess.Popen[bytes]) -> None:
    """A churn peer leaves: stdin closed (its way to stop), killed if it lingers."""
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _round(v: float | None) -> float | None:
    return round(v, 2) if v is not None else None


def _native_slopes(after: list[dict[str, Any]]) -> dict[str, Any]:
    """Slopes (MB/h) after warm-up of A's native allocators, and their first and last figures:
    what part of the daemon's RSS growth Arrow's pool and glibc's heap account for."""
    nat = [(s["t_s"], s["native"]) for s in after if s.get("native")]
    if not nat:
        return {}
    out: dict[str, Any] = {
        "native_after_warmup": nat[0][1],
        "native_end": nat[-1][1],
        "arrow_backend": (nat[-1][1].get("arrow") or {}).get("backend"),
    }
    for part, field in (("arrow", "allocated_mb"), ("glibc", "in_use_mb"), ("glibc", "arena_mb")):
        pts = [(t, n[part][field]) for t, n in nat if n.get(part)]
        out[f"{part}_{field}_slope_mb_per_h"] = _round(slope_per_hour(pts))
    return out


def _by_window(samples: list[dict[str, Any]], window_s: float) -> list[list[float]]:
    """``[t_s, state_db_mb]`` at the end of each keep window (after it, pruning bounds it)."""
    out: list[list[float]] = []
    mark = window_s
    for s in samples:
        if s["t_s"] >= mark:
            out.append([s["t_s"], s["state_db_mb"]])
            mark += window_s
    out.append([samples[-1]["t_s"], samples[-1]["state_db_mb"]])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--datasets", type=int, default=20, help="root datasets per owner")
    p.add_argument("--publish-every", type=float, default=2.0)
    p.add_argument("--warmup-minutes", type=float, default=None)
    p.add_argument("--settle-minutes", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=30)
    p.add_argument(
        "--daemon-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable of node A's environment only (repeatable)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory (homes, logs)")
    args = p.parse_args()
    if args.warmup_minutes is None:
        args.warmup_minutes = default_warmup_minutes(
            args.minutes, args.datasets, args.publish_every
        )
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["meets_bounds"] else 1)


if __name__ == "__main__":
    main()
