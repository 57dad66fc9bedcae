"""Backup of a running daemon, restored into a new home and started: the same node id, the
same subscriptions and the same datasets at the same heads (no IPFS, no gossip: fast start).

``odf-node backup`` runs in the CLI beside the daemon (SQLite's online backup of ``state.db``)
while the daemon keeps committing; the restored node is started as a daemon of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess

from coordinator.identity import generate_private_key

pytestmark = pytest.mark.integration

FAST = {"ipfs": {"mode": "none"}, "p2p": {"enabled": False}}


def cli(home: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_backup_of_a_running_daemon_restores_and_starts(tmp_path: Path) -> None:
    owner = NodeProcess(tmp_path / "owner", "owner", config=FAST)
    owner.init()
    owner.launch()
    restored = NodeProcess(tmp_path / "restored", "restored")
    try:
        owner.wait_ready(120)
        owner.call("dataset.create", snapshot_yaml=CITIES_SNAPSHOT.rstrip().removesuffix("---"))
        csv = tmp_path / "c.csv"
        csv.write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n")
        owner.call("dataset.ingest", ref="cities", files=[str(csv)])
        followed = sorted(generate_private_key().dataset_id().as_did_str() for _ in range(20))
        for did in followed:
            owner.call("subscriptions.add", did=did)

        # The daemon keeps writing (events) while the CLI backs it up.
        stop = threading.Event()

        def keep_writing() -> None:
            while not stop.is_set():
                owner.call("dataset.ingest", ref="cities", files=[str(csv)])

        writer = threading.Thread(target=keep_writing)
        writer.start()
        try:
            backup = cli(owner.home, "backup", str(tmp_path / "node.tar"), "--datasets")
        finally:
            stop.set()
            writer.join(120)
        status = owner.call("node.status")
        assert backup["node_id"] == status["node_id"]
        assert backup["subscriptions"] == 20
        backed_heads = {d["id"]: d["head"] for d in backup["datasets"]}
        assert set(backed_heads) == {d["id"] for d in owner.call("dataset.list")}
    finally:
        owner.stop()

    summary = cli(restored.home, "restore", str(tmp_path / "node.tar"))
    assert summary["node_id"] == backup["node_id"] and summary["subscriptions"] == 20
    restored.launch()  # the restored config: random ports, no IPFS, no gossip
    try:
        restored.wait_ready(120)
        assert restored.call("node.status")["node_id"] == backup["node_id"]
        subs = sorted(s["did"] for s in restored.call("subscriptions.list"))
        assert subs == followed
        heads = {d["id"]: d["head"] for d in restored.call("dataset.list")}
        assert heads == backed_heads
        # The restored chain is whole: an integrity check walks every block and data file.
        verify = restored.call("dataset.verify", ref="cities", integrity=True)
        assert verify["ok"], verify
    finally:
        restored.stop()
