"""Calibration benchmark (issue 43, item 5): the ``internet`` scenario at lab size, on real daemons
and in the simulator, and how far apart the two are.

Per seed (``--seeds``, default 5):

1. **The plan.** ``sim.internet.lab_plan`` draws the network a ``calibration`` run of the
   ``internet`` scenario simulates for that seed (``--nodes`` nodes, default 24): node 0 the
   public relay and everyone's bootstrap peer (``[p2p] relay_service``), which nodes are behind
   NAT (``--nat``) and light (``--light``), the owner, who follows what, and which attesters each
   light node trusts. The lab builds exactly that network.
2. **The lab.** A private multi-host lab (``sim.netlab``; the script re-executes itself under
   ``unshare -rn``): the public nodes on public hosts, the NAT'd ones behind two NAT routers
   (half endpoint-independent, half symmetric), every node a real ``odf-node run`` daemon in
   open mode knowing only the relay, no IPFS node, the DHT on (light and NAT'd nodes ask but do
   not serve it, as in the simulator). The owner creates ``cities`` and the DataFusion
   derivative ``big-cities`` and commits a first head; the full followers (``verify-all``)
   subscribe and replay it; then each light node (``[pipeline] replay = false``, ``[trust]
   policy = "quorum"``, ``k`` of its planned attesters) subscribes, one every
   ``--subscribe-gap`` seconds (so each discovery runs alone; the simulator starts its
   subscriptions at the same offsets), and the owner commits
   ``--heads`` heads every ``--interval`` seconds. From the daemons' own records (``node.events``
   and ``attestations.list``; all hosts share one clock):

   * **discovery**: a light node's ``subscribe`` event -> its first ``head.accepted`` of the
     dataset (the first head received, as the simulator's calibration discovery is defined);
   * **publish -> trusted**: the owner's commit (``dataset.transform`` returned) -> each light
     node's ``head.trusted`` event of that head;
   * **the timings the simulator takes**: link round trip between lab hosts, public and through
     a NAT router (TCP connects from a lab host to the relay's gossip port); a probe on a lab
     host (:func:`_probe`: a fresh py-libp2p host dials the relay, asks it over
     ``/odf/providers/1.0.0``, dials a NAT'd node through it): exchange and dial costs;
     attestation gossip (signer's attestation -> received at a light node), turned into
     processing per mesh hop by the simulator's own mesh model; the heads' pulls (commit ->
     ``pull.ok`` less that delivery, light nodes and full followers apart); the light nodes'
     first pull, during their subscription (each one's ``odf_pull_seconds`` histogram read
     from its ``/metrics`` once it holds the first head: the only pull it made); verify at
     the full followers (``pull.ok`` -> their own VERIFIED attestation), median and
     log-normal spread; and the daemons' configured discovery interval and commit interval.

   A (head, light node) pair counts as trusted if its ``head.trusted`` came before the end of
   the wait; for each pair that did not, the light node's events naming the head and the
   attestations it received say why (never received, not accepted, short of ``k``, quorum
   only after a newer head was accepted: the daemon then logs no ``head.trusted`` for the
   older head).

   The relay's limits are raised so that it is not a bottleneck the simulator's relay never is
   (its defaults refuse a fifth reservation from one IP, and a NAT router fronts up to 7 hosts).

3. **The simulator**: ``simulate_internet`` of the same plan (same seed) with those measured
   parameters and the daemon's connection timers read from its code (peer snapshot, service
   tick, catch-up delay); its discovery and publish -> trusted samples, the latter counted
   like the lab's: within the window the lab gave each head, superseded heads left out. Its
   discovery p50 and p99 are the medians over :data:`DISCOVERY_REPLICATES` replicates of
   each replicate's percentile over the 14 subscriptions (the lab's are its one run's); the
   single replicate's are printed beside them.

Printed: per metric (discovery p50/p99, publish -> trusted p50/p99) the lab's and the
simulator's figure (mean over seeds and a 95 % t-interval) and the calibration error
|sim - lab| / lab per seed (mean and interval); the machine's load. ``--json FILE`` writes it all.

Usage: .venv/bin/python tests/bench/bench_calibration.py [--seeds 5] [--nodes 24] [--nat 14]
       [--light 14] [--heads 3] [--interval 60] [--subscribe-gap 8] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
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

MESH_DEGREE = 6
"""The simulator's mesh degree (GossipSub's D, as the daemons run it)."""

DISCOVERY_REPLICATES = 201
"""Replicates of the simulated light subscriptions per seed: the simulator's discovery p50 and
p99 are the medians over them of each replicate's 14-sample percentile (the lab's stay its one
run's; a p99 over 14 samples is their largest, as noisy on one side as on the other)."""

TRUST_REPLICATES = 201
"""Replicates of the simulated publish -> trusted per seed, for the same reason: the
simulator's p50 and p99 are the medians over them of each replicate's percentile over the
pairs trusted within the lab's windows (a p99 over 42 pairs is one of their largest)."""

_RTT_PROBE = """
import socket, statistics, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
xs = []
for _ in range(n):
    t = time.perf_counter()
    s = socket.create_connection((host, port), timeout=5)
    xs.append(time.perf_counter() - t)
    s.close()
    time.sleep(0.05)
print(statistics.median(xs) * 1000)
"""
"""Median TCP connect time (one round trip: SYN, SYN-ACK) from a lab host, in ms."""


async def _probe(listen: str, targets: list[str], did: str, n: int) -> dict[str, Any]:
    """On a lab host: a fresh py-libp2p host (the daemons' own transport) dials each target
    (the first connection to it: Noise and yamux over TCP, or a circuit through the relay) and
    asks it ``n`` times for the carriers of ``did`` over ``/odf/providers/1.0.0`` (the one-hop
    exchange); milliseconds of each."""
    from coordinator.identity import DatasetId
    from p2p.discovery import PROVIDERS_PROTOCOL, encode_providers_request
    from p2p.libp2p_host import Libp2pConfig
    from p2p.libp2p_process import Libp2pProcessTransport

    tr = Libp2pProcessTransport(
        Libp2pConfig(
            node_seed=os.urandom(32),
            listen_host=listen,
            loopback_only=False,
            nat=any("/p2p-circuit/" in a for a in targets),  # a relayed dial needs it
        )
    )
    await tr.start()
    out: dict[str, Any] = {"dial_ms": [], "request_ms": []}
    try:
        data = encode_providers_request([DatasetId.parse(did)])
        for addr in targets:
            t = time.perf_counter()
            peer = await tr.connect(addr)
            out["dial_ms"].append((time.perf_counter() - t) * 1000)
            for _ in range(n):
                t = time.perf_counter()
                await tr.request(peer, PROVIDERS_PROTOCOL, data, 10.0)
                out["request_ms"].append((time.perf_counter() - t) * 1000)
                time.sleep(0.05)
    finally:
        await tr.stop()
    return out


_METRICS_PROBE = """
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1].rstrip("/") + "/metrics", timeout=20) as r:
    sys.stdout.write(r.read().decode())
"""
"""The Prometheus text of a daemon's ``/metrics`` (run on the daemon's own lab host: its HTTP
listener is on that host's address, behind NAT for a NAT'd node)."""


def _histogram(text: str, name: str) -> tuple[float, float]:
    """(sum, count) of the Prometheus histogram ``name`` in a ``/metrics`` text."""
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(f"{name}_sum "):
            total = float(line.split()[1])
        elif line.startswith(f"{name}_count "):
            count = float(line.split()[1])
    return total, count


def _csv(i: int) -> str:
    """The i-th append to ``cities``: two rows, one kept by the derivative."""
    day = 1 + i
    return (
        "event_time,city,population\n"
        f"2020-01-{day:02d}T00:00:00Z,C{i}a,{1000 + i}\n"
        f"2020-01-{day:02d}T12:00:00Z,C{i}b,{i}\n"
    )


def _pct(xs: list[float], q: float) -> float | None:
    """The q-quantile by the nearest-rank method (the simulator's ``_pct``, unrounded)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _lognormal(xs: list[float]) -> tuple[float, float]:
    """Median and log-normal sigma of positive samples."""
    pos = [x for x in xs if x > 0]
    if not pos:
        return 0.0, 0.5
    logs = [math.log(x) for x in pos]
    return statistics.median(pos), statistics.pstdev(logs) if len(logs) > 1 else 0.0


def connection_timers() -> dict[str, float]:
    """The daemon's timers between a new connection and its core asking the peer for heads,
    read from the code the daemons run (none is configured otherwise): the libp2p thread's
    peer snapshot interval, the service's tick, and a subscription's catch-up delay."""
    import inspect

    from p2p.libp2p_host import Libp2pConfig
    from p2p.service import GossipService

    svc = inspect.signature(GossipService.__init__).parameters
    watch: Any = {f.name: f.default for f in dataclasses.fields(Libp2pConfig)}
    return {
        "peer_watch_interval_s": float(watch["peer_watch_interval_s"]),
        "tick_interval_s": float(svc["tick_interval_s"].default),
        "catch_up_delay_s": float(svc["catch_up_delay_s"].default),
    }


def base_params(args: argparse.Namespace, seed: int) -> Any:
    """The calibration run's parameters before the lab's measurements: the lab's size and
    roles, one dataset, nobody malicious, no churn, no gone DHT servers."""
    from sim.internet import InternetParams

    return InternetParams(
        nodes=args.nodes,
        datasets=1,
        follows=1,
        calibration=True,
        nat_nodes=args.nat,
        light_nodes=args.light,
        heads=args.heads,
        malicious_fraction=0.0,
        unresponsive=0.0,
        churn_per_hour=0.0,
        trusted_attesters=args.trusted,
        quorum_k=args.k,
        mesh_degree=MESH_DEGREE,
        seed=seed,
    )


def _node_id(home: Path) -> str:
    from node.home import NodeHome

    did: str = NodeHome(home).node_key().dataset_id().as_did_key()
    return did


def _all_events(node: Any, kind: str | None = None) -> list[dict[str, Any]]:
    """A daemon's whole event log (of ``kind``), oldest first, paged (``node.events`` returns
    at most 1,000 per call)."""
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        params: dict[str, Any] = {"after_id": after, "limit": 1000}
        if kind is not None:
            params["kind"] = kind
        page = node.call("node.events", **params)
        out += page
        if len(page) < 1000:
            return out
        after = page[-1]["id"]


def _why_not_trusted(
    nodes: dict[int, Any], i: int, k: int, head: str, did: str, plan: Any, quorum: int
) -> dict[str, Any]:
    """Why light node ``i`` logged no ``head.trusted`` for head ``k`` (``head``) in the wait:
    its events naming the head (the last one), whether it pulled and accepted it, how many of
    its trusted attesters' VERIFIED attestations of it arrived (and when the ``quorum``-th),
    and whether a newer head was accepted first (the daemon then logs no ``head.trusted`` for
    the older one: node/app/trust.py ``_record_event``)."""
    events = [e for e in _all_events(nodes[i]) if e["did"] == did]
    named = [
        e
        for e in events
        if e["data"].get("head") == head or f"head={head}" in str(e["data"].get("url", ""))
    ]
    trusted_ids = {_node_id(nodes[j].home) for j in plan.trusted[(i, 0)]}
    rows = nodes[i].call("attestations.list", did=did, head=head, limit=1000)
    arrived = sorted(
        a["at_ns"]
        for a in rows
        if not a["own"] and a["signer"] in trusted_ids and a["verdict"] == "verified"
    )
    accepted = [e["at_ns"] for e in named if e["kind"] == "head.accepted"]
    quorum_at = arrived[quorum - 1] if len(arrived) >= quorum else None
    newer = [
        e["at_ns"]
        for e in events
        if e["kind"] == "head.accepted"
        and accepted
        and e["at_ns"] > min(accepted)
        and e["data"].get("head") != head
    ]
    if not named:
        why = "never received"
    elif not accepted:
        why = "received, not accepted"
    elif quorum_at is None:
        why = f"accepted, {len(arrived)} of {quorum} attestations"
    elif newer and min(newer) < max(min(accepted), quorum_at):
        why = "quorum after a newer head was accepted"
    else:
        why = "trusted after the wait"
    last = named[-1] if named else None
    return {
        "node": i,
        "head": k,
        "why": why,
        "attestations": len(arrived),
        "last_event": last["kind"] if last else None,
        "events": [e["kind"] for e in named],
    }


def lab_run(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Build the plan's network on the lab, run it, measure (module docstring)."""
    from multihost import HostNode, open_config, relay_bootstrap, stop_all
    from netns import require_loopback_only

    from node.rpc.client import RpcCallError
    from sim.internet import lab_plan
    from sim.netlab import Nat, NetLab

    require_loopback_only()
    plan = lab_plan(base_params(args, seed))
    n = args.nodes
    public = [i for i in range(n) if not plan.nat[i]]
    natted = [i for i in range(n) if plan.nat[i]]
    assert public[0] == 0, "node 0 is the public relay"
    eim, sym = natted[: (len(natted) + 1) // 2], natted[(len(natted) + 1) // 2 :]
    host: dict[int, int] = {i: k + 1 for k, i in enumerate(public)}
    for k, i in enumerate(eim + sym):
        host[i] = len(public) + 1 + k
    nats = [Nat("eim", hosts=len(eim))] if eim else []
    nats += [Nat("symmetric", hosts=len(sym))] if sym else []
    owner_i = plan.owner[0]
    light = [i for i in range(n) if plan.light[i]]
    full = [i for i in range(n) if i not in (0, owner_i) and not plan.light[i]]
    work = Path(tempfile.mkdtemp(prefix="bench-calibration-"))
    out: dict[str, Any] = {
        "seed": seed,
        "daemons": n,
        "public": len(public),
        "nat_eim": len(eim),
        "nat_symmetric": len(sym),
        "owner": owner_i,
        "owner_nat": plan.nat[owner_i],
        "full": len(full),
        "light": len(light),
        "load_before": os.getloadavg(),
    }
    lab = NetLab(len(public), nats)
    lab.start()
    nodes: dict[int, HostNode] = {}
    t_start = time.monotonic()
    try:
        relay, bootstrap = relay_bootstrap(lab, work / "relay", k=host[0])
        # The simulator's relay has no limits: the lab's must not be the bottleneck either
        # (its defaults: 4 reservations per IP, 16 circuits; each NAT router fronts up to 7
        # hosts and every node may open a circuit to each carrier behind NAT).
        relay.config["p2p"].update(
            relay_max_reservations=4 * n,
            relay_max_reservations_per_ip=2 * n,
            relay_max_circuits=16 * n,
            relay_max_circuits_per_peer=2 * n,
            max_peers_per_ip=4 * n,
        )
        relay.init_config()
        nodes[0] = relay
        for i in range(1, n):
            role = "owner" if i == owner_i else "light" if plan.light[i] else "full"
            node = HostNode(lab, host[i], work / f"n{i}", f"n{i}-{role}")
            node.config.update(open_config(node.address, [bootstrap]))
            node.config["p2p"]["reachability_interval_s"] = 5.0
            node.config["p2p"]["max_peers_per_ip"] = 4 * n  # a NAT router's hosts share an IP
            node.config["ipfs"] = {"mode": "none"}
            # DHT clients, as in the simulator: light nodes and nodes behind NAT ask, never serve
            node.config["dht"] = {"serve": not (plan.light[i] or plan.nat[i])}
            if plan.light[i]:
                node.config["pipeline"] = {"replay": False}
            elif role == "full":
                node.config["trust"] = {"policy": "verify-all"}
            node.init()
            nodes[i] = node
        for i in light:
            nodes[i].config["trust"] = {
                "policy": "quorum",
                "k": args.k,
                "trusted_attesters": [_node_id(nodes[j].home) for j in plan.trusted[(i, 0)]],
            }
            nodes[i].init_config()
        cfg_p2p = open_config("10.77.0.1")["p2p"]
        out["daemon_timers"] = {
            "discovery_interval_s": cfg_p2p["discovery_interval_s"],
            "anti_entropy_interval_s": cfg_p2p["anti_entropy_interval_s"],
            **connection_timers(),
        }
        relay.launch()
        relay.wait_ready()
        for i in range(1, n):
            nodes[i].launch()
        for i in range(1, n):
            nodes[i].wait_ready(timeout=600)
        out["start_s"] = round(time.monotonic() - t_start, 1)
        print(f"seed {seed}: {n} daemons ready in {out['start_s']} s", file=sys.stderr, flush=True)

        def reserved(i: int) -> bool:
            r = nodes[i].call("node.status")["p2p"]["reachability"] or {}
            return bool(r.get("relayed_addrs"))

        t0 = time.monotonic()
        pending = set(natted)
        while pending and time.monotonic() - t0 < 180:
            pending = {i for i in pending if not reserved(i)}
            time.sleep(1.0)
        out["relay_slots_missing"] = sorted(pending)

        # link round trips: a public host and a host behind each NAT to the relay's gossip port
        def rtt_ms(i: int) -> float | None:
            r = lab.run(
                host[i],
                [sys.executable, "-c", _RTT_PROBE, lab.address(host[0]), "7375", "20"],
            )
            return float(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None

        out["rtt_public_ms"] = rtt_ms(public[1]) if len(public) > 1 else None
        out["rtt_nat_ms"] = [rtt_ms(i) for i in (eim[:1] + sym[:1])]

        owner = nodes[owner_i]
        created = owner.call("dataset.create", snapshot_yaml=SNAPSHOTS)
        did = {c["alias"]: c["id"] for c in created}["big-cities"]
        csv = work / "c0.csv"
        csv.write_text(_csv(0))
        owner.call("dataset.ingest", ref="cities", files=[str(csv)])
        head0 = owner.call("dataset.transform", ref="big-cities")["new_head"]
        for i in full:
            nodes[i].call("subscriptions.add", did=did)
        t0 = time.monotonic()
        for i in full:
            nodes[i].wait_for(
                "the first head's own attestation",
                lambda i=i: any(
                    a["own"] and a["head"] == head0
                    for a in nodes[i].call("attestations.list", did=did, head=head0)
                ),
                timeout=900,
                every=1.0,
            )
        out["full_verified_first_s"] = round(time.monotonic() - t0, 1)
        print(
            f"seed {seed}: {len(full)} full followers verified the first head in "
            f"{out['full_verified_first_s']} s",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(args.settle)
        # one subscription every --subscribe-gap seconds, on a fixed schedule (the simulator
        # starts its subscriptions at the same offsets): each discovery runs alone, so the lab
        # measures the network and not 14 discoveries queued on the machine's cores
        # Which carriers a light node is already connected to when it subscribes decides how
        # its first head can arrive (the catch-up look 0.5 s after the subscription asks every
        # connected peer, p2p/service.py ``_catch_up_soon``): read just before each subscribe.
        index_of = {n.call("node.status")["p2p"]["peer_id"]: k for k, n in nodes.items()}
        connected_before: list[list[int]] = []
        t_sub = time.monotonic()
        for order, i in enumerate(light):
            time.sleep(max(0.0, t_sub + order * args.subscribe_gap - time.monotonic()))
            rows = nodes[i].call("peers.list")
            connected_before.append(
                sorted(index_of.get(r["peer_id"], -1) for r in rows if r["connected"])
            )
            nodes[i].call("subscriptions.add", did=did)
        out["subscribe_gap_s"] = args.subscribe_gap
        out["connected_before_subscribe"] = connected_before

        def accepted_ns(i: int, head: str | None = None) -> int | None:
            ts = [
                e["at_ns"]
                for e in nodes[i].call("node.events", kind="head.accepted", limit=1000)
                if e["did"] == did and (head is None or e["data"].get("head") == head)
            ]
            return min(ts) if ts else None

        t0 = time.monotonic()
        while time.monotonic() - t0 < args.wait and any(accepted_ns(i) is None for i in light):
            time.sleep(1.0)

        # The light nodes' first pull, apart from the heads' pulls: a light node pulls nothing
        # before it subscribes, so after its first head its ``odf_pull_seconds`` histogram
        # holds that pull (the fetch's whole duration, every source tried; node/app/fetch.py)
        first_pull: list[float] = []
        first_pull_counts: list[int] = []
        for i in light:
            r = lab.run(
                host[i],
                [sys.executable, "-c", _METRICS_PROBE, nodes[i].call("node.status")["http_url"]],
                timeout=60,
            )
            if r.returncode != 0:
                continue
            total, count = _histogram(r.stdout, "odf_pull_seconds")
            first_pull_counts.append(int(count))
            if count >= 1:
                first_pull.append(total / count)
        out["first_pull_s"] = first_pull
        out["first_pull_counts"] = first_pull_counts

        commits: dict[str, int] = {}
        for k in range(1, args.heads + 1):
            began = time.monotonic()
            csv = work / f"c{k}.csv"
            csv.write_text(_csv(k))
            owner.call("dataset.ingest", ref="cities", files=[str(csv)])
            head = owner.call("dataset.transform", ref="big-cities")["new_head"]
            commits[head] = time.time_ns()
            print(f"seed {seed}: head {k}/{args.heads}", file=sys.stderr, flush=True)
            time.sleep(max(0.0, args.interval - (time.monotonic() - began)))

        def trusted_ns(i: int) -> dict[str, int]:
            got: dict[str, int] = {}
            for e in nodes[i].call("node.events", kind="head.trusted", limit=1000):
                h = e["data"].get("head")
                if e["did"] == did and h in commits:
                    got[h] = min(got.get(h, e["at_ns"]), e["at_ns"])
            return got

        last = list(commits)[-1]
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.wait and any(last not in trusted_ns(i) for i in light):
            time.sleep(2.0)
        # the window each head had: a pair counts as trusted only within it, on both sides
        wait_end_ns = time.time_ns()
        out["trust_window_s"] = [round((wait_end_ns - c) / 1e9, 1) for c in commits.values()]

        # the daemons' exchange and dial costs, from a fresh host on a public lab host: to the
        # relay (direct) and to a node behind NAT (through the relay)
        prober = next(i for i in public if i not in (0, owner_i))
        direct = [bootstrap]
        # relayed dials: up to 5 NAT'd nodes (one dial per seed ranged from +0 to +11 s in
        # the 2026-11-29 runs: the median of several)
        relayed = [nodes[i].gossip_addr() for i in natted if i != owner_i][:5]

        def run_probe(targets: list[str]) -> dict[str, Any] | str:
            # up to 3 tries: under load a request can time out (a seed whose probe failed
            # simulates no exchange or dial cost; the table says so)
            err = ""
            for _ in range(3):
                probe = lab.run(
                    host[prober],
                    [sys.executable, __file__, "--probe", lab.address(host[prober]), did, *targets],
                    timeout=300,
                )
                if probe.returncode == 0:
                    got: dict[str, Any] = json.loads(probe.stdout)
                    return got
                err = probe.stderr[-2000:]
            return err

        out["probe_direct"] = run_probe(direct)
        if relayed:
            out["probe_relayed"] = run_probe(relayed)

        # ---- collect
        discovery: list[float] = []
        head_known: list[float] = []  # subscribe -> the first head known (before its pull)
        head_from: list[int] = []  # the node whose answer brought that first head
        not_discovered: list[int] = []
        subscribed_ns: list[int] = []  # each light node's subscribe event: the schedule held?
        for i in light:
            subs = [
                e["at_ns"]
                for e in nodes[i].call("node.events", kind="subscribe", limit=100)
                if e["did"] == did
            ]
            if subs:
                subscribed_ns.append(min(subs))
            acc = accepted_ns(i)
            if subs and acc is not None:
                discovery.append((acc - min(subs)) / 1e9)
            else:
                not_discovered.append(i)
            # when it learnt the head: the core asks a newly connected carrier for its heads
            # and logs the answer as head.repaired (p2p/core/protocol.py, node/app/effects.py)
            repaired = [
                e
                for e in nodes[i].call("node.events", kind="head.repaired", limit=1000)
                if e["did"] == did
            ]
            known = [e["at_ns"] for e in repaired if subs and e["at_ns"] >= min(subs)]
            if subs and known:
                head_known.append((min(known) - min(subs)) / 1e9)
                first = min(
                    (e for e in repaired if e["at_ns"] >= min(subs)), key=lambda e: e["at_ns"]
                )
                head_from.append(index_of.get(str(first["data"].get("peer")), -1))
        trusted: list[float] = []
        not_trusted = 0
        missing: list[dict[str, Any]] = []  # (light node, head) pairs not trusted, and why
        for i in light:
            got = trusted_ns(i)
            for k, (h, c) in enumerate(commits.items()):
                if h in got and got[h] <= wait_end_ns:
                    trusted.append((got[h] - c) / 1e9)
                else:
                    not_trusted += 1
                    try:
                        missing.append(_why_not_trusted(nodes, i, k, h, did, plan, args.k))
                    except RpcCallError as err:  # a diagnosis, not a measurement: keep the run
                        missing.append({"node": i, "head": k, "why": f"unknown ({err})"})
        # per node: pull.ok of each head (its URL names the head) and own attestations
        heads = list(commits)
        pulled: dict[int, dict[str, int]] = {}
        own: dict[str, dict[str, int]] = {}  # signer -> head -> when it attested
        received: dict[int, list[dict[str, Any]]] = {}
        for i in range(1, n):
            pulled[i] = {}
            for e in nodes[i].call("node.events", kind="pull.ok", limit=1000):
                url = e["data"].get("url", "")
                for h in heads:
                    # a libp2p pull names the announced head in its URL; an HTTP one (a
                    # public owner's address comes first) reports it as the head it brought
                    if e["did"] == did and (f"head={h}" in url or e["data"].get("new_head") == h):
                        pulled[i][h] = min(pulled[i].get(h, e["at_ns"]), e["at_ns"])
            rows = nodes[i].call("attestations.list", did=did, limit=1000)
            received[i] = rows
            for a in rows:
                if a["own"] and (a["verdict"] == "verified" or a["head"] == head0):
                    own.setdefault(a["signer"], {})[a["head"]] = a["at_ns"]
        pulled_after: list[float] = []  # commit -> pull.ok: the head's gossip, then its pull
        pulled_after_full: list[float] = []  # the same at full followers (inputs too)
        accepted_after_pull: list[float] = []
        verify: list[float] = []  # pull.ok -> own VERIFIED attestation, full followers
        att_delivery: list[float] = []  # signer's attestation -> received at a light node
        for i in range(1, n):
            if i == owner_i:
                continue
            signer = _node_id(nodes[i].home)
            for h, c in commits.items():
                if h not in pulled[i]:
                    continue
                (pulled_after if plan.light[i] else pulled_after_full).append(
                    (pulled[i][h] - c) / 1e9
                )
                acc = accepted_ns(i, h)
                if acc is not None:
                    accepted_after_pull.append((acc - pulled[i][h]) / 1e9)
                if h in own.get(signer, {}):
                    verify.append((own[signer][h] - pulled[i][h]) / 1e9)
            if plan.light[i]:
                for a in received[i]:
                    made = own.get(a["signer"], {}).get(a["head"])
                    if not a["own"] and a["head"] in commits and made is not None:
                        att_delivery.append((a["at_ns"] - made) / 1e9)
        out["commit_to_pulled_s"] = pulled_after
        out["commit_to_pulled_full_s"] = pulled_after_full
        out["pulled_to_accepted_s"] = accepted_after_pull
        out["verify_s"] = verify
        # which heads each full follower attested, and the verifications it folded into a
        # pending one (node/app/verify.py: a verification checks the dataset's current head)
        out["full_attested"] = {
            str(i): [k for k, h in enumerate(heads) if h in own.get(_node_id(nodes[i].home), {})]
            for i in full
        }
        out["full_coalesced"] = {
            str(i): len([e for e in _all_events(nodes[i], "verify.coalesced") if e["did"] == did])
            for i in full
        }
        out["attestation_delivery_s"] = att_delivery
        # an attestation published alone: each light node attests the first head (integrity
        # only, no replay) at its subscription, 8 s apart, when no other node is attesting;
        # its delivery to every other node is the mesh's without the heads' burst (every
        # follower that pulled a head attests within about a second: on the lab's 2 cores
        # their validations queue at every hop)
        alone: list[float] = []
        for i in light:
            signer = _node_id(nodes[i].home)
            made = own.get(signer, {}).get(head0)
            if made is None:
                continue
            for r in range(1, n):
                for a in received[r]:
                    if not a["own"] and a["signer"] == signer and a["head"] == head0:
                        alone.append((a["at_ns"] - made) / 1e9)
        out["attestation_delivery_alone_s"] = alone
        out["discovery_s"] = discovery
        out["head_known_s"] = head_known
        out["head_known_from"] = head_from
        # the light nodes' own account of their discovery (daemon logs, INFO): the DHT lookup a
        # round runs before it dials (its duration as the daemon reports it) and the rounds
        dht_lookup: list[float] = []
        request_ms: list[float] = []
        light_logs: dict[str, list[str]] = {}
        for i in light:
            try:
                text = Path(nodes[i].log_path).read_text(errors="replace")
            except OSError:
                continue
            lines = [x for x in text.splitlines() if "DHT: " in x or "discovery" in x]
            light_logs[str(i)] = lines[:40]
            for x in lines:
                m = re.search(r"DHT: \d+ provider\(s\) of (\S+) in ([\d.]+) s", x)
                if m:  # a light node follows this dataset only
                    dht_lookup.append(float(m.group(2)))
                    break
            # its first round after subscribing (it follows nothing before: no round logs)
            # times its providers requests (p2p/discovery.py: "asked N (median X ms)")
            for x in lines:
                m = re.search(r"discovery: asked \d+ \(median ([\d.]+) ms\)", x)
                if m:
                    request_ms.append(float(m.group(1)))
                    break
        out["dht_lookup_s"] = dht_lookup
        out["discovery_request_ms"] = request_ms
        out["light_logs"] = light_logs
        out["subscribed_at_s"] = [round((t - subscribed_ns[0]) / 1e9, 2) for t in subscribed_ns]
        out["not_discovered"] = not_discovered
        out["publish_to_trusted_s"] = trusted
        out["not_trusted"] = not_trusted
        out["not_trusted_pairs"] = missing
        # the light nodes' first pull settles like the heads': pull.ok -> head.accepted
        first_settle: list[float] = []
        for i in light:
            oks = [
                e["at_ns"]
                for e in nodes[i].call("node.events", kind="pull.ok", limit=1000)
                if e["did"] == did
            ]
            acc = accepted_ns(i)
            if oks and acc is not None:
                first_settle.append((acc - min(oks)) / 1e9)
        out["first_pulled_to_accepted_s"] = first_settle
        out["load_after"] = os.getloadavg()
        out["wall_s"] = round(time.monotonic() - t_start, 1)
        return out
    finally:
        stop_all(list(nodes.values()))
        lab.close()
        if args.keep:
            print(f"homes kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _rtts(lab: dict[str, Any]) -> tuple[float, float]:
    """The lab's round trips (ms): from a public host, and through a NAT router."""
    rtt = lab["rtt_public_ms"] or 0.1
    nat_rtts = [x for x in lab["rtt_nat_ms"] if x is not None]
    return rtt, (statistics.median(nat_rtts) if nat_rtts else rtt)


def dial_costs(lab: dict[str, Any], rtt: float, relay_rtt: float) -> dict[str, Any]:
    """Per exchange and per dial, beyond the wire's round trips (ms): what the simulator
    charges, and the probe's figures beside it as a diagnostic.

    ``exchange_ms`` is the light daemons' own providers requests when the run recorded them
    (``discovery_request_ms``: each light node's first round after it subscribed, the median
    its log gives), less a round trip; else the probe's median request less a round trip (a
    fresh host's requests, kept as a diagnostic). The dial comes from the light daemons' own
    DHT lookups when the run recorded them (``dht_lookup_s``): a lookup is
    one step of queries (the daemons log 3-5 queried) and, in parallel, the dials that confirm
    the providers it was told of (``p2p/dht_service.py``: up to ``DIALS_AT_ONCE`` at once,
    until ``want_providers`` are confirmed), relayed ones included, so its median less one
    exchange bounds what a warm daemon pays for a dial, direct or relayed (``relay_dial_ms``
    0). The probe's dial is a fresh host's first dial, which no daemon of the run paid after
    its start. Runs without the lookups fall back to the probe's dials."""
    probe: dict[str, float] = {"exchange_ms": 0.0, "dial_ms": 0.0, "relay_dial_ms": 0.0}
    if isinstance(lab.get("probe_direct"), dict):
        pr = lab["probe_direct"]
        probe["exchange_ms"] = max(0.0, statistics.median(pr["request_ms"]) - rtt)
        probe["dial_ms"] = max(0.0, statistics.median(pr["dial_ms"]) - 2 * rtt)
    if isinstance(lab.get("probe_relayed"), dict):
        relayed = statistics.median(lab["probe_relayed"]["dial_ms"])
        probe["relay_dial_ms"] = max(0.0, relayed - 2 * (rtt + relay_rtt) - probe["dial_ms"])
    lookups = lab.get("dht_lookup_s") or []
    if not lookups:
        return probe | {"source": "probe", "probe": dict(probe)}
    requests = lab.get("discovery_request_ms") or []
    exchange_ms = max(0.0, statistics.median(requests) - rtt) if requests else probe["exchange_ms"]
    lookup_ms = statistics.median(lookups) * 1000
    dial_ms = max(0.0, lookup_ms - (rtt + exchange_ms) - 2 * rtt)
    return {
        "exchange_ms": exchange_ms,
        "exchange_source": "daemons' requests" if requests else "probe",
        "dial_ms": dial_ms,
        "relay_dial_ms": 0.0,
        "source": "daemons' DHT lookups",
        "lookup_ms": lookup_ms,
        "probe": dict(probe),
    }


def unmeasured(lab: dict[str, Any]) -> str | None:
    """What a seed's lab run failed to measure that the simulator needs (None: nothing). Such
    a seed is reported and left out of the table, never simulated with defaults in place of
    the measurements (a silent fallback once simulated pulls of 0 s)."""
    missing = [
        k
        for k in ("commit_to_pulled_s", "commit_to_pulled_full_s", "verify_s", "first_pull_s")
        if not lab.get(k)
    ]
    return f"no samples of {', '.join(missing)}" if missing else None


def sim_params(args: argparse.Namespace, seed: int, lab: dict[str, Any]) -> Any:
    """The calibration run's parameters with the lab's measurements and the daemons' timers."""
    from sim.internet import mean_mesh_hops

    rtt, relay_rtt = _rtts(lab)
    members = args.nodes - 1  # everyone but the relay is on the dataset's topic
    hops = mean_mesh_hops(members, MESH_DEGREE)
    # the mesh's delivery of one signed message (validated, no pull) published alone, per
    # hop: the light nodes' attestations of the first head, one subscription at a time. The
    # heads' attestations come in a burst (every follower that pulled attests at once) whose
    # validations queue on the lab's cores: their measured deliveries are drawn from as
    # samples for what they are (a light node's receipt of its trusted attesters' verdicts).
    # Runs stored before the bench recorded the first: the heads' deliveries for both.
    heads_delivery = lab["attestation_delivery_s"] or [0.0]
    delivery = statistics.median(lab.get("attestation_delivery_alone_s") or heads_delivery)
    hop_ms = max(0.0, delivery * 1000 / hops - rtt / 2)
    # a head's pull: commit -> pull.ok less the same delivery, plus pull.ok -> head.accepted
    settle = statistics.median(lab["pulled_to_accepted_s"] or [0.0])
    fetch_med, fetch_sigma = _lognormal([x - delivery + settle for x in lab["commit_to_pulled_s"]])
    # a full follower's: commit -> pull.ok less the delivery; its replay (verify_s) is
    # measured from pull.ok, so no pull.ok -> head.accepted here
    full_med, full_sigma = _lognormal([x - delivery for x in lab["commit_to_pulled_full_s"]])
    # the light nodes' first pull (their subscription, one by one): its own duration from
    # the daemons' histogram, plus the same pull.ok -> head.accepted
    first_settle = statistics.median(lab["first_pulled_to_accepted_s"] or [settle])
    first_med, first_sigma = _lognormal([x + first_settle for x in lab["first_pull_s"]])
    verify_med, verify_sigma = _lognormal(lab["verify_s"])
    costs = dial_costs(lab, rtt, relay_rtt)
    exchange_ms = costs["exchange_ms"]
    dial_ms, relay_dial_ms = costs["dial_ms"], costs["relay_dial_ms"]
    # runs stored before the bench recorded them: the code's (unchanged since)
    timers = connection_timers() | lab["daemon_timers"]
    return dataclasses.replace(
        base_params(args, seed),
        peer_watch_s=timers["peer_watch_interval_s"],
        tick_s=timers["tick_interval_s"],
        catch_up_s=timers["catch_up_delay_s"],
        exchange_ms=exchange_ms,
        dial_ms=dial_ms,
        relay_dial_ms=relay_dial_ms,
        full_fetch_s=max(full_med, 0.001),
        full_fetch_sigma=full_sigma,
        rtt_ms=rtt,
        relay_rtt_ms=relay_rtt,
        discovery_interval_s=lab["daemon_timers"]["discovery_interval_s"],
        hop_ms=hop_ms,
        fetch_s=max(fetch_med, 0.001),
        fetch_sigma=fetch_sigma,
        first_fetch_s=first_med,
        first_fetch_sigma=first_sigma,
        # the same measurements as samples, drawn from as they are: the lab's pulls are
        # multi-modal (the core's fetch retries), which the log-normals above cannot represent
        fetch_samples_s=tuple(max(0.0, x - delivery + settle) for x in lab["commit_to_pulled_s"]),
        full_fetch_samples_s=tuple(max(0.0, x - delivery) for x in lab["commit_to_pulled_full_s"]),
        first_fetch_samples_s=tuple(x + first_settle for x in lab["first_pull_s"]),
        # none measured: the mesh model's hops, not a made-up 0 s delivery
        attestation_delivery_samples_s=tuple(lab["attestation_delivery_s"]),
        head_interval_s=args.interval,
        subscribe_gap_s=lab.get("subscribe_gap_s", 0.0),
        discovery_replicates=DISCOVERY_REPLICATES,
        trust_replicates=TRUST_REPLICATES,
        verify_s=max(verify_med, 0.001),
        verify_sigma=verify_sigma,
    )


def _interval(xs: list[float]) -> tuple[float | None, float | None]:
    """Mean and the half-width of its 95 % t-interval."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, None
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}
    return m, t.get(len(xs), 2.0) * statistics.stdev(xs) / math.sqrt(len(xs))


def sim_trusted(run: dict[str, Any], replicate: int = 0) -> list[float]:
    """The simulator's publish -> trusted samples of a seed within the lab's wait: head k's
    pairs count if trusted within the window the lab gave that head (its commit to the end of
    the wait), as the lab's do; superseded heads are not counted (never logged).
    ``replicate`` r > 0: the r-th of the simulator's ``trust_replicates``."""
    windows = run["lab"].get("trust_window_s")
    cal = run["sim"]["calibration"]
    pairs = (
        [(q["head"], q["trusted_s"]) for q in cal["trusted_pairs"]]
        if replicate == 0
        else [(k, t) for k, t in cal["trust_replicates"][replicate - 1]]
    )
    return [t for k, t in pairs if t is not None and (windows is None or t <= windows[k])]


def _replicates_pct(run: dict[str, Any], metric: str, q: float) -> float | None:
    """The median over the simulator's replicates of each one's percentile ``q`` (None: the
    run has one replicate of ``metric``)."""
    cal = run["sim"]["calibration"]
    if metric == "discovery":
        reps = cal.get("discovery_replicates")
        return reps[f"p{round(q * 100)}"] if reps and reps["n"] > 1 else None
    n = len(cal.get("trust_replicates") or [])
    if not n:
        return None
    xs = [_pct(sim_trusted(run, r), q) for r in range(n + 1)]
    return statistics.median(x for x in xs if x is not None)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric: lab and sim (mean +- 95 % over seeds) and the error |sim - lab| / lab, over
    the seeds that were measured (see :func:`unmeasured`)."""
    runs = [r for r in runs if r.get("sim") is not None]
    table: dict[str, Any] = {}
    for metric, lab_key in (
        ("discovery", "discovery_s"),
        ("publish_to_trusted", "publish_to_trusted_s"),
    ):
        for q in (0.5, 0.99):
            name = f"{metric}_p{round(q * 100)}"
            labs, sims, errs, ones, one_errs = [], [], [], [], []
            for r in runs:
                a = _pct(r["lab"][lab_key], q)
                cal = r["sim"]["calibration"]
                sim_xs = cal["discovery_samples"] if metric == "discovery" else sim_trusted(r)
                one = _pct(sim_xs, q)  # the simulator's single replicate
                b = _replicates_pct(r, metric, q)  # median over replicates
                if b is None:
                    b = one
                labs.append(a)
                sims.append(b)
                ones.append(one)
                if a and b is not None:
                    errs.append(abs(b - a) / a)
                if a and one is not None:
                    one_errs.append(abs(one - a) / a)
            table[name] = {
                "lab_s": _interval([x for x in labs if x is not None]),
                "sim_s": _interval([x for x in sims if x is not None]),
                "error": _interval(errs),
                "per_seed": {"lab": labs, "sim": sims, "error": errs},
            }
            if sims != ones:  # the single replicate's, for comparison
                table[name]["single_replicate"] = {
                    "sim_s": _interval([x for x in ones if x is not None]),
                    "error": _interval(one_errs),
                    "per_seed": {"sim": ones, "error": one_errs},
                }
    # a diagnostic, not a target: the part of discovery before the first pull
    labs = [_pct(r["lab"].get("head_known_s", []), 0.5) for r in runs]
    sims = [_pct(r["sim"]["calibration"].get("head_known_samples", []), 0.5) for r in runs]
    errs = [abs(b - a) / a for a, b in zip(labs, sims, strict=True) if a and b is not None]
    table["head_known_p50 (diagnostic)"] = {
        "lab_s": _interval([x for x in labs if x is not None]),
        "sim_s": _interval([x for x in sims if x is not None]),
        "error": _interval(errs),
        "per_seed": {"lab": labs, "sim": sims, "error": errs},
    }
    return table


def _fmt(mi: tuple[float | None, float | None], pct: bool = False) -> str:
    m, h = mi
    if m is None:
        return "-"
    if pct:
        return f"{m * 100:.0f} %" + (f" ± {h * 100:.0f}" if h is not None else "")
    return f"{m:.2f}" + (f" ± {h:.2f}" if h is not None else "")


def print_table(result: dict[str, Any]) -> None:
    """The calibration table (markdown)."""
    print(
        f"\n{result['daemons']} daemons, {len(result['runs'])} seeds, load "
        f"{result['load']}, wall {result['wall_s']} s\n"
    )
    print("| metric | lab (s) | sim (s) | error abs(sim - lab) / lab |")
    print("|---|---|---|---|")
    for name, row in result["table"].items():
        err = _fmt(row["error"], True)
        print(f"| {name} | {_fmt(row['lab_s'])} | {_fmt(row['sim_s'])} | {err} |")
        one = row.get("single_replicate")
        if one:
            one_err = _fmt(one["error"], True)
            print(f"| {name} (one replicate) | | {_fmt(one['sim_s'])} | {one_err} |")
    for name, row in result["table"].items():
        per = row["per_seed"]
        print(
            f"  {name} per seed lab / sim / error: "
            + "; ".join(
                f"{a if a is None else round(a, 1)} / {b if b is None else round(b, 1)}"
                for a, b in zip(per["lab"], per["sim"], strict=True)
            )
            + " | "
            + ", ".join(f"{e * 100:.0f} %" for e in per["error"])
        )
    print("\nsimulator parameters measured per seed:")
    for r in result["runs"]:
        if r.get("sim") is None:
            print(f"  seed {r['seed']}: left out of the table: {r.get('unmeasured')}")
            continue
        p = r["sim"]["params"]
        lab = r["lab"]
        trusted = len(lab["publish_to_trusted_s"])
        pairs = trusted + lab["not_trusted"]
        probed = "ok" if isinstance(lab["probe_direct"], dict) else "FAILED"
        whys: dict[str, int] = {}
        for m in lab["not_trusted_pairs"]:
            whys[m["why"]] = whys.get(m["why"], 0) + 1
        print(
            f"  seed {r['seed']}: lab trusted {trusted}/{pairs} (head, light) pairs "
            f"(not: {whys}); sim {len(sim_trusted(r))}/{pairs} within the same wait "
            f"({r['sim']['calibration']['superseded']} superseded); probe {probed}"
        )
        print(
            f"  seed {r['seed']}: rtt {p['rtt_ms']:.3f} ms, relay leg {p['relay_rtt_ms']:.3f} ms, "
            f"exchange {p['exchange_ms']:.0f} ms, dial {p['dial_ms']:.0f} ms (relayed "
            f"+{p['relay_dial_ms']:.0f} ms), full followers' pull {p['full_fetch_s']:.2f} s "
            f"(sigma {p['full_fetch_sigma']:.2f}), "
            f"hop {p['hop_ms']:.0f} ms, fetch {p['fetch_s']:.2f} s (sigma {p['fetch_sigma']:.2f}), "
            f"first pull {p['first_fetch_s']:.2f} s (sigma {p['first_fetch_sigma']:.2f}, "
            f"{len(lab['first_pull_s'])} light nodes), "
            f"verify {p['verify_s']:.2f} s (sigma {p['verify_sigma']:.2f}), discovery interval "
            f"{p['discovery_interval_s']} s; attestation delivery alone "
            + (
                f"{statistics.median(lab['attestation_delivery_alone_s']):.2f} s"
                if lab.get("attestation_delivery_alone_s")
                else "not recorded"
            )
            + f", the heads' {statistics.median(lab['attestation_delivery_s'] or [0.0]):.2f} s"
            " (drawn from)"
        )
        c = r.get("dial_costs")
        if c:
            pr = c["probe"]
            print(
                f"  seed {r['seed']}: dial from the {c['source']}"
                + (f" (median {c['lookup_ms']:.0f} ms)" if "lookup_ms" in c else "")
                + f", exchange from the {c.get('exchange_source', 'probe')}"
                + f"; the probe's: exchange {pr['exchange_ms']:.0f} ms, dial "
                f"{pr['dial_ms']:.0f} ms (relayed +{pr['relay_dial_ms']:.0f} ms)"
            )


def main() -> None:
    """Parse the arguments, arrange the loopback-only namespace, run every seed, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=24)
    p.add_argument("--nat", type=int, default=14, help="nodes behind NAT (60 %% of 24)")
    p.add_argument("--light", type=int, default=14)
    p.add_argument("--trusted", type=int, default=8, help="attesters a light node trusts")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument(
        "--interval",
        type=float,
        default=60.0,
        help="s between heads: more than a head's pulls (20-57 s median at 24 daemons, load 19-41)",
    )
    p.add_argument(
        "--subscribe-gap",
        type=float,
        default=8.0,
        help="s between the light nodes' subscriptions: more than one discovery (first head "
        "known 0.6-1.4 s, first pull 4-7 s median at 24 daemons on 2 cores)",
    )
    p.add_argument("--settle", type=float, default=5.0, help="s after the full followers verified")
    p.add_argument("--wait", type=float, default=240.0)
    p.add_argument("--json", type=Path)
    p.add_argument("--keep", action="store_true")
    p.add_argument(
        "--resim",
        type=Path,
        help="no lab: simulate again the lab runs stored in this --json file (the lab's "
        "measurements do not depend on the simulator)",
    )
    # LISTEN DID ADDR...: run on a lab host by lab_run
    p.add_argument("--probe", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.probe:
        import asyncio

        listen, did, *targets = args.probe
        print(json.dumps(asyncio.run(_probe(listen, targets, did, 5))))
        return
    if args.resim:
        from sim.internet import simulate_internet

        stored = json.loads(args.resim.read_text())
        runs = [
            {"seed": r["seed"], "lab": r["lab"], "unmeasured": unmeasured(r["lab"])}
            | {
                "sim": None
                if unmeasured(r["lab"])
                else simulate_internet(sim_params(args, r["seed"], r["lab"]))
            }
            | {"dial_costs": dial_costs(r["lab"], *_rtts(r["lab"]))}
            for r in stored["runs"]
        ]
        result = stored | {"runs": runs, "table": summarise(runs), "resimulated": True}
        result.setdefault("load", "-")
        result.setdefault("wall_s", "-")
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        print_table(result)
        return
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    from sim.internet import simulate_internet

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    runs = []
    loads = [os.getloadavg()[0]]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        lab = lab_run(args, seed)
        missing = unmeasured(lab)
        sim = None if missing else simulate_internet(sim_params(args, seed, lab))
        runs.append(
            {"seed": seed, "lab": lab, "sim": sim, "unmeasured": missing}
            | {"dial_costs": dial_costs(lab, *_rtts(lab))}
        )
        loads.append(os.getloadavg()[0])
        if sim is None:
            print(f"seed {seed}: left out, {missing}", file=sys.stderr, flush=True)
        else:
            print(
                f"seed {seed}: lab discovery p50 {_pct(lab['discovery_s'], 0.5)} trusted p50 "
                f"{_pct(lab['publish_to_trusted_s'], 0.5)}; sim "
                f"{sim['calibration']['discovery_s']} {sim['calibration']['publish_to_trusted_s']}",
                file=sys.stderr,
                flush=True,
            )
        if args.json:  # after every seed: a long run keeps what it measured
            partial = {"daemons": args.nodes, "runs": runs, "table": summarise(runs)}
            args.json.write_text(json.dumps(partial, indent=1))
    result = {
        "daemons": args.nodes,
        "args": vars(args) | {"json": str(args.json) if args.json else None},
        "load": f"{min(loads):.1f}-{max(loads):.1f}",
        "wall_s": round(time.monotonic() - t0),
        "runs": runs,
        "table": summarise(runs),
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print_table(result)


if __name__ == "__main__":
    main()
