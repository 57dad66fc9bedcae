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

Usage: .venv/bin/python tests/bench/bench_nat.py [--rounds 3] [--json FILE]
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

BOOTSTRAP_PORT = 7375


def _peer_id(home: Path) -> str:
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    from node.home import NodeHome

    return str(ID.from_pubkey(create_new_key_pair(NodeHome(home).node_key().seed()).public_key))


def _reach(node: Any) -> dict[str, Any]:
    r: dict[str, Any] = node.call("node.status")["p2p"]["reachability"] or {}
    return r


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the lab, run the daemons, measure (module docstring)."""
    from daemon_harness import CITIES_SNAPSHOT
    from multihost import HostNode, open_config, stop_all

    from sim.netlab import Nat, NetLab

    derivative = CITIES_SNAPSHOT + (ROOT / "examples" / "big-cities-datafusion.yaml").read_text()
    work = Path(tempfile.mkdtemp(prefix="bench-nat-"))
    lab = NetLab(2, [Nat("eim"), Nat("symmetric")])
    lab.start()
    nodes: dict[str, Any] = {}
    out: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    try:
        boot = HostNode(lab, 1, work / "boot", "boot")
        boot.config.update(open_config(boot.address))
        boot.config["p2p"].update(port=BOOTSTRAP_PORT, relay_service=True)
        boot.config["ipfs"] = {"mode": "none"}
        boot.config["http"] = {"enabled": False}
        boot.init()
        nodes["boot"] = boot
        bootstrap = f"/ip4/{boot.address}/tcp/{BOOTSTRAP_PORT}/p2p/{_peer_id(work / 'boot')}"
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


def main() -> None:
    """Parse the arguments, arrange the loopback-only namespace, run, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, help="also write the result here")
    p.add_argument("--keep", action="store_true", help="keep the node homes (for debugging)")
    args = p.parse_args()
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    r = run(args)
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    print(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
