"""NAT benchmark: owners behind NAT (no forwarding), reached through a relay (docs/nat.md).

On a private multi-host lab with NAT routers (``sim.netlab``; the script re-executes itself under
``unshare -rn``), real ``odf-node run`` daemons in open mode, no IPFS node: a public bootstrap
node with ``[p2p] relay_service = true`` (host 1), a public subscriber that knows only it
(host 2), an owner behind an endpoint-independent NAT (host 3) and one behind a symmetric NAT
(host 4), each with a root dataset and a DataFusion derivative.

Measured, per owner: daemon ready -> relay slot reserved; subscribe -> the derivative pulled
(``pull.ok``) and -> the subscriber's own VERIFIED attestation; the data path (the pull's URL);
then the relay (the bootstrap node) is restarted: relay stopped -> the owner says it is
unreachable, and relay ready -> the owner holds a slot again. ``--rounds`` repeats the
subscribe measurement with a new derivative head each round.

Then hole punching (DCUtR, :func:`punch`) in a second lab where the subscriber too is behind an
endpoint-independent NAT: per owner NAT kind, whether the relayed connection became direct and
how long that took, over ``--punch-trials`` fresh subscribers (median reported).

Usage: .venv/bin/python tests/bench/bench_nat.py [--rounds 3] [--punch-trials 3] [--punch-only]
[--json FILE] [--keep]
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _reach(node: Any) -> dict[str, Any]:
    r: dict[str, Any] = node.call("node.status")["p2p"]["reachability"] or {}
    return r


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the lab, run the daemons, measure (module docstring)."""
    from daemon_harness import CITIES_SNAPSHOT
    from multihost import HostNode, open_config, relay_bootstrap, stop_all

    from sim.netlab import Nat, NetLab

    derivative = CITIES_SNAPSHOT + (ROOT / "examples" / "big-cities-datafusion.yaml").read_text()
    work = Path(tempfile.mkdtemp(prefix="bench-nat-"))
    lab = NetLab(2, [Nat("eim"), Nat("symmetric")])
    lab.start()
    nodes: dict[str, Any] = {}
    out: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    try:
        boot, bootstrap = relay_bootstrap(lab, work / "boot")
        nodes["boot"] = boot
        for k, name in ((2, "sub"), (3, "eim"), (4, "symmetric")):
            n = HostNode(lab, k, work / name, name)
            n.config.update(open_config(n.address, [bootstrap]))
            n.config["p2p"]["reachability_interval_s"] = 5.0
            n.config["ipfs"] = {"mode": "none"}
            n.init()
            nodes[name] = n
        boot.launch()
        boot.wait_ready()
        for name in ("sub", "eim", "symmetric"):
            nodes[name].launch()
        ready: dict[str, float] = {}
        for name in ("sub", "eim", "symmetric"):
            nodes[name].wait_ready()
            ready[name] = time.monotonic()
        sub = nodes["sub"]
        reserved: dict[str, float] = {}
        while len(reserved) < 2 and time.monotonic() - ready["sub"] < 120:
            for name in ("eim", "symmetric"):
                if name not in reserved and _reach(nodes[name]).get("relayed_addrs"):
                    reserved[name] = round(time.monotonic() - ready[name], 1)
            time.sleep(0.2)
        for name in ("eim", "symmetric"):
            owner = nodes[name]
            r: dict[str, Any] = {"reserved_after_ready_s": reserved.get(name)}
            created = owner.call("dataset.create", snapshot_yaml=derivative)
            der = next(c["id"] for c in created if c["alias"] == "big-cities-df")
            pulled, verified, paths = [], [], set()
            for i in range(args.rounds):
                csv = work / f"{name}-{i}.csv"
                csv.write_text(
                    f"event_time,city,population\n2020-01-{i + 1:02d}T00:00:00Z,C{i},{1000 + i}\n"
                )
                owner.call("dataset.ingest", ref="cities", files=[str(csv)])
                head = owner.call("dataset.transform", ref="big-cities-df")["new_head"]
                t0, t0_ns = time.monotonic(), time.time_ns()
                if i == 0:
                    sub.call("subscriptions.add", did=der)
                sub.wait_for(
                    "the attestation",
                    lambda h=head, d=der: [
                        a
                        for a in sub.call("attestations.list", did=d)
                        if a["own"] and a["head"] == h and a["verdict"] == "verified"
                    ],
                    300,
                    0.2,
                )
                verified.append(time.monotonic() - t0)
                oks = [
                    e
                    for e in sub.call("node.events", kind="pull.ok", limit=1000)
                    if e["did"] == der and e["at_ns"] >= t0_ns
                ]
                pulled.append((oks[0]["at_ns"] - t0_ns) / 1e9 if oks else None)
                paths |= {e["data"]["url"].split("?", 1)[0].split("/did:", 1)[0] for e in oks}
            r["subscribe_or_commit_to_pulled_s"] = [round(x, 1) for x in pulled if x is not None]
            r["subscribe_or_commit_to_verified_s"] = [round(x, 1) for x in verified]
            r["verified_median_s"] = round(statistics.median(verified), 1)
            r["data_paths"] = sorted(paths)
            # The subscriber is public: the owner's hole punch ends in a plain direct dial to it
            # (whatever its NAT), and the connection kind says so.
            owner_peer = owner.call("node.status")["p2p"]["peer_id"]
            r["sub_connection_to_owner"] = sub.call("node.status")["p2p"]["connections"].get(
                owner_peer
            )
            r["owner_hole_punches"] = [
                {k: e["data"][k] for k in ("result", "reason", "since_relayed_s")}
                for e in owner.call("node.events", kind="p2p.hole_punch", limit=20)
            ]
            out[name] = r
        # The relay restarts.
        t0 = time.monotonic()
        boot.stop()
        for name in ("eim", "symmetric"):
            nodes[name].wait_for(
                "unreachable", lambda n=nodes[name]: _reach(n).get("unreachable"), 120, 0.2
            )
            out[name]["relay_stopped_to_unreachable_s"] = round(time.monotonic() - t0, 1)
        boot.launch()
        boot.wait_ready()
        t1 = time.monotonic()
        for name in ("eim", "symmetric"):
            nodes[name].wait_for(
                "a new reservation",
                lambda n=nodes[name]: _reach(n).get("relayed_addrs"),
                300,
                0.2,
            )
            out[name]["relay_ready_to_reserved_again_s"] = round(time.monotonic() - t1, 1)
        out["load_after"] = os.getloadavg()[0]
        return out
    finally:
        stop_all(list(nodes.values()))
        lab.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def punch(args: argparse.Namespace) -> dict[str, Any]:
    """Hole punching between two NATed nodes: a subscriber behind an endpoint-independent NAT
    and, per trial, a fresh subscriber home (a new peer, new flows) that subscribes to a root
    dataset of an owner behind another endpoint-independent NAT and of one behind a symmetric
    NAT, reached through the bootstrap node's relay. Per owner and trial: whether the owner's
    hole punch made the connection direct, the time from the relayed connection to the first
    outcome (``since_relayed_s``) and from subscribe to it, and subscribe -> first head
    pulled."""
    from daemon_harness import CITIES_SNAPSHOT
    from multihost import HostNode, open_config, relay_bootstrap, stop_all

    from sim.netlab import Nat, NetLab

    root = CITIES_SNAPSHOT.rstrip().removesuffix("---")
    work = Path(tempfile.mkdtemp(prefix="bench-punch-"))
    lab = NetLab(1, [Nat("eim"), Nat("eim"), Nat("symmetric")])
    lab.start()
    nodes: dict[str, Any] = {}
    out: dict[str, Any] = {"load_before": os.getloadavg()[0], "trials": []}
    try:
        boot, bootstrap = relay_bootstrap(lab, work / "boot")
        nodes["boot"] = boot

        def node(k: int, name: str) -> Any:
            n = HostNode(lab, k, work / name, name)
            n.config.update(open_config(n.address, [bootstrap]))
            n.config["p2p"]["reachability_interval_s"] = 5.0
            n.config["ipfs"] = {"mode": "none"}
            n.init()
            nodes[name] = n
            return n

        owners = {"eim": node(2, "owner-eim"), "symmetric": node(4, "owner-sym")}
        boot.launch()
        boot.wait_ready()
        for o in owners.values():
            o.launch()
        dids: dict[str, str] = {}
        for kind, o in owners.items():
            o.wait_ready()
            o.wait_for("a relay slot", lambda o=o: _reach(o).get("relayed_addrs"), 120, 0.2)
            (created,) = o.call("dataset.create", snapshot_yaml=root)
            csv = work / f"{kind}.csv"
            csv.write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n")
            o.call("dataset.ingest", ref="cities", files=[str(csv)])
            dids[kind] = created["id"]
        for t in range(args.punch_trials):
            sub = node(3, f"sub-{t}")
            sub.launch()
            sub.wait_ready()
            sub.wait_for("a relay slot", lambda s=sub: _reach(s).get("relayed_addrs"), 120, 0.2)
            sub_peer = sub.call("node.status")["p2p"]["peer_id"]
            t0 = time.monotonic()
            for did in dids.values():
                sub.call("subscriptions.add", did=did)
            trial: dict[str, Any] = {}
            pending = set(owners)
            deadline = t0 + 180
            while pending and time.monotonic() < deadline:
                listed = {d["id"]: d for d in sub.call("dataset.list")}
                for kind in list(pending):
                    r = trial.setdefault(kind, {})
                    if "pulled_s" not in r and listed.get(dids[kind], {}).get("head"):
                        r["pulled_s"] = round(time.monotonic() - t0, 1)
                    if "result" not in r:
                        ev = [
                            e["data"]
                            for e in owners[kind].call("node.events", kind="p2p.hole_punch")
                            if e["data"]["peer"] == sub_peer
                        ]
                        if ev:
                            first = ev[0]  # oldest first
                            r.update(
                                result=first["result"],
                                reason=first["reason"],
                                since_relayed_s=first["since_relayed_s"],
                                subscribe_to_outcome_s=round(time.monotonic() - t0, 1),
                            )
                    if "pulled_s" in r and "result" in r:
                        # The subscriber's status follows its host every 2 s: let it settle.
                        owner_peer = owners[kind].call("node.status")["p2p"]["peer_id"]
                        want = "direct" if r["result"] == "direct" else "relayed"
                        settle = time.monotonic() + 5
                        while True:
                            conns = sub.call("node.status")["p2p"]["connections"]
                            r["connection"] = conns.get(owner_peer)
                            if r["connection"] == want or time.monotonic() > settle:
                                break
                            time.sleep(0.2)
                        pending.discard(kind)
                time.sleep(0.2)
            out["trials"].append(trial)
            print(f"trial {t + 1}: {json.dumps(trial)}", file=sys.stderr, flush=True)
            sub.stop()
            del nodes[f"sub-{t}"]
        for kind in owners:
            rs = [tr.get(kind, {}) for tr in out["trials"]]
            times = [
                r["since_relayed_s"]
                for r in rs
                if r.get("result") == "direct" and r.get("since_relayed_s") is not None
            ]
            upgraded = [r.get("result") == "direct" for r in rs]
            out[kind] = {
                "upgraded": upgraded,
                "upgraded_n": f"{sum(upgraded)}/{len(upgraded)}",
                "connection_after": [r.get("connection") for r in rs],
                "relayed_to_direct_median_s": round(statistics.median(times), 2) if times else None,
                "relayed_to_outcome_s": [r.get("since_relayed_s") for r in rs],
                "subscribe_to_pulled_s": [r.get("pulled_s") for r in rs],
                "reasons": sorted({str(r.get("reason")) for r in rs}),
            }
        out["load_after"] = os.getloadavg()[0]
        return out
    finally:
        stop_all(list(nodes.values()))
        lab.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    """Parse the arguments, arrange the loopback-only namespace, run, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, help="also write the result here")
    p.add_argument(
        "--punch-trials", type=int, default=3, help="hole-punch trials (0: none; punch())"
    )
    p.add_argument("--punch-only", action="store_true", help="only the hole-punch trials")
    p.add_argument("--keep", action="store_true", help="keep the node homes (for debugging)")
    args = p.parse_args()
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    r = {} if args.punch_only else run(args)
    if args.punch_trials:
        r["hole_punching"] = punch(args)
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    print(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
