"""The odf-node CLI on a real home directory (typer's runner, no daemon)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from node.cli import app

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
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Ledger
        primaryKey: [city]
---
kind: DatasetSnapshot
version: 1
content:
  name: big-cities
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: spark
        query: SELECT * FROM cities WHERE population > 1000000
"""


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.output


def test_create_list_log_verify(tmp_path: Path) -> None:
    home = tmp_path / "home"
    code, text = run(home, "init", "--json")
    assert code == 0, text
    assert json.loads(text)["node_id"].startswith("did:key:z6Mk")
    snap = tmp_path / "s.yaml"
    snap.write_text(SNAPSHOTS)
    code, text = run(home, "dataset", "create", str(snap), "--json")
    assert code == 0, text
    created = json.loads(text)
    assert [c["alias"] for c in created] == ["cities", "big-cities"]
    code, text = run(home, "dataset", "list", "--json")
    rows = {r["alias"]: r for r in json.loads(text)}
    assert rows["cities"]["kind"] == "root" and rows["cities"]["blocks"] == 2
    assert rows["big-cities"]["kind"] == "derivative"
    code, text = run(home, "dataset", "log", "big-cities", "-o", "json")
    assert code == 0, text
    log = json.loads(text)
    assert log[0]["block"]["event"]["kind"] == "SetTransform"
    assert log[0]["block"]["event"]["inputs"][0]["datasetRef"] == created[0]["id"]
    code, text = run(home, "dataset", "verify", "cities", "--json")
    assert code == 0 and json.loads(text)["ok"] is True


def test_errors_are_one_line_and_exit_1(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "init")[0] == 0
    code, text = run(home, "dataset", "log", "nope")
    assert code == 1 and "dataset not found: nope" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: DatasetSnapshot\nversion: 1\n"
        "content: {name: x, kind: Root, metadata: [{kind: Nope}]}\n"
    )
    code, text = run(home, "dataset", "create", str(bad))
    assert code == 1 and "error" in text
    code, text = run(home, "dataset", "create", str(tmp_path / "missing.yaml"))
    assert code == 1 and "cannot read" in text


def test_verify_detects_corrupted_block(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "init")[0] == 0
    snap = tmp_path / "s.yaml"
    snap.write_text(SNAPSHOTS.split("---", maxsplit=1)[0])
    assert run(home, "dataset", "create", str(snap))[0] == 0
    blocks = next((home / "datasets").iterdir()) / "blocks"
    victim = sorted(blocks.iterdir())[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    code, text = run(home, "dataset", "verify", "cities", "--json")
    assert code == 2
    assert json.loads(text)["ok"] is False


def test_ingest_from_cli(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "init")[0] == 0
    snap = tmp_path / "s.yaml"
    snap.write_text(SNAPSHOTS.split("---", maxsplit=1)[0])
    assert run(home, "dataset", "create", str(snap))[0] == 0
    csv = tmp_path / "c.csv"
    csv.write_text("A,100\nB,2000000\n")
    code, text = run(home, "dataset", "ingest", "cities", str(csv), "--json")
    assert code == 0, text
    assert json.loads(text)["records"] == 2
    code, text = run(home, "dataset", "verify", "cities", "--json")
    report = json.loads(text)
    assert code == 0 and report["ok"] and report["data_files_checked"] == 1
    # Ledger: the same keys again add nothing; a malformed file is refused with its row.
    code, text = run(home, "dataset", "ingest", "cities", str(csv), "--json")
    assert code == 0 and json.loads(text)["records"] == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("C,300\nD,notanumber\n")
    code, text = run(home, "dataset", "ingest", "cities", str(bad))
    assert code == 1 and "population" in text and "row 2" in text
    code, text = run(home, "dataset", "ingest", "cities", str(tmp_path / "missing.csv"))
    assert code == 1 and "not found" in text


LINKED_SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: photos
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: NdJson
        schema: ["name STRING", "image STRING"]
      merge:
        kind: Append
"""


def test_ingest_linked_objects_from_cli(tmp_path: Path) -> None:
    from coordinator.multiformats import Multihash

    home = tmp_path / "home"
    assert run(home, "init")[0] == 0
    snap = tmp_path / "s.yaml"
    snap.write_text(LINKED_SNAPSHOT)
    assert run(home, "dataset", "create", str(snap))[0] == 0
    obj = tmp_path / "cat.jpg"
    obj.write_bytes(b"\xff\xd8 not really a jpeg")
    h = Multihash.sha3_256(obj.read_bytes()).to_multibase()
    rows = tmp_path / "rows.ndjson"
    rows.write_text(f'{{"name": "cat", "image": "{h}"}}\n')
    # Without the object the ingest is refused (referential integrity) and nothing is committed.
    code, text = run(home, "dataset", "ingest", "photos", str(rows), "--link-column", "image")
    assert code == 1 and h in text
    code, text = run(
        home, "dataset", "ingest", "photos", str(rows),
        "--link-column", "image", "--object", str(obj), "--json",
    )  # fmt: skip
    assert code == 0, text
    assert json.loads(text)["linked_objects"] == {"num_objects_naive": 1, "size_naive": 20}
    code, text = run(home, "dataset", "log", "photos", "-o", "json")
    add_data = json.loads(text)[0]["block"]["event"]
    assert add_data["extra"] == {
        "opendatafabric.org/linkedObjects": {"numObjectsNaive": 1, "sizeNaive": 20}
    }


def test_create_refuses_a_fifo_a_directory_and_a_device_without_blocking(tmp_path: Path) -> None:
    """A snapshot must be a regular file: a FIFO with no writer used to block ``create`` forever."""
    import os
    import threading

    home = tmp_path / "home"
    assert run(home, "init")[0] == 0
    fifo = tmp_path / "snap.fifo"
    os.mkfifo(fifo)
    outcomes: dict[str, tuple[int, str]] = {}

    def attempt() -> None:
        for name, path in (("fifo", fifo), ("dir", tmp_path), ("device", Path("/dev/zero"))):
            outcomes[name] = run(home, "dataset", "create", str(path))

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # unblock the old behaviour so the test fails instead of hanging
        with open(fifo, "wb"):
            pass
        worker.join(timeout=5)
        raise AssertionError("dataset create blocked on a FIFO")
    for name, kind in (("fifo", "a FIFO"), ("dir", "a directory"), ("device", "a device")):
        code, text = outcomes[name]
        assert code == 1, (name, text)
        assert f"is {kind}" in text and "regular file" in text, text
    assert json.loads(run(home, "dataset", "list", "--json")[1]) == []


def test_create_reads_standard_input_with_a_dash(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "init")[0] == 0
    result = CliRunner().invoke(
        app, ["dataset", "create", "-", "--json", "--home", str(home)], input=SNAPSHOTS
    )
    assert result.exit_code == 0, result.output
    assert [c["alias"] for c in json.loads(result.output)] == ["cities", "big-cities"]
