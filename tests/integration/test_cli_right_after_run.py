"""A dataset command typed right after ``odf-node run &`` (the README's walk-through).

The command looks for a daemon before the daemon has taken the home's lock; whichever way the
race goes, the command must succeed: through the daemon's RPC once the daemon holds the home,
or on the home directly before that (the daemon then opens what was written).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_harness import ROOT, NodeProcess

pytestmark = pytest.mark.integration


def test_dataset_create_right_after_run_succeeds(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "node", "race", config={"ipfs": {"mode": "none"}})
    node.init()
    node.launch()  # no wait: the next command races the daemon's start-up
    try:
        created = subprocess.run(
            [
                sys.executable,
                "-m",
                "node.cli",
                "dataset",
                "create",
                "examples/cities.yaml",
                "--home",
                str(node.home),
                "--json",
            ],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert created.returncode == 0, created.stderr
        aliases = {d["alias"] for d in json.loads(created.stdout)}
        assert {"cities", "big-cities"} <= aliases
        node.wait_ready()
        deadline = time.monotonic() + 30
        listed: set[str] = set()
        while time.monotonic() < deadline and not aliases <= listed:
            listed = {d["alias"] for d in node.call("dataset.list")}
            time.sleep(0.5)
        assert aliases <= listed
    finally:
        node.stop()
