"""An idle daemon does not load the heavy data libraries (issue 15: idle RSS within 150 MB).

pyarrow (with numpy ~50 MB RSS), Spark, DataFusion and gRPC are needed only when work happens:
an ingest, a transform, a replay, a pull or an engine start import them at the point of use.
This imports what ``odf-node run`` imports up to serving RPC, the console, HTTP transfer and
gossip, in a fresh interpreter, and fails when a module-level import brings one of them back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The daemon's start-up modules: the CLI, the composition root and what it starts lazily.
DAEMON_MODULES = (
    "node.cli",
    "node.daemon.daemon",
    "node.daemon.api",
    "node.daemon.rpc_api",
    "node.daemon.logs",
    "node.rpc.server",
    "node.console.web",
    "node.transfer.server",
    "p2p.libp2p_process",
    "p2p.discovery",
)
# numpy is not listed: sqlite_utils (the node state) and flatbuffers import it when installed.
HEAVY = ("pyarrow", "pyspark", "datafusion", "grpc", "pandas")


def _loaded(modules: tuple[str, ...]) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(out.stdout))


def test_idle_daemon_imports_no_heavy_library() -> None:
    assert _loaded(DAEMON_MODULES) == []


def test_the_check_sees_a_heavy_import() -> None:
    # The same probe does report them once a work-path module is imported.
    assert _loaded(("coordinator.ingest.push",)) == ["pyarrow"]
