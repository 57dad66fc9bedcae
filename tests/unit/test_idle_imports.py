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

# The daemon's start-up modules: its entry (``odf-node run`` parses its options, then execs
# ``python -m node.daemon``), the composition root and what it starts lazily.
DAEMON_MODULES = (
    "node.daemon.__main__",
    "node.daemon.daemon",
    "node.commands.catalog",
    "node.daemon.rpc_api",
    "node.daemon.logs",
    "node.rpc.server",
    "node.console.web",
    "node.transfer.server",
    "p2p.libp2p_process",
    "p2p.discovery",
)
# numpy: the node state uses plain sqlite3 (sqlite-utils would import numpy) and the core loads
# the flatbuffers runtime without its optional numpy support (coordinator/flatbuffers_runtime.py).
# shapefile (pyshp) is light, but only an EsriShapefile read needs it.
HEAVY = (
    "pyarrow",
    "pyspark",
    "datafusion",
    "grpc",
    "pandas",
    "numpy",
    "sqlite_utils",
    "shapefile",
)
# The CLI toolkit stays in the short-lived ``odf-node run`` process that execs the daemon.
CLI_TOOLKIT = ("typer", "click", "rich")


def _loaded(modules: tuple[str, ...]) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY + CLI_TOOLKIT)!r} if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(out.stdout))


def test_idle_daemon_imports_no_heavy_library() -> None:
    assert _loaded(DAEMON_MODULES) == []


def test_the_check_sees_a_heavy_import() -> None:
    # The same probe does report them once a work-path module is imported.
    assert _loaded(("coordinator.ingest.push",)) == ["numpy", "pyarrow"]
    assert _loaded(("coordinator.ingest.esri_shapefile",)) == ["shapefile"]
    assert _loaded(("node.cli",)) == ["rich", "typer"]


def test_flatbuffers_runtime_without_numpy_writes_the_same_bytes() -> None:
    # The numpy-free runtime (what the core loads) and the stock one with numpy (loaded first,
    # as a library importing flatbuffers before the core would) write the same block bytes.
    code = (
        "import sys\n"
        "if sys.argv[1] == 'stock': import flatbuffers\n"
        "from coordinator.metadata import encode_block, model as m\n"
        "from coordinator.metadata.timestamp import Timestamp\n"
        "import flatbuffers.builder\n"
        "block = m.MetadataBlock(system_time=Timestamp.parse('2050-01-01T12:00:00Z'),\n"
        "    sequence_number=0, event=m.SetInfo(description='foo'))\n"
        "print(flatbuffers.builder.np is not None, encode_block(block, version=2).hex())\n"
    )
    runs = {
        kind: subprocess.run(
            [sys.executable, "-c", code, kind],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        for kind in ("stock", "core")
    }
    stock, core = (runs[k].stdout.split() for k in ("stock", "core"))
    assert stock[0] == "True", runs["stock"].stderr
    assert core[0] == "False", runs["core"].stderr
    # kamu-cli's bytes for this block (tests/golden/test_block_vectors.py, SET_INFO_V2_HEX).
    assert stock[1] == core[1]
    assert core[1].startswith("140000000000000000000a0014000c0008000400") and len(core[1]) == 224


def test_gossip_process_leaves_unused_libp2p_subsystems_unloaded() -> None:
    # What the gossip process imports before it starts its host: libp2p's mDNS, UPnP, AutoTLS
    # and metrics packages are placeholders there (p2p/libp2p_unloaded.py), and using one is a
    # typed error rather than a network call.
    code = (
        "import json, sys\n"
        "from p2p import libp2p_unloaded\n"
        "libp2p_unloaded.install()\n"
        "import p2p.libp2p_child\n"
        "import libp2p\n"
        "from libp2p.pubsub.gossipsub import GossipSub\n"
        "real = sorted(m for m in ('zeroconf', 'miniupnpc', 'httpx', 'requests',\n"
        "    'prometheus_client', 'rich', 'click', 'pygments', 'urllib3')\n"
        "    if m in sys.modules\n"
        "    and not isinstance(sys.modules[m], libp2p_unloaded._PlaceholderModule))\n"
        "import zeroconf\n"
        "try:\n"
        "    zeroconf.Zeroconf()\n"
        "    error = None\n"
        "except libp2p_unloaded.Libp2pSubsystemUnloaded as e:\n"
        "    error = str(e)\n"
        "print(json.dumps([real, error]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    real, error = json.loads(out.stdout)
    assert real == []
    assert error is not None and "mDNS" in error
