"""Real-cluster mode: the scenario's topology and link latencies with real node processes.

Node 0 of the scenario (the dataset owner) is this process's own libp2p host; nodes 1..N-1 are
``p2p.devnode`` processes (real py-libp2p gossipsub + the real :class:`ProtocolCore`). Every link
of the simulator's topology is dialled through a **userspace delay proxy** that holds each chunk
of bytes for the link's one-way latency in each direction, so the real cluster sees the same
latency matrix the simulator samples for the same scenario and seed.

Why a proxy and not per-node network namespaces with ``tc netem``: on this kernel ``tc qdisc add
dev lo root netem`` fails ("Specified qdisc kind is unknown": no ``sch_netem``), so namespaces
alone (``sim/netlab.py`` builds them, with veth pairs on a bridge inside a private mount and
network namespace) could not delay links. The proxy gives every link its latency while the
whole cluster runs in one loopback-only namespace.

The owner publishes ``cluster.messages`` announcements at ``cluster.rate`` per second; delivery
latency is publish -> validated (the node's ``candidate`` event, same-host clocks). The result
also holds the simulator's figures for the same scenario and seed and the real/sim p50 and p99
ratios. Run as ``python -m sim.cluster SCENARIO [--seed N]`` inside ``unshare -rn`` (or through
``odf-node sim run SCENARIO --cluster``, which arranges the namespace).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from coordinator.multiformats import Multihash
from p2p.devcluster import DevNode, wait_until
from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
from p2p.netguard import assert_loopback_only, non_loopback_interfaces
from p2p.transport import dataset_topic
from p2p.wire import FetchLocations, HeadAnnouncement, sign_message
from sim.scenario import Scenario, load
from sim.simulator import NS, Simulator

ROOT = Path(__file__).resolve().parents[1]


class DelayProxy:
    """A loopback TCP relay to ``target_port`` that delays each direction by ``delay_s``."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        """Relay to ``127.0.0.1:target_port``; call :meth:`start`."""
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen on a random loopback port (``self.port``)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the listener and every relay task."""
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()

    async def _accept(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            tr, tw = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            w.close()
            return
        for src, dst in ((r, tw), (tr, w)):
            task = asyncio.ensure_future(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def writer() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()

        wtask = asyncio.ensure_future(writer())
        try:
            while True:
                data = await src.read(65536)
                queue.put_nowait((loop.time() + self.delay_s, data))
                if not data:
                    break
            await wtask
        except (ConnectionError, asyncio.CancelledError):
            wtask.cancel()
        finally:
            with contextlib.suppress(Exception):
                dst.close()


def _via(addr: str, port: int) -> str:
    parts = addr.split("/")  # /ip4/127.0.0.1/tcp/PORT/p2p/ID
    parts[4] = str(port)
    return "/".join(parts)


def _pcts(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    s = sorted(xs)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, max(0, int(-(-p * len(s) // 100)) - 1))], 3)

    return {"p50": q(50), "p90": q(90), "p99": q(99), "max": round(s[-1], 3)}


async def run_cluster(sc: Scenario, seed: int | None = None) -> dict[str, Any]:
    """Run the scenario with real processes; see the module docstring.

    Raises:
        NetworkNotIsolated: not inside a loopback-only network namespace.
    """
    assert_loopback_only("a simulated cluster")
    sim = Simulator(sc, seed)  # the same topology, link latencies and owner key
    n_total = sc.nodes
    did = sim.owner_keys[0].dataset_id()
    nodes = {
        i: DevNode(i, (0x5000 + i).to_bytes(2, "big") * 16, did.as_did_str())
        for i in range(1, n_total)
    }
    host = Libp2pTransport(Libp2pConfig(node_seed=b"\x31" * 32))
    proxies: list[DelayProxy] = []
    sent: dict[int, int] = {}
    out: dict[str, Any] = {"scenario": sc.name, "seed": sim.seed, "real_nodes": len(nodes)}
    try:
        t0 = time.monotonic()
        await asyncio.gather(*(n.start() for n in nodes.values()))
        await asyncio.wait_for(asyncio.gather(*(n.ready.wait() for n in nodes.values())), 120)
        await host.start()
        await _link(sim, nodes, host, proxies)
        out["links"] = len(sim.links)
        out["startup_s"] = round(time.monotonic() - t0, 1)
        await asyncio.sleep(5)  # meshes form on the 1 s heartbeat
        await _announce(sc, sim, host, sent)
        messages = sc.cluster.messages
        await wait_until(
            lambda: all(len(n.of("candidate")) >= messages for n in nodes.values()), 15
        )
    finally:
        for n in nodes.values():
            await n.stop()
        await host.stop()
        for p in proxies:
            await p.stop()
    out.update(_delivery(nodes, sent))
    out.update(_beside_simulation(out["latency_ms"], sim.run()))
    out["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return out


async def _link(
    sim: Simulator,
    nodes: dict[int, DevNode],
    host: Libp2pTransport,
    proxies: list[DelayProxy],
) -> None:
    """Connect the simulator's links, each through a proxy delaying it by its latency (node 0
    is ``host``); ``proxies`` gains every proxy started."""
    ports = {i: int(n.addr.split("/")[4]) for i, n in nodes.items()}
    for (a, b), lat_ns in sorted(sim.links.items()):
        proxy = DelayProxy(ports[b], lat_ns / NS)
        await proxy.start()
        proxies.append(proxy)
        if a == 0:
            await host.connect(_via(nodes[b].addr, proxy.port))
        else:
            await nodes[a].send(f"connect {_via(nodes[b].addr, proxy.port)}")


async def _announce(
    sc: Scenario, sim: Simulator, host: Libp2pTransport, sent: dict[int, int]
) -> None:
    """Publish the scenario's announcements at its rate from ``host``; ``sent`` gains each
    sequence number's send time (ns)."""
    owner = sim.owner_keys[0]
    did = owner.dataset_id()
    topic = dataset_topic(did.as_multibase())
    messages, rate = sc.cluster.messages, sc.cluster.rate
    for seq in range(1, messages + 1):
        msg = HeadAnnouncement(
            did,
            Multihash.sha3_256(f"cluster-{seq}".encode()),
            seq,
            None,
            0,
            FetchLocations(),
            time.time_ns(),
            seq.to_bytes(16, "big"),
        )
        env = sign_message(msg, owner).envelope
        sent[seq] = time.time_ns()
        await host.publish(topic, env)
        await asyncio.sleep(1 / rate)


def _delivery(nodes: dict[int, DevNode], sent: dict[int, int]) -> dict[str, Any]:
    """The real nodes' delivery ratio, latency percentiles and latency CDF (50 points)."""
    lat = [
        (e["t_ns"] - sent[e["seq"]]) / 1e6
        for n in nodes.values()
        for e in n.of("candidate")
        if e["seq"] in sent
    ]
    delivered = len({(n.idx, e["seq"]) for n in nodes.values() for e in n.of("candidate")})
    ls = sorted(lat)
    return {
        "delivery_ratio": round(delivered / (len(sent) * len(nodes)), 4) if sent else None,
        "latency_ms": _pcts(lat),
        "latency_cdf_ms": [
            [round(ls[max(0, -(-(k + 1) * len(ls) // 50) - 1)], 3), round((k + 1) / 50, 3)]
            for k in range(50)
            if ls
        ],
    }


def _beside_simulation(real: dict[str, Any] | None, simres: dict[str, Any]) -> dict[str, Any]:
    """The simulator's figures for the same scenario, and the real/simulated latency ratios."""
    out: dict[str, Any] = {
        "sim_latency_cdf_ms": simres["latency_cdf_ms"],
        "sim_latency_ms": simres["latency_ms"],
        "sim_ideal_latency_ms": simres["ideal_latency_ms"],
        "sim_delivery_ratio": simres["delivery_ratio"],
    }
    simlat = simres["latency_ms"]
    if real and simlat:
        out["ratio_real_over_sim_p50"] = round(real["p50"] / simlat["p50"], 3)
        out["ratio_real_over_sim_p99"] = round(real["p99"] / simlat["p99"], 3)
    return out


def run_isolated(scenario: str, seed: int | None, timeout_s: float = 300) -> dict[str, Any]:
    """Run the cluster in a fresh loopback-only namespace (``unshare -rn``) unless already in one.

    Raises:
        RuntimeError: the child failed (its stderr tail is in the message).
    """
    if not non_loopback_interfaces():
        return asyncio.run(run_cluster(load(scenario), seed))
    args = [sys.executable, "-m", "sim.cluster", scenario, "--json"]
    if seed is not None:
        args += ["--seed", str(seed)]
    inner = "ip link set lo up && exec " + " ".join(args)
    proc = subprocess.run(
        ["unshare", "-rn", "bash", "-c", inner],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cluster run failed: {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    """``python -m sim.cluster SCENARIO [--seed N] [--json]`` (inside a loopback-only netns)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("scenario")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    res = asyncio.run(run_cluster(load(args.scenario), args.seed))
    print(json.dumps(res) if args.json else json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
