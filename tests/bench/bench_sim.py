"""Benchmark: simulator scale (the issue's acceptance: 1,000 nodes x 1 h virtual < 60 s wall on
one core; 10,000 nodes x 1 h < 10 min). One run each of ``sim/scenarios/bench.toml`` (one dataset,
a head every 2 minutes, verify-all, no attestation traffic), pinned to one core.

Every signed message costs each core one ed25519 check (about 0.15 ms here): a run's cost is
dominated by (signed messages x nodes), so attestation traffic is left out of the scale figure;
``--attesters N`` adds N public attesters (each signs one attestation per head).

Prints wall seconds, CPU seconds, core events, delivery ratio, p50/p99 latency and the load
average before and after (other work on the machine inflates wall time; CPU time does not).

Usage: .venv/bin/python tests/bench/bench_sim.py [--sizes 1000,10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def one(nodes: int, attesters: int) -> dict[str, Any]:
    from sim.scenario import load
    from sim.simulator import Simulator

    sc = load("bench", {"nodes": nodes, "workload.attester_fraction": attesters / nodes})
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    t, c = time.perf_counter(), time.process_time()
    sim = Simulator(sc)
    res = sim.run()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "nodes": nodes,
        "attesters": attesters,
        "virtual_s": sc.duration_s,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "core_events": res["counters"]["core_events"],
        "heads": res["heads"],
        "delivery_ratio": res["delivery_ratio"],
        "latency_ms": res["latency_ms"],
        "latency_ratio_p50": res["latency_ratio_p50"],
        "loadavg_before": load_before,
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1000,10000")
    p.add_argument("--attesters", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    rows = []
    for n in args.sizes.split(","):
        rows.append(one(int(n), args.attesters))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress
    if args.json:
        print(json.dumps(rows))
        return
    for r in rows:
        lat = r["latency_ms"] or {}
        print(
            f"{r['nodes']:>6} nodes x {r['virtual_s']:.0f} s virtual: wall {r['wall_s']} s, "
            f"cpu {r['cpu_s']} s, {r['core_events']} core events, delivery {r['delivery_ratio']}, "
            f"p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms, "
            f"load {' '.join(r['loadavg_before'])} -> {' '.join(r['loadavg_after'])}"
        )


if __name__ == "__main__":
    main()
