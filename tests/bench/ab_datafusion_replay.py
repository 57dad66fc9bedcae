"""Before/after benchmark of DataFusion replay: another source tree against this one, one run.

Builds one 100-block DataFusion derivative (the data and queries of ``bench_datafusion.py``),
then per round, in rotating order: the replay by the code of ``--before`` (a source tree, e.g.
``git archive <commit> | tar -x -C /tmp/before``), the replay by this tree's code (each in its
own process with its own warm DataFusion 51 worker from this tree's engine environments; one
untimed replay first), and the direct DataFusion SQL pass. Reports wall and CPU (node +
worker; direct: its process) per block, medians and ratios.

Usage: ``python tests/bench/ab_datafusion_replay.py --before /tmp/before [--blocks 100]
[--rounds 7]``, in a loopback-only namespace (``unshare -rn``).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "tests" / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_datafusion import (  # noqa: E402
    QUERIES,
    START,
    csv,
    direct_jobs,
    direct_round,
    load,
)

from coordinator.transform.run import run_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    StepClock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from node.engine_client import EngineClient  # noqa: E402
from node.engine_router import EngineRouter, engines_dir  # noqa: E402

REPLAY = r"""
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from coordinator.storage.dataset import Dataset
from coordinator.transform.testing import inputs_of
from coordinator.transform.verify import replay_transforms
from node.engine_client import EngineClient
from node.engine_router import EngineRouter
tmp = Path(sys.argv[2])
root, der = Dataset(tmp / "root"), Dataset(tmp / "der")
router = EngineRouter(lambda: EngineClient(master="local[1]", idle_timeout=0), idle_timeout=0)
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
try:
    replay_transforms(der, inputs_of(root), router)  # warm-up, untimed
    pool = getattr(router, "datafusion_pool", None)  # trees with several workers per release
    if pool is not None:
        replay_transforms(der, inputs_of(root), router)  # a second worker is up by now
    clients = pool("51.0.0") if pool is not None else [router.datafusion("51.0.0")]
    pids = [c.pid for c in clients if c.pid is not None]
    w0, t0, c0 = sum(map(cpu, pids)), time.perf_counter(), time.process_time()
    r = replay_transforms(der, inputs_of(root), router)
    dt = time.perf_counter() - t0
    used = time.process_time() - c0 + sum(map(cpu, pids)) - w0
    assert r.ok, r
    print(json.dumps({"seconds": dt, "cpu": used, "blocks": r.blocks_replayed}))
finally:
    router.close()
"""


def main() -> None:
    """Build, measure, report."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the other source tree")
    p.add_argument("--blocks", type=int, default=100)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    n = args.blocks
    trees = {"before": args.before.resolve(), "after": ROOT}
    env = {**os.environ, "ODF_ENGINES_DIR": str(engines_dir())}
    tmp = Path(tempfile.mkdtemp(prefix="odf-ab-df-"))
    router = EngineRouter(lambda: EngineClient(idle_timeout=0), idle_timeout=0)
    wall: dict[str, list[float]] = {"before": [], "after": [], "direct": []}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    try:
        clock = StepClock(START)
        root = make_root(tmp, "root")
        der = make_derivative(tmp, "der", [(root, "cities")], QUERIES, engine="datafusion")
        for i in range(n):
            push_csv(root, tmp / "in", csv(i, 1000), clock)
            assert run_transform(der, inputs_of(root), router, clock=clock) is not None
        router.close()
        jobs, expected = direct_jobs(der, inputs_of(root), tmp)
        direct_round(jobs, expected, tmp)  # warm the page cache, untimed
        names = list(wall)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                if name == "direct":
                    w, _hashing, c, _writing = direct_round(jobs, expected, tmp)
                else:
                    proc = subprocess.run(
                        [sys.executable, "-c", REPLAY, str(trees[name]), str(tmp)],
                        cwd=trees[name],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    out = json.loads(proc.stdout.strip().splitlines()[-1])
                    assert out["blocks"] == n
                    w, c = out["seconds"] / n, out["cpu"] / n
                wall[name].append(w)
                cpu[name].append(c)
            print(
                f"round {r + 1} (load {load()}): "
                + ", ".join(f"{k} {v[-1] * 1000:.1f}" for k, v in wall.items())
                + "; CPU "
                + ", ".join(f"{k} {v[-1] * 1000:.1f}" for k, v in cpu.items()),
                flush=True,
            )
        for label, data in (("wall", wall), ("CPU", cpu)):
            med = {k: statistics.median(v) for k, v in data.items()}
            print(
                f"{label} medians ms/block: "
                + ", ".join(f"{k} {v * 1000:.2f}" for k, v in med.items())
                + f"; before/direct {med['before'] / med['direct']:.2f}x, "
                f"after/direct {med['after'] / med['direct']:.2f}x"
            )
        per_round = {
            k: statistics.median(a / d for a, d in zip(wall[k], wall["direct"], strict=True))
            for k in ("before", "after")
        }
        print(
            f"median of per-round wall ratios: before/direct {per_round['before']:.2f}x, "
            f"after/direct {per_round['after']:.2f}x"
        )
    finally:
        router.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
