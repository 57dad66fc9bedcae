"""Cold verify benchmark: seconds from ``subscribe`` to ``verified`` on a fresh follower.

Issue 44's target: <= 30 s cold for a Spark derivative on a fresh node, <= 10 s warm, <= 5 s
cold for a DataFusion derivative. Inside a private loopback-only namespace (the script
re-executes itself under ``unshare -rn``) real daemons run with IPFS off (pulls over HTTP from
the owner's Simple Transfer Protocol server), connected only through their JSON-RPC APIs:

1. the owner creates ``cities`` (root), two Spark derivatives of it (``big-cities``,
   ``big-cities-2``) and a DataFusion one (``df-cities``), ingests and transforms each, and
   waits until every publication is done (once, before the rounds);
2. per round, a FRESH follower (new home, no engine started) connects to the owner and
   subscribes to ``big-cities`` by DID (``subscriptions.add``, heads come over gossip): the
   seconds until the subscription's verification is ``verified`` (polled over RPC every
   0.1 s) are **Spark cold**; then, its Spark worker up, it subscribes to ``big-cities-2``:
   **Spark warm**;
3. per round, another fresh follower subscribes to ``df-cities``: **DataFusion cold**.

Reported: the median (and every round) of each, the load average before and after each
measure, and the split of each measure read from the follower's event log (seconds from
``subscribe`` to the derivative's ``pull.ok``, ``verify.start`` and ``verify.verified``, and
the replay's own ``seconds``), plus when the follower's engine router reported a worker
running (polled from ``node.status``).

Usage: .venv/bin/python tests/bench/bench_cold_verify.py [--rounds 3] [--spark-master local[*]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

DERIVATIVE = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: {engine}
        query: |
          SELECT op, event_time, city, population * {factor} AS pop
          FROM cities WHERE population > 100
"""
DERIVATIVES = {
    "big-cities": ("spark", 2),
    "big-cities-2": ("spark", 3),
    "df-cities": ("datafusion", 2),
}
CSV = (
    "event_time,city,population\n"
    "2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,2000\n2020-01-03T00:00:00Z,C,30\n"
)


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def owner_publishes(owner: Any, work: Path) -> dict[str, str]:
    """Create, ingest and transform every dataset on ``owner``; wait for the publications.
    Returns the DIDs by alias."""
    from daemon_harness import CITIES_SNAPSHOT

    docs = [DERIVATIVE.format(name=n, engine=e, factor=f) for n, (e, f) in DERIVATIVES.items()]
    created = owner.call("dataset.create", snapshot_yaml=CITIES_SNAPSHOT + "---\n".join(docs))
    csv = work / "cities.csv"
    csv.write_text(CSV)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])
    for name in DERIVATIVES:
        assert owner.call("dataset.transform", ref=name)["up_to_date"] is False
    owner.wait_for(
        "publications",
        lambda: (
            not owner.call("work.list", state="pending")
            and not owner.call("work.list", state="claimed")
        ),
        timeout=300,
    )
    assert not owner.call("work.list", state="failed")
    return {c["alias"]: c["id"] for c in created}


def fresh_follower(work: Path, name: str, owner: Any, conf: dict[str, Any]) -> Any:
    """A new daemon on a new home, ready and connected to ``owner``'s gossip."""
    from daemon_harness import NodeProcess

    node = NodeProcess(work / name, name, config=conf)
    node.init()
    node.launch()
    node.wait_ready()
    node.call("peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0])
    return node


def time_to_verified(node: Any, did: str, timeout: float) -> dict[str, Any]:
    """Subscribe ``node`` to ``did`` and poll until its verification is ``verified``: the
    seconds, with the split read from the node's events."""
    load_before = loadavg()
    after_id = max((e["id"] for e in node.call("node.events", limit=1000)), default=0)
    running_before = bool(node.call("node.status")["engine"]["running"])
    t0 = time.monotonic()
    wall0 = time.time()
    node.call("subscriptions.add", did=did)
    engine_running_s = None
    outcome = None
    while time.monotonic() - t0 < timeout:
        rows = {s["did"]: s for s in node.call("subscriptions.list")}
        outcome = rows.get(did, {}).get("verification")
        if (
            engine_running_s is None
            and not running_before
            and node.call("node.status")["engine"]["running"]
        ):
            engine_running_s = round(time.monotonic() - t0, 2)
        if outcome in ("verified", "failed"):
            break
        time.sleep(0.1)
    seconds = round(time.monotonic() - t0, 2)
    if outcome != "verified":
        raise RuntimeError(f"{did}: {outcome!r} after {seconds} s\n{node.tail()}")
    split: dict[str, Any] = {"engine_running_at_s": engine_running_s}
    for e in node.call("node.events", after_id=after_id, limit=1000):
        if e.get("did") != did:
            continue
        at = _event_time(e)
        key = {"pull.ok": "pull_done_at_s", "verify.start": "verify_start_at_s"}.get(e["kind"])
        if e["kind"] == "verify.verified":
            key = "verified_event_at_s"
            split["replay_s"] = round(float(e["data"].get("seconds", 0.0)), 2)
        if key and at is not None and key not in split:
            split[key] = round(at - wall0, 2)
    return {"s": seconds, "load_before": load_before, "load_after": loadavg(), **split}


def _event_time(e: dict[str, Any]) -> float | None:
    """The event's wall time in seconds (the log's field is named per state version)."""
    for k in ("at_ns", "ts_ns", "time_ns", "created_ns"):
        if isinstance(e.get(k), int):
            return float(e[k]) / 1e9
    return None


def _stop(nodes: list[Any]) -> None:
    # All at once: a daemon's orderly stop may wait seconds.
    with ThreadPoolExecutor(max(1, len(nodes))) as pool:
        list(pool.map(lambda n: n.stop(), nodes))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from daemon_harness import NodeProcess
    from netns import require_loopback_only

    require_loopback_only()
    work = Path(tempfile.mkdtemp(prefix="odf-cold-verify-"))
    conf: dict[str, Any] = {
        "ipfs": {"mode": "none"},
        "engine": {"spark_master": args.spark_master, "idle_timeout_s": 600},
    }
    owner = NodeProcess(work / "owner", "owner", config=conf)
    rounds: list[dict[str, Any]] = []
    try:
        owner.init()
        owner.launch()
        owner.wait_ready()
        dids = owner_publishes(owner, work)
        for r in range(args.rounds):
            row: dict[str, Any] = {}
            spark = fresh_follower(work, f"spark{r}", owner, conf)
            try:
                row["spark_cold"] = time_to_verified(spark, dids["big-cities"], args.timeout)
                row["spark_warm"] = time_to_verified(spark, dids["big-cities-2"], args.timeout)
            finally:
                _stop([spark])
            df = fresh_follower(work, f"df{r}", owner, conf)
            try:
                row["datafusion_cold"] = time_to_verified(df, dids["df-cities"], args.timeout)
            finally:
                _stop([df])
            print(json.dumps({"round": r, **row}), file=sys.stderr, flush=True)
            rounds.append(row)
    finally:
        _stop([owner])
        shutil.rmtree(work, ignore_errors=True)
    medians = {
        k: statistics.median(r[k]["s"] for r in rounds)
        for k in ("spark_cold", "spark_warm", "datafusion_cold")
    }
    return {
        "spark_master": args.spark_master,
        "rounds": args.rounds,
        "median_s": medians,
        "targets_s": {"spark_cold": 30, "spark_warm": 10, "datafusion_cold": 5},
        "per_round": rounds,
        "loadavg_end": loadavg(),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--spark-master", default="local[*]", help="the followers' [engine] spark_master"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="give up on one measure after")
    args = p.parse_args()
    from p2p.netguard import non_loopback_interfaces

    # Already in a loopback-only namespace (``make bench-cold-verify``): run here.
    if non_loopback_interfaces() and os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
