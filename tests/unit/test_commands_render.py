"""The human form of the commands' results, offline (typer's runner on a real home, no daemon).

The renderings get the typed result (``Command.result_type``) built from the command's JSON,
the same JSON a daemon answers; these pin what they print and the exit statuses read from it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coordinator.multiformats import Multihash
from node.cli import app
from node.commands.cli import err as err_out
from node.commands.cli import out as cli_out
from node.state import NodeState

SNAPSHOT = """\
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
"""
DID = "did:odf:fed01" + "ab" * 32
HEAD = Multihash.sha3_256(b"a head").to_multibase()
SIGNER = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def run(home: Path, *args: str) -> tuple[int, str]:
    # The CLI's consoles are made when node.commands.cli is first imported, and read the
    # terminal's width then (80 in a test worker without one): set it here, for every test.
    cli_out.width = err_out.width = 200
    result = CliRunner().invoke(app, [*args, "--home", str(home)], env={"COLUMNS": "200"})
    return result.exit_code, result.output


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    assert run(h, "init")[0] == 0
    return h


def test_dataset_commands_render_their_results(home: Path, tmp_path: Path) -> None:
    snap = tmp_path / "s.yaml"
    snap.write_text(SNAPSHOT)
    code, text = run(home, "dataset", "create", str(snap))
    assert code == 0 and text.startswith("created cities did:odf:"), text
    csv = tmp_path / "c.csv"
    csv.write_text("A,100\nB,2000000\n")
    code, text = run(home, "dataset", "ingest", "cities", str(csv))
    assert code == 0 and re.fullmatch(r"committed \d block\(s\), 2 record\(s\); head f\w+\n", text)
    code, text = run(home, "dataset", "list")
    assert code == 0 and "cities" in text and "root" in text, text
    code, text = run(home, "dataset", "verify", "cities", "--integrity")
    assert code == 0 and "OK: 4 blocks, 1 data files, 0 checkpoints checked" in text, text
    code, text = run(home, "dataset", "log", "cities")
    assert code == 0 and "AddPushSource" in text and "Seed" in text, text
    out = tmp_path / "out.csv"
    code, text = run(home, "dataset", "export", "cities", str(out), "--format", "csv")
    assert code == 0 and re.search(r"Wrote 2 records of did:odf:\w+ at f\w+ to ", text), text
    assert f"{out} (csv, {out.stat().st_size} bytes)" in text.replace("\n", "")
    code, text = run(home, "dataset", "schedule", "cities", "--off")
    assert code == 0 and text == "cities: no schedule\n", text
    code, text = run(home, "flows")
    assert code == 0 and "trigger" in text and "last error" in text, text


def test_a_failed_verification_renders_its_problems_and_exits_2(home: Path, tmp_path: Path) -> None:
    snap = tmp_path / "s.yaml"
    snap.write_text(SNAPSHOT)
    assert run(home, "dataset", "create", str(snap))[0] == 0
    blocks = next((home / "datasets").iterdir()) / "blocks"
    victim = sorted(blocks.iterdir())[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    code, text = run(home, "dataset", "verify", "cities")
    assert code == 2 and "✗" in text and "FAILED: " in text, text


def test_backup_renders_what_it_wrote(home: Path, tmp_path: Path) -> None:
    code, text = run(home, "backup", str(tmp_path / "b.tar"))
    assert code == 0 and text.startswith("Backed up node did:key:"), text
    assert "(datasets not included: --datasets)" in text and " bytes in " in text, text


def test_trust_records_render_as_tables(home: Path, tmp_path: Path) -> None:
    with NodeState.open(home / "state.db", time.time_ns) as s:
        s.add_attestation(DID, HEAD, "verified", SIGNER, b"envelope", False)
        s.add_dispute(DID, HEAD, "replay-mismatch", SIGNER, b"dispute", False, "the detail")
    code, text = run(home, "attestations")
    assert code == 0 and "verified" in text and DID[:20] in text, text
    code, text = run(home, "disputes")
    assert code == 0 and "replay-mismatch" in text and "the detail" in text, text
    # The node made no attestation of its own: the export is empty, said on stderr.
    code, text = run(home, "attestations", "--format", "in-toto")
    assert code == 0 and "(none)" in text, text
    bad = tmp_path / "e.json"
    bad.write_text(json.dumps({"payloadType": "x", "payload": "", "signatures": []}))
    code, text = run(home, "attestation", "verify", str(bad))
    assert code == 2 and "✗" in text, text
