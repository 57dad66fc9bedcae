"""Every dataset command returns the same JSON shape offline and through a running daemon.

The same CLI command lines run against two homes: one with no daemon (the CLI runs the use
cases itself) and one whose daemon is running (the CLI forwards to its JSON-RPC methods, which
run the same use cases). The key sets of the results must be identical at every level.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, NodeProcess
from netns import require_loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SNAPSHOTS = """\
kind: DatasetSnapshot
version: 1
content:
  name: cities
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
---
kind: DatasetSnapshot
version: 1
content:
  name: big
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: spark
        query: SELECT op, event_time, city, population FROM cities WHERE population > 10
"""


def shape(value: Any) -> Any:
    """The structure of a JSON value: dict keys (recursively), list element shapes, types."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        shapes = [shape(v) for v in value]
        return [shapes[0]] if shapes else []
    return "value"


def cli(home: Path, *args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home), "--json"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 2), proc.stderr + proc.stdout
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, NodeProcess]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("parity")
    offline = base / "offline"
    subprocess.run(
        [sys.executable, "-m", "node.cli", "init", "--home", str(offline)],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    daemon = NodeProcess(base / "daemon", "daemon", config={"ipfs": {"mode": "none"}})
    daemon.init()
    daemon.launch()
    try:
        daemon.wait_ready()
        yield offline, daemon
    finally:
        daemon.stop()


def test_every_dataset_command_has_one_json_shape(
    homes: tuple[Path, NodeProcess], tmp_path: Path
) -> None:
    offline, daemon = homes
    snap = tmp_path / "s.yaml"
    snap.write_text(SNAPSHOTS)
    csv = tmp_path / "c.csv"
    csv.write_text(
        "event_time,city,population\n2020-01-01T00:00:00Z,A,100\n2020-01-02T00:00:00Z,B,5\n"
    )
    commands: list[tuple[str, ...]] = [
        ("dataset", "create", str(snap)),
        ("dataset", "ingest", "cities", str(csv)),
        ("dataset", "transform", "big"),
        ("dataset", "verify", "big"),
        ("dataset", "verify", "cities", "--integrity"),
        ("dataset", "list"),
    ]
    results: dict[str, dict[tuple[str, ...], Any]] = {"offline": {}, "daemon": {}}
    for cmd in commands:
        results["offline"][cmd] = cli(offline, *cmd)
        results["daemon"][cmd] = cli(daemon.home, *cmd)
    # A pull from the other home's dataset directory (a local path source).
    src = offline / "datasets"
    did = results["offline"][commands[0]][0]["id"]
    pull = ("dataset", "pull", str(src / did.removeprefix("did:odf:")), "--as", "copy")
    results["offline"][pull] = cli(tmp_path / "h2", *pull)
    results["daemon"][pull] = cli(daemon.home, *pull)
    for cmd in [*commands, pull]:
        a, b = results["offline"][cmd], results["daemon"][cmd]
        assert shape(a) == shape(b), (cmd, a, b)
    # The daemon's results are the RPC methods' results (the CLI only forwards them).
    rows = daemon.call("dataset.list")
    assert shape(rows) == shape(results["offline"][("dataset", "list")])
    transform = results["daemon"][("dataset", "transform", "big")]
    assert transform["up_to_date"] is False and transform["new_blocks"]
    assert isinstance(transform["publish_work_id"], int)  # a daemon queues publication
    assert results["offline"][("dataset", "transform", "big")]["publish_work_id"] is None
