"""The command layer: declarations, the RPC registry generated from them, the generated CLI and
the offline dispatcher (typer's runner on a real home, no daemon)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coordinator.multiformats import Multihash
from node.app.results import SubscriptionRow
from node.cli import app
from node.commands.catalog import BY_NAME, COMMANDS
from node.commands.spec import STR, Command, CommandParam
from node.rpc.registry import openrpc_document, validate_openrpc
from node.rpc.schema import validate
from node.state import NodeState

DID = "did:odf:fed01" + "ab" * 32
HEAD = Multihash.sha3_256(b"a head").to_multibase()
SIGNER = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.output


def cli_json(home: Path, *args: str) -> Any:
    code, text = run(home, *args, "--json")
    assert code == 0, text
    return json.loads(text)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An initialised home whose state holds one of each kind of evidence."""
    h = tmp_path / "home"
    assert run(h, "init")[0] == 0
    with NodeState.open(h / "state.db", time.time_ns) as s:
        s.upsert_peer("12D3KooWUnit", ["/ip4/127.0.0.1/tcp/9/p2p/12D3KooWUnit"], 2.0)
        s.add_attestation(DID, HEAD, "verified", SIGNER, b"envelope", False)
        s.add_dispute(DID, HEAD, "replay-mismatch", SIGNER, b"dispute", False, "detail")
        s.add_equivocation_proof(DID, b"proof")
        s.enqueue("verify", DID, HEAD, {})
        s.log_event("head.repaired", DID, {"head": HEAD})
    return h


def test_the_rpc_registry_is_generated_from_the_declarations() -> None:
    from node.daemon.rpc_api import build_registry

    registry = build_registry(object())  # type: ignore[arg-type]  # nothing runs here
    assert {spec.name for spec in registry} == {c.name for c in COMMANDS}
    sub = registry.get("subscriptions.add")
    assert sub is not None
    assert [p.name for p in sub.params] == ["did", "alias", "policy", "k", "attesters", "source"]
    ingest = registry.get("dataset.ingest")
    assert ingest is not None
    assert [p.name for p in ingest.params][:4] == ["ref", "files", "source", "publish"]
    # CLI-only and offline options never reach the RPC method.
    log = registry.get("dataset.log")
    assert log is not None and [p.name for p in log.params] == ["ref", "limit"]
    doc = openrpc_document(registry)
    validate_openrpc(doc)
    peers = next(m for m in doc["methods"] if m["name"] == "peers.list")
    assert peers["result"]["schema"]["items"]["required"] == [
        "peer_id",
        "connected",
        "score",
        "addrs",
        "last_seen_ns",
    ]


def test_a_declaration_that_drifts_from_its_use_case_is_refused() -> None:
    from node.daemon import rpc_api

    async def use_case(app: Any, ctx: Any, ref: str) -> None:
        return None

    drifted = Command("dataset.drift", "x", use_case, (CommandParam("reff", STR, True),))
    original = rpc_api.COMMANDS
    rpc_api.COMMANDS = (drifted,)  # type: ignore[misc]
    try:
        with pytest.raises(ValueError, match="does not accept param 'reff'"):
            rpc_api.build_registry(object())  # type: ignore[arg-type]
    finally:
        rpc_api.COMMANDS = original  # type: ignore[misc]


def test_every_cli_command_has_help_and_json() -> None:
    for command in COMMANDS:
        if command.cli is None:
            continue
        result = CliRunner().invoke(app, [*command.cli, "--help"])
        assert result.exit_code == 0, (command.name, result.output)
        assert "--json" in result.output and "--home" in result.output, command.name


def test_read_commands_work_offline_with_their_declared_shape(home: Path) -> None:
    reads = {
        "node.status": ("status",),
        "node.events": ("events", "--kind", "head.repaired"),
        "peers.list": ("peers",),
        "work.list": ("work",),
        "attestations.list": ("attestations",),
        "disputes.list": ("disputes", DID),
        "equivocations.list": ("equivocations",),
    }
    for name, args in reads.items():
        value = cli_json(home, *args)
        validate(BY_NAME[name].result, value, name)
        if isinstance(value, list):
            assert value, name
    status = cli_json(home, "status")
    assert status["uptime_s"] is None and status["datasets"] == 0
    assert status["node_id"].startswith("did:key:") and status["engine"]["running"] is False
    # An attestation whose envelope does not decode still has every key.
    (att,) = cli_json(home, "attestations", DID)
    assert att["engine"] is None and att["verdict"] == "verified"


def test_subscriptions_print_the_same_keys_as_the_daemon(home: Path) -> None:
    followed = cli_json(home, "subscribe", DID, "--alias", "theirs")
    keys = set(SubscriptionRow.__dataclass_fields__)
    assert set(followed) == keys and followed["alias"] == "theirs"
    (row,) = cli_json(home, "subscriptions")
    assert set(row) == keys and row["did"] == DID
    assert cli_json(home, "unsubscribe", DID) == {"did": DID, "removed": True}
    assert cli_json(home, "subscriptions") == []


def test_params_are_validated_offline_as_the_rpc_validates_them(home: Path) -> None:
    code, text = run(home, "work", "--state", "bogus")
    assert code == 1 and "invalid param 'state'" in text
    code, text = run(home, "subscribe", "did:odf:garbage")
    assert code == 1 and "not a dataset DID" in text


def test_commands_that_need_the_daemon_name_odf_node_run(home: Path) -> None:
    for args in (
        ("connect", "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWUnit"),
        ("connect", "--ipfs", "/ip4/127.0.0.1/tcp/9"),
        ("ui",),
        ("rpc", "node.status"),
    ):
        code, text = run(home, *args)
        assert code == 1 and "start one with `odf-node run`" in text, (args, text)


def test_dataset_log_json_is_output_format_json(home: Path, tmp_path: Path) -> None:
    snap = tmp_path / "s.yaml"
    snap.write_text(
        "kind: DatasetSnapshot\nversion: 1\n"
        "content: {name: x, kind: Root, metadata: [{kind: SetInfo, description: d}]}\n"
    )
    assert run(home, "dataset", "create", str(snap))[0] == 0
    as_json = cli_json(home, "dataset", "log", "x")
    code, text = run(home, "dataset", "log", "x", "-o", "json")
    assert code == 0 and json.loads(text) == as_json
    assert [e["block"]["event"]["kind"] for e in as_json] == ["SetInfo", "Seed"]
    code, text = run(home, "dataset", "log", "x", "-o", "yaml")
    assert (
        code == 0 and text.startswith(f"---\n# Block: {as_json[0]['hash']}\n") and "SetInfo" in text
    )
    code, text = run(home, "dataset", "log", "x")
    assert code == 0 and "SetInfo" in text and "Seed" in text
    code, text = run(home, "dataset", "log", "x", "-o", "xml")
    assert code == 1 and "unknown output format 'xml'" in text
