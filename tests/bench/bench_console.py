"""The node console's datasets page with 1,000 followed datasets, and the node's idle RSS.

Inside a private loopback-only namespace (the script re-executes itself under ``unshare -rn``):

1. a scratch publisher home creates N root datasets (default 1,000) and ingests one small CSV
   into each, then signs a real head announcement for each with the dataset's own key;
2. the datasets are copied into a fresh node home without their keys (as pulled copies are
   stored), and the node's state gets, for each, a subscription, the accepted head (the signed
   announcement) and a ``verified`` outcome: what a node following N datasets holds;
3. the daemon starts (IPFS off, nothing else running), and after it settled the idle RSS of the
   daemon and of its libp2p process is read from ``/proc/<pid>/status`` (VmRSS) before any page
   is opened (reported per process and as the total the budget applies to);
4. headless chromium (Debian's, through Selenium) logs in through ``odf-node ui`` and loads
   ``/ui/datasets`` R times (default 7). Each load is timed by the page itself, from
   navigation start (``performance.now()`` origin) to ``console-painted``: the first frame
   after the script put every row into the table has been laid out and painted (the page
   marks it from a ``setTimeout`` queued in the ``requestAnimationFrame`` callback that follows
   the render, i.e. after that frame's style, layout and paint). The page's other marks give
   where the time went: document + script (``DOMContentLoaded``), the ``console.datasets``
   fetch (request start to response end, from Resource Timing), JSON parsing, building the
   rows, and layout + paint. The ``console.datasets`` call alone from Python is timed too;
5. prints medians, min/max, the RSS before and after the page loads, and the 1 s / 150 MB
   budgets as ratios, as JSON.

    .venv/bin/python tests/bench/bench_console.py [--datasets 1000] [--repeat 7] [--prepared DIR]

``--prepared DIR`` keeps the prepared node home (step 2 takes minutes) in DIR and reuses it
on the next run with the same ``--datasets``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
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

PAGE_BUDGET_S = 1.0
RSS_BUDGET_MB = 150.0
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
        schema: ["event_time TIMESTAMP", "value BIGINT"]
      merge:
        kind: Append
    - kind: SetVocab
      eventTimeColumn: event_time
"""


PAGE_MARKS = """
const painted = performance.getEntriesByName("console-painted")[0];
if (!painted) return null;
const mark = (n) => performance.getEntriesByName(n)[0].startTime;
const nav = performance.getEntriesByType("navigation")[0];
const rpc = performance.getEntriesByType("resource").filter((e) => e.name.endsWith("/ui/rpc"))[0];
return {
  dcl: nav.domContentLoadedEventStart, rpc_start: rpc.startTime, rpc_end: rpc.responseEnd,
  fetched: mark("datasets-fetched"), ready: mark("console-ready"), painted: painted.startTime,
};
"""
"""The page's own timings of one load (ms since navigation start), or null before it painted."""
PHASES = {
    "document_and_script": ("start", "dcl"),
    "until_rpc_sent": ("dcl", "rpc_start"),
    "rpc_fetch": ("rpc_start", "rpc_end"),
    "json_parse": ("rpc_end", "fetched"),
    "build_rows": ("fetched", "ready"),
    "layout_and_paint": ("ready", "painted"),
}
"""Where one load's time goes: (from, to) marks of :data:`PAGE_MARKS` (``start`` = 0)."""


def build_followed(n: int, work: Path, node_home: Path) -> None:
    """N pulled, followed, verified datasets in ``node_home`` (see the module docstring)."""
    from coordinator.identity import load_private_key
    from coordinator.ingest.push import ingest
    from coordinator.metadata.snapshot import snapshots_from_yaml
    from node.home import NodeHome
    from node.state import NodeState
    from p2p.wire import FetchLocations, HeadAnnouncement, sign_message

    pub = NodeHome(work / "publisher")
    pub.init()
    repo = pub.repository()
    csv = work / "rows.csv"
    csv.write_text("event_time,value\n2024-01-01T00:00:00Z,1\n2024-01-02T00:00:00Z,2\n")
    text = "---\n".join(SNAPSHOT.format(name=f"followed-{i:04d}") for i in range(n))
    handles = repo.create_from_snapshots(snapshots_from_yaml(text))
    node = NodeHome(node_home)
    node.init()
    node_repo = node.repository()
    announcements = []
    for h in handles:
        ds = repo.open(h.id.as_did_str())
        ingest(ds, [csv])
        st = ds.state()
        assert st.head is not None
        key = load_private_key(repo.key_path(h.id))
        ann = HeadAnnouncement(
            dataset=h.id,
            head=st.head,
            sequence=st.sequence_number,
            prev_head=None,
            epoch=0,
            locations=FetchLocations((), ()),
            issued_at_ns=time.time_ns(),
            nonce=secrets.token_bytes(16),
        )
        announcements.append((h, st, sign_message(ann, key).envelope))
        # A pulled copy: the dataset directory (blocks, refs, data, alias), no key.
        shutil.copytree(h.root, node_repo.root / h.root.name)
    with NodeState.open(node_home / "state.db", time.time_ns) as state:
        for h, st, envelope in announcements:
            did, head = h.id.as_did_str(), str(st.head)
            state.subscribe(did, h.alias, "bench")
            state.record_accepted_head(did, 0, st.sequence_number, head, None, envelope)
            state.record_verification(did, head, "verified", "", 0.01)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from browser import start_chromium
    from daemon_harness import NodeProcess, node_rss_mb

    work = Path(tempfile.mkdtemp(prefix="odf-bench-console-"))
    result: dict[str, Any] = {"datasets": args.datasets}
    node = NodeProcess(work / "node", "node", config={"ipfs": {"mode": "none"}})
    driver = None
    try:
        t0 = time.monotonic()
        prepared = Path(args.prepared) / f"home-{args.datasets}" if args.prepared else None
        if prepared is not None and prepared.is_dir():
            shutil.copytree(prepared, node.home)
        else:
            build_followed(args.datasets, work, node.home)
            if prepared is not None:
                shutil.copytree(node.home, prepared)
        node.init()  # keeps the home, writes the test config (random ports, IPFS off)
        result["setup_s"] = round(time.monotonic() - t0, 1)
        node.launch()
        node.wait_ready()
        assert node.proc is not None
        time.sleep(args.settle)
        # The daemon and its libp2p process together (both are the node; IPFS is off here).
        idle = node_rss_mb(node.proc.pid)
        result["idle_rss_mb"] = idle["total"]
        result["idle_rss_mb_by_process"] = idle

        calls = []
        for _ in range(args.repeat):
            c0 = time.perf_counter()
            rows = node.call("console.datasets")
            calls.append(time.perf_counter() - c0)
        assert len(rows) == args.datasets, len(rows)
        assert all(r["verification"] == "verified" and r["followed"] for r in rows)

        driver = start_chromium(work / "profile")
        login = node.call("console.login")["url"]
        driver.get(login)
        deadline = time.monotonic() + 30
        while not driver.execute_script("return document.body.dataset.ready"):
            if time.monotonic() > deadline:
                raise RuntimeError("console did not log in")
            time.sleep(0.05)
        base = node.url.removesuffix("/rpc")
        loads = []
        phases: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            driver.get("about:blank")
            driver.get(base + "/ui/datasets")
            deadline = time.monotonic() + 30
            while True:
                marks = driver.execute_script(PAGE_MARKS)
                if marks is not None:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("datasets page did not render")
                time.sleep(0.02)
            n_rows = driver.execute_script(
                "return document.querySelectorAll('#datasets-table tbody tr').length"
            )
            assert n_rows == args.datasets, n_rows
            loads.append(marks["painted"] / 1000)
            marks["start"] = 0.0
            for name, (a, b) in PHASES.items():
                phases.setdefault(name, []).append((marks[b] - marks[a]) / 1000)
        result["page_load_s"] = {
            "median": round(statistics.median(loads), 3),
            "min": round(min(loads), 3),
            "max": round(max(loads), 3),
            "runs": len(loads),
            "measured": "navigation start to the first frame painted with all rows",
        }
        result["page_phases_median_s"] = {
            k: round(statistics.median(v), 3) for k, v in phases.items()
        }
        result["load_average_1min"] = os.getloadavg()[0]
        result["console_datasets_rpc_s"] = {
            "median": round(statistics.median(calls), 3),
            "max": round(max(calls), 3),
        }
        result["rss_after_pages_mb"] = node_rss_mb(node.proc.pid)["total"]
        result["page_load_vs_1s_budget"] = round(statistics.median(loads) / PAGE_BUDGET_S, 3)
        result["idle_rss_vs_150mb_budget"] = round(result["idle_rss_mb"] / RSS_BUDGET_MB, 3)
        return result
    finally:
        if driver is not None:
            driver.quit()
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--prepared", help="directory keeping the prepared node home between runs")
    # Joins are paced 20 ms apart (docs/libp2p.md): 1,000 topics take about 20 s to join.
    p.add_argument("--settle", type=float, default=45.0, help="seconds idle before reading RSS")
    args = p.parse_args()
    if os.environ.get("ODF_BENCH_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_BENCH_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
