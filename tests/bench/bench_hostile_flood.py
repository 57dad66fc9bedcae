"""Benchmark: issue 39's acceptance shape on real daemons, with figures.

The shape of ``tests/integration/test_hostile_dispute_flood.py``: inside a private loopback-only
namespace (the script re-executes itself under ``unshare -rn``) an owner daemon publishes a
DataFusion derivative, a light daemon (``quorum``, k = 2 of A, B, C, no replay) trusts its
honest head (A and B attest it), the owner forges the next step, and eight libp2p hosts in a
child process (``tests/dispute_flood.py``) send 2,000 disputes from fresh keys, 40 strangers'
key rotations, C's dispute of the forged head and the colluders A's and B's attestations of it,
each host just under the core's per-peer rate. Run once per ``[storage]`` setting of
``--caps``: ``default`` (evidence_per_dataset 2,048: all 2,000 kept) and ``small``
(evidence_per_dataset 250, key_records_max 16, as the test).

Printed per run: messages sent and seconds, disputes the light node's core accepted (its
``/metrics``) and their rate, ``node.status`` p50/p99/max (timed every 100 ms during the flood)
with how many times the daemon's event loop ran late, or a GC pause took, over 100 ms,
whether the forged head was ever trusted (sampled every 500 ms, and ``head.trusted`` events),
whether C's dispute holds after a restart, strangers' disputes and key rotations kept, and
``state.db`` bytes before and after (used pages, read through the WAL; and the file after the
restart's checkpoint). About 70 s a run.

Then (``--storm DISPUTES,ROTATIONS``, default 1100,400; on the default caps) a rotation storm:
the honest head disputed by 1,100 fresh keys, then 400 of those keys rotate (each rotation makes
the light node rebuild the dataset's policy from its stored evidence), then C disputes the
head. Printed: how long after the storm was sent C's dispute was stored (it waits behind the
rebuilds in the queue of gossip decisions), the rotations taken by then, and ``node.status``
meanwhile.

Usage: .venv/bin/python tests/bench/bench_hostile_flood.py [--caps default,small] [--storm D,R]
       [--policy quorum|reputation]   (``--caps ''``: the storm alone)
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import dispute_flood as flood  # noqa: E402
from daemon_harness import BIG_CITIES_DF_SNAPSHOTS, NodeProcess, forge_next_step  # noqa: E402

CAPS: dict[str, dict[str, int]] = {
    "default": {},
    "small": {"evidence_per_dataset": 250, "key_records_max": 16},
}
BASE: dict[str, dict[str, Any]] = {"ipfs": {"mode": "none"}, "p2p": {"discovery": False}}
SNAPSHOTS = BIG_CITIES_DF_SNAPSHOTS
CSV1 = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n"
CSV2 = "event_time,city,population\n2020-01-03T00:00:00Z,C,3000\n"


def _row(node: NodeProcess, did: str) -> dict[str, Any]:
    return dict(next(r for r in node.call("subscriptions.list") if r["did"] == did))


def _metrics(node: NodeProcess) -> dict[str, float]:
    """The counters of the node's ``/metrics`` this benchmark reads: disputes its core accepted,
    and how many times its event loop ran late, or a GC pause took, over 100 ms."""
    with urllib.request.urlopen(f"{node.call('node.status')['http_url']}/metrics", timeout=10) as r:
        text = r.read().decode()

    def total(name: str, label: str = "") -> float:
        """The sum of the samples of ``name`` (any labels; those holding ``label``)."""
        return sum(
            float(m.group(2))
            for m in re.finditer("^" + name + r"(\{[^}]*\})? (\S+)$", text, re.M)
            if label in (m.group(1) or "")
        )

    out = {"disputes": total("odf_announcements_total", 'outcome="dispute",reason=""')}
    for name in ("odf_event_loop_lag_seconds", "odf_gc_pause_seconds"):
        out[name] = total(name + "_count") - total(name + "_bucket", 'le="0.1"')
    return out


def _db(node: NodeProcess) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{node.home / 'state.db'}?mode=ro", uri=True)
    try:

        def one(q: str) -> int:
            return int(conn.execute(q).fetchone()[0] or 0)

        return {
            "used": (one("PRAGMA page_count") - one("PRAGMA freelist_count"))
            * one("PRAGMA page_size"),
            "disputes": one("SELECT count(*) FROM disputes WHERE own = 0 AND kept = 0"),
            "rotations": one("SELECT count(*) FROM key_rotations WHERE kept = 0"),
        }
    finally:
        conn.close()


def _file_bytes(node: NodeProcess) -> int:
    return sum(
        p.stat().st_size for p in (node.home / "state.db", node.home / "state.db-wal") if p.exists()
    )


POLICIES: dict[str, dict[str, Any]] = {
    "quorum": {"policy": "quorum", "k": 2},
    # Every stranger counts with the base weight: each stranger's key record can move it.
    "reputation": {"policy": "reputation", "p": 0.0, "base_weight": 0.2, "threshold": 3.0},
}


def _nodes(
    work: Path, storage: dict[str, int], policy: str = "quorum"
) -> tuple[NodeProcess, NodeProcess]:
    """The owner and the light node (``--policy``: quorum, k = 2 of A, B, C, or reputation
    over them; no replay), initialised."""
    owner = NodeProcess(work / "owner", "owner", config=BASE)
    light = NodeProcess(
        work / "light",
        "light",
        config={
            **BASE,
            "pipeline": {"replay": False},
            "storage": dict(storage),
            "trust": {
                **POLICIES[policy],
                "trusted_attesters": [
                    k.dataset_id().as_did_key() for k in (flood.A, flood.B, flood.C)
                ],
            },
        },
    )
    owner.init()
    light.init()
    return owner, light


def _sampled(light: NodeProcess, body: Any) -> tuple[Any, list[float]]:
    """``body()``'s result and the sorted latencies of ``node.status`` every 100 ms meanwhile."""
    latencies: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            t = time.perf_counter()
            light.call("node.status", timeout=60)
            latencies.append(time.perf_counter() - t)
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out = body()
    finally:
        done.set()
        sampler.join(90)
    return out, sorted(latencies)


def run_storm(work: Path, disputes: int, rotations: int, policy: str) -> dict[str, Any]:
    """The rotation storm (default caps): ``disputes`` disputes of the followed head by fresh
    keys, a key rotation by each of the first ``rotations`` of those keys, then C's
    dispute; how long the light node took to store C's dispute after the storm was sent, the
    rotations it had taken by then, and ``node.status`` meanwhile."""
    owner, light = _nodes(work, {}, policy)
    try:
        for n in (owner, light):
            n.launch()
        for n in (owner, light):
            n.wait_ready(120)
        csv = work / "1.csv"
        csv.write_text(CSV1)
        dids, honest = owner.create_and_transform(SNAPSHOTS, csv)
        did = dids["big-cities"]
        light.call("peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0])
        light.call("subscriptions.add", did=did)
        light.wait_for("the head", lambda: _row(light, did)["accepted_head"] == honest, 120)
        addr = light.call("node.status")["p2p"]["listen_addrs"][0]
        c_id = flood.C.dataset_id().as_did_key()

        def body() -> tuple[dict[str, Any], float | None, int]:
            sent = flood.run(addr, did, honest, storm_of=f"{disputes},{rotations}")
            end = time.monotonic()
            while time.monotonic() - end < 300:
                stored = light.call("disputes.list", did=did, limit=1000)
                if any(x["signer"] == c_id for x in stored):
                    taken = len(light.call("node.events", kind="node.key_rotated", limit=1000))
                    return sent, time.monotonic() - end, taken
                time.sleep(0.5)
            return sent, None, len(light.call("node.events", kind="node.key_rotated", limit=1000))

        (sent, c_after_s, taken), latencies = _sampled(light, body)
        return {
            "sent": sent["messages"],
            "flood_s": round(sent["took_s"], 1),
            "c_stored_after_s": None if c_after_s is None else round(c_after_s, 1),
            "rotations_taken": taken,
            "status_p50_ms": round(1000 * latencies[len(latencies) // 2]),
            "status_p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))]),
            "status_max_ms": round(1000 * latencies[-1]),
            "status_over_250ms": sum(x > 0.25 for x in latencies),
        }
    finally:
        for n in (owner, light):
            n.stop()


def run(name: str, work: Path) -> dict[str, Any]:
    """One run of the shape with the ``[storage]`` caps ``CAPS[name]``; its figures."""
    owner, light = _nodes(work, CAPS[name])
    try:
        for n in (owner, light):
            n.launch()
        for n in (owner, light):
            n.wait_ready(120)
        csv = work / "1.csv"
        csv.write_text(CSV1)
        dids, honest = owner.create_and_transform(SNAPSHOTS, csv)
        did = dids["big-cities"]
        light.call("peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0])
        light.call("subscriptions.add", did=did)
        light.wait_for("the head", lambda: _row(light, did)["accepted_head"] == honest, 120)
        addr = light.call("node.status")["p2p"]["listen_addrs"][0]
        flood.run(addr, did, honest, attest_only=True)
        light.wait_for("trusted", lambda: _row(light, did)["trusted_head"] == honest, 60)
        csv2 = work / "2.csv"
        csv2.write_text(CSV2)
        owner.call("dataset.ingest", ref="cities", files=[str(csv2)])
        from coordinator.transform.engines import DATAFUSION_VERSIONS
        from node.engine_client import EngineClient
        from node.engine_router import datafusion_python

        python = str(datafusion_python(DATAFUSION_VERSIONS[0]))
        with EngineClient(engine="datafusion", python=python, idle_timeout=0) as engine:
            forged = forge_next_step(owner.home, "big-cities", work / "forge", engine)
        owner.call("dataset.publish", ref="big-cities")
        light.wait_for("forged", lambda: _row(light, did)["accepted_head"] == forged, 120)

        before, file_before, metrics_before = _db(light), _file_bytes(light), _metrics(light)
        latencies: list[float] = []
        trusted_seen: set[str | None] = set()
        done = threading.Event()

        def sample() -> None:
            n = 0
            while not done.is_set():
                t = time.perf_counter()
                light.call("node.status", timeout=30)
                latencies.append(time.perf_counter() - t)
                n += 1
                if n % 5 == 0:
                    trusted_seen.add(_row(light, did)["trusted_head"])
                done.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            sent = flood.run(addr, did, forged)
        finally:
            done.set()
            sampler.join(60)
        time.sleep(5)  # the last writes
        metrics = {k: int(v - metrics_before[k]) for k, v in _metrics(light).items()}
        taken = metrics["disputes"]
        after = _db(light)
        c_id = flood.C.dataset_id().as_did_key()
        light.stop()
        light.launch()
        light.wait_ready(120)
        row = _row(light, did)
        trusted_events = [
            e["data"]["head"]
            for e in light.call("node.events", kind="head.trusted", limit=1000)
            if e["did"] == did
        ]
        latencies.sort()
        return {
            "caps": name,
            "sent": sent["messages"],
            "flood_s": round(sent["took_s"], 1),
            "disputes_taken": taken,
            "taken_per_s": round(taken / sent["took_s"]),
            "status_samples": len(latencies),
            "status_p50_ms": round(1000 * latencies[len(latencies) // 2]),
            "status_p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))]),
            "status_max_ms": round(1000 * latencies[-1]),
            "loop_late_100ms": metrics["odf_event_loop_lag_seconds"],
            "gc_over_100ms": metrics["odf_gc_pause_seconds"],
            "forged_ever_trusted": forged in trusted_seen or forged in trusted_events,
            "disputed_by_C_after_restart": row["trusted_head"] == honest
            and c_id in ((row["trust"] or {}).get("disputed_by") or ()),
            "strangers_disputes_kept": after["disputes"],
            "strangers_rotations_kept": after["rotations"],
            "db_used_before": before["used"],
            "db_used_after": after["used"],
            "db_file_before": file_before,
            "db_file_after_restart": _file_bytes(light),
        }
    finally:
        for n in (owner, light):
            n.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--caps", default="default,small", help="comma list of: default, small")
    p.add_argument(
        "--storm",
        default="1100,400",
        help="DISPUTES,ROTATIONS of the rotation storm (default 1100,400); empty: none",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory (daemon logs)")
    p.add_argument(
        "--policy",
        default="quorum",
        choices=sorted(POLICIES),
        help="the light node's [trust] policy in the storm (reputation: every stranger counts;"
        " the --caps runs need a quorum to trust the honest head and keep it)",
    )
    args = p.parse_args()
    if os.environ.get("ODF_HOSTILE_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_HOSTILE_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    work = Path(tempfile.mkdtemp(prefix="bench-hostile-flood-"))
    failed = False
    try:
        for name in filter(None, args.caps.split(",")):
            r = run(name, work / name)
            print(
                f"caps={r['caps']}: {r['sent']} messages in {r['flood_s']} s;"
                f" disputes accepted {r['disputes_taken']} ({r['taken_per_s']}/s);"
                f" node.status {r['status_samples']} samples p50 {r['status_p50_ms']} ms"
                f" p99 {r['status_p99_ms']} ms max {r['status_max_ms']} ms"
                f" (event loop late > 100 ms {r['loop_late_100ms']}x,"
                f" GC pauses > 100 ms {r['gc_over_100ms']}x);"
                f" forged head ever trusted: {r['forged_ever_trusted']};"
                f" disputed by C after a restart: {r['disputed_by_C_after_restart']}"
            )
            print(
                f"  state.db used {r['db_used_before']:,} -> {r['db_used_after']:,} B"
                f" (+{r['db_used_after'] - r['db_used_before']:,});"
                f" file {r['db_file_before']:,} -> {r['db_file_after_restart']:,} B after restart;"
                f" strangers' disputes kept {r['strangers_disputes_kept']},"
                f" rotations kept {r['strangers_rotations_kept']}",
                flush=True,
            )
            failed |= r["forged_ever_trusted"] or not r["disputed_by_C_after_restart"]
        if args.storm:
            d, n = (int(x) for x in args.storm.split(","))
            r = run_storm(work / "storm", d, n, args.policy)
            print(
                f"policy {args.policy}: rotation storm: {d} disputes of the followed head by"
                f" fresh keys, then {n} of"
                f" those keys rotate, then C disputes it: {r['sent']} messages in {r['flood_s']} s;"
                f" C's dispute stored {r['c_stored_after_s']} s after the storm was sent"
                f" ({r['rotations_taken']} rotations taken by then); node.status"
                f" p50 {r['status_p50_ms']} ms p99 {r['status_p99_ms']} ms max {r['status_max_ms']}"
                f" ms, {r['status_over_250ms']} samples over 250 ms",
                flush=True,
            )
    finally:
        if args.keep:
            print(f"work directory: {work}")
        else:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
