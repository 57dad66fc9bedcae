"""Follow benchmark: how far behind a fast, honest owner does a subscriber fall?

Inside a private loopback-only namespace (the script re-executes itself under ``unshare -rn``)
two real daemons run with IPFS off (pulls over HTTP from the owner's Simple Transfer Protocol
server), connected only through their JSON-RPC APIs, as two users would run them:

1. the owner creates ``--datasets`` (default 200) root datasets with one ``dataset.create``;
2. the subscriber connects to the owner and follows every dataset (``subscriptions.add``);
3. the owner appends ``--appends`` (default 5) times to each dataset as fast as it can
   (``dataset.ingest`` over RPC from ``--writers`` threads), each append published as a signed head
   announcement by the owner's publish pipeline;
4. from the last append on, every second, the script counts subscriptions whose accepted head is
   the owner's head.

Reported: announcements offered (the owner's head count), time of the appends, subscriptions at
the owner's head 60 s after the last append, seconds until all were, the owner's score on the
subscriber (it must never fall for valid announcements), the subscriber's gossip outcomes by
reason (Prometheus counters) and its peak RSS. Target (issue "Daemon v2"): all at head within
60 s, owner score >= 0.

Usage: .venv/bin/python tests/bench/bench_follow.py [--datasets 200] [--appends 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
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


def metrics(node: Any, prefix: tuple[str, ...]) -> dict[str, float]:
    url = node.call("node.status")["http_url"]
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from daemon_harness import NodeProcess, node_rss_mb
    from netns import require_loopback_only

    require_loopback_only()
    work = Path(tempfile.mkdtemp(prefix="odf-follow-"))
    conf = {"ipfs": {"mode": "none"}}
    owner = NodeProcess(work / "owner", "owner", config=conf)
    sub = NodeProcess(work / "sub", "sub", config=conf)
    result: dict[str, Any] = {"datasets": args.datasets, "appends": args.appends}
    try:
        for n in (owner, sub):
            n.init()
            n.launch()
        for n in (owner, sub):
            n.wait_ready()
        yaml = "---\n".join(SNAPSHOT.format(name=f"ds{i}") for i in range(args.datasets))
        created = owner.call("dataset.create", snapshot_yaml=yaml)
        dids = [c["id"] for c in created]
        sub.call("peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0])
        for did in dids:
            sub.call("subscriptions.add", did=did)
        owner_peer = owner.call("node.status")["p2p"]["peer_id"]
        csv = work / "rows.csv"
        csv.write_text("city,population\nA,1\nB,2\n")

        def append(i: int) -> None:
            owner.call("dataset.ingest", ref=f"ds{i % args.datasets}", files=[str(csv)])

        t0 = time.monotonic()
        with ThreadPoolExecutor(args.writers) as pool:
            list(pool.map(append, range(args.datasets * args.appends)))
        t_last = time.monotonic()
        result["appends_s"] = round(t_last - t0, 1)
        heads = {r["id"]: r["head"] for r in owner.call("dataset.list")}
        assert sub.proc is not None
        peak_rss = 0.0
        at_head_60s = None
        all_at_head_s = None
        timeline: list[tuple[float, int]] = []
        while time.monotonic() - t_last < args.wait:
            rows = {s["did"]: s["accepted_head"] for s in sub.call("subscriptions.list")}
            n = sum(1 for d in dids if rows.get(d) == heads[d])
            elapsed = time.monotonic() - t_last
            timeline.append((round(elapsed, 1), n))
            peak_rss = max(peak_rss, node_rss_mb(sub.proc.pid)["total"])
            if at_head_60s is None and elapsed >= 60:
                at_head_60s = n
            if n == len(dids):
                all_at_head_s = round(elapsed, 1)
                at_head_60s = at_head_60s if at_head_60s is not None else n
                break
            time.sleep(1)
        scores = [p["score"] for p in sub.call("peers.list") if p["peer_id"] == owner_peer]
        result.update(
            {
                "at_head_after_60s": at_head_60s,
                "all_at_head_after_s": all_at_head_s,
                "timeline_every_10th": timeline[::10],
                "owner_score_on_subscriber": scores[0] if scores else None,
                "subscriber_outcomes": metrics(sub, ("odf_announcements_total", "odf_pulls_total")),
                "subscriber_peak_rss_mb": round(peak_rss, 1),
                "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            }
        )
        return result
    finally:
        for n in (owner, sub):
            n.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", type=int, default=200)
    p.add_argument("--appends", type=int, default=5)
    p.add_argument("--writers", type=int, default=4, help="owner RPC client threads")
    p.add_argument("--wait", type=float, default=600.0, help="give up after this many seconds")
    args = p.parse_args()
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
