"""Network benchmark: how fast does a verifying network make a new head trusted everywhere?

On a private multi-host lab (``sim.netlab``: every host a network namespace on one bridge,
10.77.0.0/24, no uplink; the script re-executes itself under ``unshare -rn``) real ``odf-node
run`` daemons in open mode:

* one **owner** (host 1, also the bootstrap peer of every other node) with a root dataset
  ``cities`` and a DataFusion derivative ``big-cities``;
* ``--attesters`` (default 3) **verifying attesters**: ``[trust] policy = "verify-all"``, they
  replay every head of the derivative on DataFusion and gossip signed attestations;
* ``--light`` (default 4) **light subscribers**: ``[pipeline] replay = false`` and ``[trust]
  policy = "quorum"`` with ``k`` (default 3) of the attesters' node ids as
  ``trusted_attesters``: integrity checks only, trust by quorum, never an engine start.

Every node subscribes to the derivative over RPC; nobody is told where anyone is but the
owner's gossip address. Then the owner appends to ``cities`` and runs the derivative's
transform every ``--interval`` seconds (default 20) for ``--heads`` heads (default 10), and
finally commits one **forged** head (the real transform's output with one column overwritten,
as a malicious owner would; ``daemon_harness.forge_next_step``).

Measured from the daemons' own records (every host shares this machine's clock): the owner's
commit time of each head (wall clock when ``dataset.transform`` returned); per node, the
receive time of the k-th VERIFIED attestation of that head (``attestations.list``, own
included); per light node, the time of its ``head.trusted`` event; for the forged head, per
node, the time it was disputed (a ``head.distrusted`` event, or the node's own dispute; for
the owner the first dispute it received). Reported: p50 / p99 / max of owner commit -> k
attestations at every node and -> trusted at every light node, forged head -> disputed at
every node, and the number of forged heads trusted anywhere; the machine's load average.
Targets (issue 28): p99 commit -> trusted <= 60 s, forged disputed everywhere <= 60 s,
0 forged heads trusted.

Usage: .venv/bin/python tests/bench/bench_network.py [--heads 10] [--interval 20]
       [--attesters 3] [--light 4] [--k 3] [--json FILE]
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

from daemon_harness import BIG_CITIES_DF_SNAPSHOTS as SNAPSHOTS  # noqa: E402

OWNER_GOSSIP_PORT = 7375
"""The owner's fixed gossip port: every other node's only bootstrap peer."""


def _csv(i: int) -> str:
    """The i-th append to ``cities``: two rows, one of them kept by the derivative."""
    day = 1 + i
    return (
        "event_time,city,population\n"
        f"2020-01-{day:02d}T00:00:00Z,C{i}a,{1000 + i}\n"
        f"2020-01-{day:02d}T12:00:00Z,C{i}b,{i}\n"
    )


def _pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``xs`` by the nearest-rank method (p99 of 40 values = the max)."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 1)) - 1))
    return s[k]


def _summary(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {
        "n": len(xs),
        "p50": round(statistics.median(xs), 2),
        "p99": round(_pct(xs, 0.99), 2),
        "max": round(max(xs), 2),
    }


def _peer_id(home: Path) -> str:
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    from node.home import NodeHome

    seed = NodeHome(home).node_key().seed()
    return str(ID.from_pubkey(create_new_key_pair(seed).public_key))


def _node_id(home: Path) -> str:
    from node.home import NodeHome

    return NodeHome(home).node_key().dataset_id().as_did_key()


def _engine_running(node: Any) -> bool:
    """Whether an engine worker (DataFusion or Spark) runs under this daemon now (its process
    tree; the benchmark samples it after every head and while waiting, and engines stay up
    for ``[engine] idle_timeout_s`` = 600 s once started)."""
    from daemon_harness import _cmdline, descendants

    assert node.proc is not None
    for pid in descendants(node.proc.pid):
        cmd = _cmdline(pid)
        if b"engine.worker" in cmd or b"java" in cmd:
            return True
    return False


def run(args: argparse.Namespace) -> dict[str, Any]:
    from daemon_harness import forge_next_step
    from multihost import HostNode, lab_network, open_config, stop_all
    from netns import require_loopback_only

    from coordinator.transform.engines import DATAFUSION_VERSIONS
    from node.engine_client import EngineClient
    from node.engine_router import datafusion_python

    require_loopback_only()
    work = Path(tempfile.mkdtemp(prefix="bench-network-"))
    n_hosts = 1 + args.attesters + args.light
    result: dict[str, Any] = {
        "hosts": n_hosts,
        "attesters": args.attesters,
        "light": args.light,
        "k": args.k,
        "heads": args.heads,
        "interval_s": args.interval,
    }
    nodes: list[HostNode] = []
    with lab_network(n_hosts) as lab:
        try:
            owner = HostNode(lab, 1, work / "owner", "owner")
            owner.config.update(open_config(owner.address))
            owner.config["p2p"]["port"] = OWNER_GOSSIP_PORT
            owner.init()
            bootstrap = f"/ip4/{owner.address}/tcp/{OWNER_GOSSIP_PORT}/p2p/{_peer_id(owner.home)}"
            nodes.append(owner)
            attesters = []
            for i in range(args.attesters):
                n = HostNode(lab, 2 + i, work / f"att{i + 1}", f"att{i + 1}")
                n.config.update(open_config(n.address, [bootstrap]))
                n.init()
                attesters.append(n)
            trusted = [_node_id(a.home) for a in attesters]
            light = []
            for i in range(args.light):
                n = HostNode(lab, 2 + args.attesters + i, work / f"light{i + 1}", f"light{i + 1}")
                n.config.update(open_config(n.address, [bootstrap]))
                n.config["pipeline"] = {**n.config.get("pipeline", {}), "replay": False}
                n.config["trust"] = {
                    "policy": "quorum",
                    "k": args.k,
                    "trusted_attesters": trusted,
                }
                n.init()
                light.append(n)
            nodes += attesters + light
            t0 = time.monotonic()
            for n in nodes:
                n.launch()
            for n in nodes:
                n.wait_ready()
            result["start_s"] = round(time.monotonic() - t0, 1)

            created = owner.call("dataset.create", snapshot_yaml=SNAPSHOTS)
            der_id = {c["alias"]: c["id"] for c in created}["big-cities"]
            result["did"] = der_id
            for n in attesters + light:
                n.call("subscriptions.add", did=der_id)

            engines: set[str] = set()

            def sample_engines() -> None:
                engines.update(n.name for n in light if _engine_running(n))

            # Warm-up (not measured): the first head, until every attester attested it, so
            # that discovery, the first connections and the engines' first start are behind us.
            csv = work / "c0.csv"
            csv.write_text(_csv(0))
            owner.call("dataset.ingest", ref="cities", files=[str(csv)])
            warm = owner.call("dataset.transform", ref="big-cities")["new_head"]
            t0 = time.monotonic()
            for n in attesters:
                n.wait_for(
                    "the warm-up head's own attestation",
                    lambda n=n: any(
                        a["own"] and a["head"] == warm
                        for a in n.call("attestations.list", did=der_id, head=warm)
                    ),
                    timeout=600,
                    every=1.0,
                )
            result["warmup_s"] = round(time.monotonic() - t0, 1)
            print(f"warm-up head attested in {result['warmup_s']} s", file=sys.stderr)

            commits: dict[str, int] = {}
            heads: list[str] = []
            for i in range(1, args.heads + 1):
                started = time.monotonic()
                csv = work / f"c{i}.csv"
                csv.write_text(_csv(i))
                owner.call("dataset.ingest", ref="cities", files=[str(csv)])
                head = owner.call("dataset.transform", ref="big-cities")["new_head"]
                commits[head] = time.time_ns()
                heads.append(head)
                print(f"head {i}/{args.heads}: {head[:20]}…", file=sys.stderr, flush=True)
                sample_engines()
                time.sleep(max(0.0, args.interval - (time.monotonic() - started)))

            # The forged head: the real transform, one column overwritten, committed by the
            # owner's own key and published like any other head.
            csv = work / "forged.csv"
            csv.write_text(_csv(args.heads + 1))
            owner.call("dataset.ingest", ref="cities", files=[str(csv)])
            python = str(datafusion_python(DATAFUSION_VERSIONS[0]))
            with EngineClient(engine="datafusion", python=python, idle_timeout=0) as engine:
                forged = forge_next_step(owner.home, "big-cities", work / "forge", engine)
            owner.call("dataset.publish", ref="big-cities")
            forged_at = time.time_ns()
            print(f"forged head: {forged[:20]}…", file=sys.stderr, flush=True)

            last = heads[-1]

            def settled() -> bool:
                for n in attesters:
                    if not any(
                        d["own"] and d["block"] == forged
                        for d in n.call("disputes.list", did=der_id, limit=1000)
                    ):
                        return False
                for n in light:
                    trusted_heads = {
                        e["data"].get("head")
                        for e in n.call("node.events", kind="head.trusted", limit=1000)
                        if e["did"] == der_id
                    }
                    distrusted = {
                        e["data"].get("head")
                        for e in n.call("node.events", kind="head.distrusted", limit=1000)
                        if e["did"] == der_id
                    }
                    if last not in trusted_heads or forged not in distrusted:
                        return False
                return True

            deadline = time.monotonic() + args.wait
            while time.monotonic() < deadline and not settled():
                sample_engines()
                time.sleep(2.0)
            sample_engines()
            result["settled"] = settled()

            # ---- collect
            def kth_attestation_ns(n: HostNode, head: str) -> int | None:
                rows = n.call("attestations.list", did=der_id, head=head, limit=1000)
                ts = sorted(
                    {r["signer"]: r["at_ns"] for r in rows if r["verdict"] == "verified"}.values()
                )
                return ts[args.k - 1] if len(ts) >= args.k else None

            def event_ns(n: HostNode, kind: str, head: str) -> int | None:
                ts = [
                    e["at_ns"]
                    for e in n.call("node.events", kind=kind, limit=1000)
                    if e["did"] == der_id and e["data"].get("head") == head
                ]
                return min(ts) if ts else None

            att_lat: list[float] = []
            trust_lat: list[float] = []
            missing: list[str] = []
            per_head = []
            for h in heads:
                row: dict[str, Any] = {"head": h}
                a_h, t_h = [], []
                for n in nodes:
                    ns = kth_attestation_ns(n, h)
                    if ns is None:
                        missing.append(f"{n.name}: fewer than {args.k} attestations of {h}")
                    else:
                        a_h.append((ns - commits[h]) / 1e9)
                for n in light:
                    ns = event_ns(n, "head.trusted", h)
                    if ns is not None:
                        t_h.append((ns - commits[h]) / 1e9)
                row["attested_max_s"] = round(max(a_h), 2) if a_h else None
                row["trusted_max_s"] = round(max(t_h), 2) if t_h else None
                row["trusted_at"] = len(t_h)
                att_lat += a_h
                trust_lat += t_h
                per_head.append(row)
            # A light node may skip straight to a newer head (an older one is then never
            # trusted on its own): count it, do not hide it.
            result["per_head"] = per_head
            result["commit_to_k_attestations_s"] = _summary(att_lat)
            result["commit_to_trusted_light_s"] = _summary(trust_lat)
            result["trusted_pairs"] = f"{len(trust_lat)}/{len(heads) * len(light)}"

            disputed: dict[str, float | None] = {}
            forged_trusted = []
            for n in nodes:
                ns = event_ns(n, "head.distrusted", forged)
                own = [
                    d["at_ns"]
                    for d in n.call("disputes.list", did=der_id, limit=1000)
                    if d["block"] == forged and (d["own"] or n is owner)
                ]
                cands = [x for x in [ns, *own] if x is not None]
                disputed[n.name] = round((min(cands) - forged_at) / 1e9, 2) if cands else None
                if event_ns(n, "head.trusted", forged) is not None:
                    forged_trusted.append(n.name)
                if n in light:
                    sub = next(s for s in n.call("subscriptions.list") if s["did"] == der_id)
                    if sub.get("trusted_head") == forged:
                        forged_trusted.append(f"{n.name} (served)")
            result["forged_disputed_s"] = disputed
            vals = [v for v in disputed.values() if v is not None]
            result["forged_disputed_everywhere_s"] = max(vals) if len(vals) == len(nodes) else None
            result["forged_trusted"] = forged_trusted
            result["light_engine_started"] = sorted(engines)
            result["missing"] = missing[:20]
            result["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
        finally:
            stop_all(nodes)
            if args.keep:
                print(f"homes kept in {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)
    return result


def _table(r: dict[str, Any]) -> str:
    lines = [
        f"{r['hosts']} hosts: 1 owner, {r['attesters']} attesters, {r['light']} light "
        f"(quorum k={r['k']}); {r['heads']} heads every {r['interval_s']} s; "
        f"load {' '.join(r['loadavg'])}",
        "",
        "| figure | n | p50 s | p99 s | max s |",
        "|---|---|---|---|---|",
    ]
    for key, label in (
        ("commit_to_k_attestations_s", f"owner commit -> {r['k']} attestations, every node"),
        ("commit_to_trusted_light_s", "owner commit -> trusted, every light node"),
    ):
        s = r[key]
        lines.append(f"| {label} | {s['n']} | {s['p50']} | {s['p99']} | {s['max']} |")
    lines += [
        "",
        f"trusted (head, light node) pairs: {r['trusted_pairs']}",
        f"forged head -> disputed at every node: {r['forged_disputed_everywhere_s']} s "
        f"(per node: {r['forged_disputed_s']})",
        f"forged heads trusted anywhere: {len(r['forged_trusted'])} {r['forged_trusted']}",
        f"light nodes that started an engine: {r['light_engine_started']}",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--heads", type=int, default=10)
    p.add_argument("--interval", type=float, default=20.0)
    p.add_argument("--attesters", type=int, default=3)
    p.add_argument("--light", type=int, default=4)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--wait", type=float, default=300.0, help="give up after this many seconds")
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
    print(_table(r))
    ok = (
        r["commit_to_trusted_light_s"]["p99"] is not None
        and r["commit_to_trusted_light_s"]["p99"] <= 60
        and r["forged_disputed_everywhere_s"] is not None
        and r["forged_disputed_everywhere_s"] <= 60
        and not r["forged_trusted"]
        and not r["light_engine_started"]
    )
    print("targets met" if ok else "TARGETS NOT MET")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
