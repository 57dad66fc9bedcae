"""``odf-node attestations --format in-toto`` and ``odf-node attestation verify`` on a real home.

The commands run offline (typer's runner, the in-process Application): the export reads the
stored signed messages and the node's copy of the attested block, and the node key seals each
statement; ``attestation verify`` checks the written file. The daemon runs the same use case
over RPC (``tests/integration/test_cli_rpc_parity.py``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coordinator.identity import DatasetId, PrivateKey
from coordinator.multiformats import Multihash
from node.cli import app
from node.home import NodeHome
from node.state import NodeState
from p2p import vectors
from p2p.intoto import seal
from p2p.wire import sign_message

_, _, PEER_KEY = vectors.keys()


def run(home: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def home(tmp_path: Path) -> tuple[Path, str, str]:
    """A home with one dataset, our attestation and dispute of its head, and a peer's
    attestation; returns ``(home, did, node id)``."""
    h = tmp_path / "home"
    assert run(h, "init")[0] == 0
    snap = tmp_path / "s.yaml"
    snap.write_text(
        "kind: DatasetSnapshot\nversion: 1\n"
        "content: {name: x, kind: Root, metadata: [{kind: SetInfo, description: d}]}\n"
    )
    assert run(h, "dataset", "create", str(snap))[0] == 0
    _, out, _ = run(h, "dataset", "list", "--json")
    (ds,) = json.loads(out)
    did, head = DatasetId.parse(ds["id"]), Multihash.from_multibase(ds["head"])
    key = NodeHome(h).node_key()
    ours = dataclasses.replace(vectors.attestation(), node=key.dataset_id(), dataset=did, head=head)
    peers = dataclasses.replace(ours, node=PEER_KEY.dataset_id())
    dispute = dataclasses.replace(vectors.dispute(), node=key.dataset_id(), dataset=did, block=head)
    node_id = key.dataset_id().as_did_key()
    with NodeState.open(h / "state.db", time.time_ns) as s:
        s.add_attestation(
            did.as_did_str(),
            ds["head"],
            "verified",
            node_id,
            sign_message(ours, key).envelope,
            True,
        )
        s.add_attestation(
            did.as_did_str(),
            ds["head"],
            "verified",
            PEER_KEY.dataset_id().as_did_key(),
            sign_message(peers, PEER_KEY).envelope,
            False,
        )
        s.add_dispute(
            did.as_did_str(),
            ds["head"],
            "replay_mismatch",
            node_id,
            sign_message(dispute, key).envelope,
            True,
            dispute.detail,
        )
    return h, did.as_did_str(), node_id


def verify(home: Path, path: Path) -> tuple[int, list[dict[str, Any]]]:
    code, out, _ = run(home, "attestation", "verify", str(path), "--json")
    return code, json.loads(out)


def test_own_attestations_export_as_json_lines_that_verify(
    home: tuple[Path, str, str], tmp_path: Path
) -> None:
    h, did, node_id = home
    code, out, _ = run(h, "attestations", did, "--format", "in-toto")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 1  # ours only by default
    export = tmp_path / "att.jsonl"
    export.write_text(out)
    code, (row,) = verify(h, export)
    assert code == 0 and row["ok"] and row["signer"] == row["node"] == node_id
    assert row["relayed"] is False and row["dataset"] == did
    # The node holds the block: its facts are in the predicate (a SetInfo: no inputs, no data).
    assert row["predicate"]["inputs"] == [] and row["predicate"]["logicalHash"] is None
    code, text, _ = run(h, "attestation", "verify", str(export))
    assert code == 0 and "✓ attestation by " + node_id in text
    # --json: the same envelopes as one array.
    code, out, _ = run(h, "attestations", did, "--format", "in-toto", "--json")
    assert code == 0 and json.loads(out) == [json.loads(lines[0])]


def test_received_attestations_are_relayed_and_name_their_node(
    home: tuple[Path, str, str], tmp_path: Path
) -> None:
    h, did, node_id = home
    code, out, _ = run(h, "attestations", did, "--format", "in-toto", "--received")
    assert code == 0 and len(out.splitlines()) == 2
    export = tmp_path / "all.jsonl"
    export.write_text(out)
    code, rows = verify(h, export)
    assert code == 0 and all(r["ok"] and r["signer"] == node_id for r in rows)
    assert {r["node"] for r in rows} == {node_id, PEER_KEY.dataset_id().as_did_key()}
    assert [r["relayed"] for r in rows if r["node"] != node_id] == [True]
    code, _, err = run(h, "attestations", did, "--received")
    assert code == 1 and "--received goes with --format in-toto" in err


def test_disputes_export_too(home: tuple[Path, str, str], tmp_path: Path) -> None:
    h, did, _ = home
    code, out, _ = run(h, "disputes", did, "--format", "in-toto", "--json")
    assert code == 0
    export = tmp_path / "d.json"
    export.write_text(out)  # a JSON array is accepted as well
    code, (row,) = verify(h, export)
    assert code == 0 and row["kind"] == "dispute" and row["predicate"]["kind"] == "replay_mismatch"


def test_a_tampered_export_fails_with_exit_status_2(
    home: tuple[Path, str, str], tmp_path: Path
) -> None:
    h, did, _ = home
    _, out, _ = run(h, "attestations", did, "--format", "in-toto")
    env = json.loads(out)
    payload = base64.b64decode(env["payload"]).replace(b'"verified"', b'"verifieD"')
    env["payload"] = base64.b64encode(payload).decode()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(env))
    code, (row,) = verify(h, bad)
    assert code == 2 and not row["ok"] and "signature does not verify" in row["problem"]
    code, _, err = run(h, "attestation", "verify", str(bad))
    assert code == 2 and "✗" in err
    bad.write_text("not json")
    code, _, err = run(h, "attestation", "verify", str(bad))
    assert code == 1 and "not JSON" in err
    code, _, err = run(h, "attestation", "verify", str(tmp_path))
    assert code == 1 and "envelope file" in err and "is a directory" in err


def test_fields_a_stranger_adds_when_resealing_are_not_passed_through(
    home: tuple[Path, str, str], tmp_path: Path
) -> None:
    """A stranger re-seals a peer's attestation with predicate fields of its own: the DSSE layer
    is intact (the stranger signed it all), but the node's wire envelope signs none of them, so
    ``verify --json`` must never show them under ``ok: true``."""
    h, did, _ = home
    _, out, _ = run(h, "attestations", did, "--format", "in-toto", "--received")
    peer_env = next(
        e
        for e in map(json.loads, out.splitlines())
        if PEER_KEY.dataset_id().as_did_key() in base64.b64decode(e["payload"]).decode()
    )
    stmt = json.loads(base64.b64decode(peer_env["payload"]))
    stmt["predicate"]["trustedBy"] = ["did:key:z6MkEveryone"]
    stmt["predicate"]["note"] = "verified by the dataset owner"
    stranger = PrivateKey.from_seed(b"\x5a" * 32)
    resealed = seal(stmt, stranger.dataset_id().as_did_key(), stranger.sign)
    bad = tmp_path / "resealed.json"
    bad.write_text(json.dumps(resealed))
    code, (row,) = verify(h, bad)
    assert code == 2 and not row["ok"] and row["predicate"] is None
    assert "predicate.note is not a field" in row["problem"]
    code, out, err = run(h, "attestation", "verify", str(bad))
    assert code == 2 and "trustedBy" not in out and "not a field" in err
    # A field beside the predicate is refused the same way.
    stmt = json.loads(base64.b64decode(peer_env["payload"]))
    stmt["unsigned"] = {"trusted": True}
    bad.write_text(json.dumps(seal(stmt, stranger.dataset_id().as_did_key(), stranger.sign)))
    code, (row,) = verify(h, bad)
    assert code == 2 and "statement.unsigned is not a field" in row["problem"]
    # Re-sealed untouched, the same statement verifies, with exactly its checked fields.
    stmt = json.loads(base64.b64decode(peer_env["payload"]))
    bad.write_text(json.dumps(seal(stmt, stranger.dataset_id().as_did_key(), stranger.sign)))
    code, (row,) = verify(h, bad)
    assert code == 0 and row["ok"] and row["relayed"]
    want = {k: v for k, v in stmt["predicate"].items() if k != "wireEnvelope"}
    assert row["predicate"] == want


def test_an_empty_export_writes_nothing_on_stdout(home: tuple[Path, str, str]) -> None:
    h, _, _ = home
    other = "did:odf:fed01" + "ab" * 32
    code, out, err = run(h, "attestations", other, "--format", "in-toto")
    assert code == 0 and out == "" and "(none)" in err
