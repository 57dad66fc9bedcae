"""Backup and restore of a home that follows 1,000 datasets, beside its running daemon.

The home: 1,000 subscriptions, each with an accepted head, a verification, an own attestation
and 3 events; 100 received disputes; 1,000 datasets on disk (a root dataset's seed and source
blocks each, created through the repository as a follower stores them). A daemon (no IPFS, no
gossip) runs on it; ``odf-node backup FILE`` (the CLI, end to end: process start included) is
timed without and with ``--datasets``, median of ``--runs``; then ``odf-node restore`` of the
full archive into a new home. Prints one JSON object. The bound the issue sets: < 10 s.

    make bench-backup   # in a loopback-only namespace (unshare -rn), as the Makefile runs it
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: d{i}
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "city STRING", "population BIGINT"]
      merge:
        kind: Append
"""


def build_home(home: Path, n: int) -> None:
    from coordinator.identity import generate_private_key
    from coordinator.metadata.snapshot import snapshots_from_yaml
    from coordinator.storage.repository import DatasetRepository
    from node.home import NodeHome, system_clock
    from node.state import NodeState

    h = NodeHome(home)
    h.init()
    (home / "config.toml").write_text(
        "[rpc]\nport = 0\n[http]\nport = 0\n[p2p]\nenabled = false\nport = 0\n"
        '[ipfs]\nmode = "none"\n'
    )
    # Not durable: building the fixture is not what is measured (fsyncs cost ~80 s here).
    repo = DatasetRepository(
        h.datasets_path, h.dataset_keys_path, clock=system_clock, durable=False
    )
    for i in range(n):
        repo.create_from_snapshot(snapshots_from_yaml(SNAPSHOT.format(i=i))[0])
        # Followed, not owned: a follower keeps no dataset key.
        for key in h.dataset_keys_path.glob("*.key"):
            key.unlink()
    with NodeState.open(home / "state.db", time.time_ns) as st, st.batch():
        for i in range(n):
            did = generate_private_key().dataset_id().as_did_str()
            head = "f1620" + f"{i:064x}"
            st.subscribe(did, f"d{i}", None)
            st.record_accepted_head(did, 0, 1, head, "12D3KooWpeer", b"e" * 300)
            st.record_verification(did, head, "verified", "ok", 0.5)
            st.add_attestation(
                did, head, "verified", "did:key:z6Mk", b"a" * 400 + bytes(str(i), "ascii"), True
            )
            if i < 100:
                st.add_dispute(
                    did,
                    head,
                    "replay-mismatch",
                    "did:key:z6Mk",
                    b"d" * 400 + bytes(str(i), "ascii"),
                    False,
                    "x",
                )
            for k in range(3):
                st.log_event("head.accepted", did, {"head": head, "k": k})


def cli(home: Path, *args: str) -> tuple[float, dict]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return took, json.loads(proc.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", type=int, default=1000, help="subscriptions and datasets")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    from daemon_harness import NodeProcess

    work = Path(tempfile.mkdtemp(prefix="odf-bench-backup-"))
    try:
        t0 = time.monotonic()
        build_home(work / "home", args.datasets)
        built = time.monotonic() - t0
        node = NodeProcess(work / "home", "node")
        node.launch()
        try:
            node.wait_ready(120)
            results: dict[str, object] = {
                "subscriptions": args.datasets,
                "home_built_s": round(built, 1),
            }
            for label, extra in (("state_and_keys", ()), ("with_datasets", ("--datasets",))):
                times = []
                for r in range(args.runs):
                    took, summary = cli(
                        work / "home", "backup", str(work / f"{label}-{r}.tar"), *extra
                    )
                    times.append(took)
                results[label] = {
                    "median_s": round(statistics.median(times), 3),
                    "runs_s": [round(t, 3) for t in times],
                    "in_process_s": summary["seconds"],
                    "files": summary["files"],
                    "bytes": summary["bytes"],
                    "subscriptions": summary["subscriptions"],
                    "datasets": len(summary["datasets"]),
                }
                assert summary["subscriptions"] == args.datasets
        finally:
            node.stop()
        took, restored = cli(work / "restored", "restore", str(work / "with_datasets-0.tar"))
        assert restored["subscriptions"] == args.datasets and restored["datasets"] == args.datasets
        results["restore_s"] = round(took, 3)
        results["within_10_s"] = all(
            v["median_s"] < 10 for v in results.values() if isinstance(v, dict)
        )
        print(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
