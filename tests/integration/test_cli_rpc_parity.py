"""Every data-printing command returns the same JSON keys offline and through a running daemon.

The same CLI command lines run against two homes: one with no daemon (the CLI runs the use
cases itself, on the offline Application) and one whose daemon is running (the CLI forwards to
its JSON-RPC methods, which run the same use cases). The key sets of the results must be
identical at every level. The test enumerates the declarations (``node/commands/catalog.py``):
a command with a CLI path is either run here or declares why it cannot be compared
(``Command.parity``), and then its documented offline behaviour is checked instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, NodeProcess
from netns import ipfs_node, require_loopback_only  # noqa: F401 - pytest fixture

from coordinator.multiformats import Multihash
from node.app.results import PublishResult
from node.commands.catalog import COMMANDS
from node.commands.home import HOME_COMMANDS
from node.ipfs.embedded import EmbeddedIpfs
from node.state import NodeState

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
    """The structure of a JSON value: dict keys (recursively), list element shapes.

    Every element of a list of objects must have the first one's keys (rows are homogeneous);
    a list of plain values (empty or not) is just a list.
    """
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        shapes = [shape(v) for v in value if isinstance(v, dict | list)]
        keys = {tuple(sorted(s)) for s in shapes if isinstance(s, dict)}
        assert len(keys) <= 1, f"rows with different keys: {keys}"
        return [shapes[0]] if shapes else "list"
    return "value"


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home), "--json"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def cli(home: Path, *args: str) -> Any:
    proc = run_cli(home, *args)
    assert proc.returncode in (0, 2), proc.stderr + proc.stdout
    return json.loads(proc.stdout)


DID = "did:odf:fed01" + "ab" * 32
FOLLOWED = "did:odf:fed01" + "cd" * 32
HEAD = Multihash.sha3_256(b"a head").to_multibase()
SIGNER = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def seed_state(home: Path) -> None:
    """The same evidence in both homes' state (before the daemon starts), so that no list a
    command prints is empty on either side: a list of nothing has no keys to compare."""
    with NodeState.open(home / "state.db", time.time_ns) as s:
        s.upsert_peer("12D3KooWParity", ["/ip4/127.0.0.1/tcp/9/p2p/12D3KooWParity"], 1.5)
        s.add_attestation(DID, HEAD, "verified", SIGNER, b"attestation envelope", False)
        s.add_dispute(DID, HEAD, "replay-mismatch", SIGNER, b"dispute envelope", False, "x")
        s.add_equivocation_proof(DID, b"equivocation proof")
        item = s.enqueue("verify", DID, HEAD, {})
        claimed = s.claim(time.time_ns())
        assert claimed is not None and claimed.id == item.id
        s.complete(item.id)  # done: the daemon never runs it


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
    seed_state(offline)
    daemon = NodeProcess(base / "daemon", "daemon", config={"ipfs": {"mode": "none"}})
    daemon.init()
    seed_state(daemon.home)
    daemon.launch()
    try:
        daemon.wait_ready()
        yield offline, daemon
    finally:
        daemon.stop()


def test_every_command_has_one_json_shape(
    homes: tuple[Path, NodeProcess],
    ipfs_node: EmbeddedIpfs,  # noqa: F811
    tmp_path: Path,
) -> None:
    offline, daemon = homes
    snap = tmp_path / "s.yaml"
    snap.write_text(SNAPSHOTS)
    csv = tmp_path / "c.csv"
    csv.write_text(
        "event_time,city,population\n2020-01-01T00:00:00Z,A,100\n2020-01-02T00:00:00Z,B,5\n"
    )
    # An in-toto export to check (the frozen vectors: an attestation and a dispute).
    envelopes = ROOT / "tests" / "golden" / "data" / "intoto_vectors.jsonl"
    # A query commitment kamu made (tests/unit/test_query_proofs.py), its inputHash forged:
    # the offline check refuses it the same way with and without a daemon.
    commitment = json.loads((ROOT / "tests/golden/data/kamu_query_commitment.json").read_text())
    commitment["commitment"]["inputHash"] = Multihash.sha3_256(b"forged").to_multibase()
    forged = tmp_path / "forged-commitment.json"
    forged.write_text(json.dumps(commitment))
    # In order: later commands read what earlier ones made.
    runs: list[tuple[str, tuple[str, ...]]] = [
        ("dataset.create", ("dataset", "create", str(snap))),
        ("dataset.ingest", ("dataset", "ingest", "cities", str(csv))),
        ("dataset.transform", ("dataset", "transform", "big")),
        ("dataset.verify", ("dataset", "verify", "big")),
        ("dataset.verify", ("dataset", "verify", "cities", "--integrity")),
        ("dataset.list", ("dataset", "list")),
        ("dataset.log", ("dataset", "log", "cities")),
        ("data.tail", ("dataset", "tail", "cities", "-n", "1")),
        ("subscriptions.add", ("subscribe", FOLLOWED, "--alias", "followed")),
        ("subscriptions.add", ("subscribe", DID)),
        ("subscriptions.remove", ("unsubscribe", DID)),
        ("subscriptions.list", ("subscriptions",)),
        ("node.status", ("status",)),
        ("node.events", ("events", "--kind", "dataset.create")),
        ("peers.list", ("peers",)),
        ("work.list", ("work", "--state", "done")),
        ("attestations.list", ("attestations", DID)),
        ("disputes.list", ("disputes",)),
        ("equivocations.list", ("equivocations",)),
        ("attestation.verify", ("attestation", "verify", str(envelopes))),
        ("query.verify", ("query", "verify", str(forged))),
        # Before any trigger: the daemon runs what is scheduled, the offline CLI does not, so
        # the runs would differ after it.
        ("flows.list", ("flows",)),
        ("dataset.schedule", ("dataset", "schedule", "big", "--on-input")),
    ]
    data_printing = {c.name for c in COMMANDS if c.cli is not None}
    documented = {c.name for c in COMMANDS if c.cli is not None and c.parity is not None}
    covered = {name for name, _ in runs} | {"dataset.pull"}  # the pull runs below
    assert covered == data_printing - documented, "a command escapes the parity test"
    assert documented == {
        "peers.connect",
        "dataset.publish",
        "node.backup",
        "dataset.export",
        "console.login",
    }

    results: dict[str, dict[tuple[str, ...], Any]] = {"offline": {}, "daemon": {}}
    for _name, cmd in runs:
        results["offline"][cmd] = cli(offline, *cmd)
        results["daemon"][cmd] = cli(daemon.home, *cmd)
    # A pull from the other home's dataset directory (a local path source).
    did = results["offline"][runs[0][1]][0]["id"]
    pull = (
        "dataset",
        "pull",
        str(offline / "datasets" / did.removeprefix("did:odf:")),
        "--as",
        "copy",
    )
    cli(tmp_path / "h2", "init")  # a command on a path that is not a home fails
    results["offline"][pull] = cli(tmp_path / "h2", *pull)
    results["daemon"][pull] = cli(daemon.home, *pull)
    for cmd in [*(c for _, c in runs), pull]:
        a, b = results["offline"][cmd], results["daemon"][cmd]
        assert a != [] and b != [], (cmd, "nothing to compare")
        assert shape(a) == shape(b), (cmd, a, b)
    # A homeless command (it checks the given bytes alone) answers the same on a path that
    # is no node home, and makes nothing there: the user handed an export needs no node.
    nowhere = tmp_path / "no-home"
    homeless = {c.name for c in COMMANDS if c.homeless is not None}
    assert homeless == {"attestation.verify"}
    for name, cmd in runs:
        if name in homeless:
            assert cli(nowhere, *cmd) == results["offline"][cmd], cmd
    assert not nowhere.exists()
    # The daemon's results are the RPC methods' results (the CLI only forwards them).
    rows = daemon.call("dataset.list")
    assert shape(rows) == shape(results["offline"][("dataset", "list")])
    transform = results["daemon"][("dataset", "transform", "big")]
    assert transform["up_to_date"] is False and transform["new_blocks"]
    assert isinstance(transform["publish_work_id"], int)  # a daemon queues publication
    assert results["offline"][("dataset", "transform", "big")]["publish_work_id"] is None
    status = results["offline"][("status",)]
    assert status["uptime_s"] is None and status["datasets"] == 2  # offline: nothing runs
    assert results["daemon"][("status",)]["uptime_s"] >= 0

    # dataset publish: one result type; a daemon queues it, offline it goes to IPFS at once.
    queued = cli(daemon.home, "dataset", "publish", "cities")
    published = cli(offline, "dataset", "publish", "cities", "--ipfs-api", ipfs_node.api_url)
    fields = set(PublishResult.__dataclass_fields__)
    assert set(queued) == set(published) == fields
    assert isinstance(queued["work_id"], int) and queued["cid"] is None
    assert published["work_id"] is None and published["url"] == f"ipfs://{published['cid']}"
    # backup: in-process both ways (beside the daemon it reads the home); one file per home.
    backups = {
        name: cli(home, "backup", str(tmp_path / f"{name}.tar"), "--datasets")
        for name, home in (("offline", offline), ("daemon", daemon.home))
    }
    assert shape(backups["offline"]) == shape(backups["daemon"])
    assert backups["daemon"]["node_id"] == results["daemon"][("status",)]["node_id"]
    assert {d["alias"] for d in backups["daemon"]["datasets"]} >= {"cities", "big"}
    # export: in-process both ways (it reads dataset files); one file per home, same rows.
    exports = {
        name: cli(
            home, "dataset", "export", "cities", str(tmp_path / f"{name}.csv"), "--format", "csv"
        )
        for name, home in (("offline", offline), ("daemon", daemon.home))
    }
    assert shape(exports["offline"]) == shape(exports["daemon"])
    assert exports["offline"]["rows"] == exports["daemon"]["rows"] == 2
    # connect needs the daemon (it dials a peer): offline, one clear line naming `odf-node run`.
    for args in (
        ("connect", "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWParity"),
        ("connect", "--ipfs", "/ip4/127.0.0.1/tcp/9"),
    ):
        proc = run_cli(offline, *args)
        assert proc.returncode == 1 and "odf-node run" in proc.stderr, proc.stderr


def test_every_home_command_runs(homes: tuple[Path, NodeProcess], tmp_path: Path) -> None:
    """The home commands (``node/commands/home.py``) and ``ui``: each runs here, in the CLI's
    process, with and without a daemon on the home, or says in one line why it cannot."""
    offline, daemon = homes
    ran: set[str] = set()

    def refused(home: Path, *args: str, naming: str) -> None:
        proc = run_cli(home, *args)
        assert proc.returncode == 1 and naming in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr

    # init: both homes were made by it; again, it says so.
    again = cli(daemon.home, "init")
    assert again["created"] is False and again["home"] == str(daemon.home)
    assert again["node_id"] == daemon.call("node.status")["node_id"]
    ran.add("node.init")
    # rpc: the daemon's own answer; offline, one line naming `odf-node run`.
    assert cli(daemon.home, "rpc", "node.status")["node_id"] == again["node_id"]
    assert cli(daemon.home, "rpc", "node.events", '{"limit": 1}') == daemon.call(
        "node.events", limit=1
    )
    refused(offline, "rpc", "node.status", naming="odf-node run")
    refused(daemon.home, "rpc", "node.status", "[1", naming="params are not JSON")
    ran.add("node.rpc")
    # sql: data.query's answer, the same shape with and without a daemon.
    one = {home: cli(home, "sql", "select 1 as one") for home in (offline, daemon.home)}
    assert shape(one[offline]) == shape(one[daemon.home])
    assert one[offline]["rows"] == one[daemon.home]["rows"] == [[1]]
    ran.add("data.sql")
    # ui (console.login): a one-time URL from the daemon; offline, one line naming `odf-node run`.
    login = cli(daemon.home, "ui")
    assert login["url"].startswith(daemon.url.removesuffix("/rpc") + "/ui/login#")
    refused(offline, "ui", naming="odf-node run")
    # restore: a backup of the offline home made into a new home with the same node id.
    archive = tmp_path / "offline.tar"
    cli(offline, "backup", str(archive))
    restored_home = tmp_path / "restored"
    restored = cli(restored_home, "restore", str(archive))
    offline_id = cli(offline, "status")["node_id"]
    assert restored["node_id"] == offline_id and restored["home"] == str(restored_home)
    refused(restored_home, "restore", str(archive), naming="")
    ran.add("node.restore")
    # key rotate, then revoke the retired key; refused while a daemon runs on the home.
    # (a backup leaves keys/next.key out: its owner keeps a copy off the node)
    rotated = cli(restored_home, "key", "rotate", "--next-key", str(offline / "keys" / "next.key"))
    assert rotated["old_id"] == offline_id and rotated["new_id"] != offline_id
    revoked = cli(restored_home, "key", "revoke")
    assert revoked["node_id"] == offline_id
    ran |= {"key.rotate", "key.revoke"}
    refused(daemon.home, "key", "rotate", naming="daemon")

    assert ran == {c.name for c in HOME_COMMANDS if c.parity is None}, "a command escapes"
