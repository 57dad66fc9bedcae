"""Key inception across real daemons (docs/operations.md, "What a stolen node key can and cannot
do"; issue 39).

Node A's home is made as one from before inceptions was (a node key, no ``keys/next.key``, no
record): its daemon's first start commits the key to a next key and logs the advice to move it
off the node; node B hears the inception when it connects. A thief copies A's node key (not
``keys/next.key``), makes its own inception of it and rotates it to a key of its own, and runs a
daemon that gossips both: B refuses them (a second inception of A's key; a rotation to a key A
did not commit to). A's owner then rotates to the committed key: B accepts it.

Before inceptions, a never-rotated key had no commitment, and B would have accepted the thief's
rotation (the first one heard) and refused the owner's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, NodeProcess

from coordinator.identity import load_private_key
from node.compose import committed_key_path, ensure_inception
from node.home import NodeHome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BASE = {"ipfs": {"mode": "none"}, "p2p": {"discovery": False}}


def _addr(n: NodeProcess) -> str:
    return str(n.call("node.status")["p2p"]["listen_addrs"][0])


def _cli(*args: str) -> dict[str, Any]:
    """``odf-node <args>`` (with ``--json``), its output parsed."""
    out = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout))


def _events(n: NodeProcess, kind: str) -> list[dict[str, Any]]:
    return list(n.call("node.events", kind=kind))


def test_inception_at_first_start_beats_a_thief_of_the_first_key(tmp_path: Path) -> None:
    a = NodeProcess(tmp_path / "a", "a", config=BASE)
    b = NodeProcess(tmp_path / "b", "b", config=BASE)
    thief = NodeProcess(tmp_path / "thief", "thief", config=BASE)
    # A home from before inceptions: the key only (not `odf-node init`, which makes one now).
    NodeHome(a.home).init()
    a.init_config()
    b.init()
    a_id = NodeHome(a.home).node_key().dataset_id().as_did_key()
    try:
        a.launch()
        b.launch()
        a.wait_ready(120)
        b.wait_ready(120)
        # The daemon's start made the inception and told the operator to move next.key away.
        (made,) = [e for e in _events(a, "node.key_incepted") if e["data"].get("own")]
        assert made["data"]["node"] == a_id and "keys/next.key" in made["data"]["action"]
        assert "now commits to its next key" in a.tail()
        committed = load_private_key(committed_key_path(NodeHome(a.home)))
        b.call("peers.connect", multiaddr=_addr(a))
        heard = b.wait_for(
            "A's inception",
            lambda: [e for e in _events(b, "node.key_incepted") if e["data"]["node"] == a_id],
            60,
        )
        assert len(heard) == 1

        # The thief: A's node key only, an inception of its own and a rotation to its own key.
        NodeHome(thief.home).init()
        thief.init_config()
        shutil.copyfile(a.home / "keys" / "node.key", thief.home / "keys" / "node.key")
        assert ensure_inception(NodeHome(thief.home)) is not None
        stolen = _cli("key", "rotate", "--home", str(thief.home), "--json")
        assert stolen["old_id"] == a_id and stolen["new_id"] != committed.dataset_id().as_did_key()
        thief_id = stolen["new_id"]
        thief.launch()
        thief.wait_ready(120)
        b.call("peers.connect", multiaddr=_addr(thief))
        b.wait_for(
            "the thief's rotation refused",
            lambda: f"key rotation {a_id} -> {thief_id} refused" in b.tail(200_000),
            60,
        )
        conflicts = b.wait_for(
            "the thief's inception refused",
            lambda: _events(b, "node.key_inception_conflict"),
            60,
        )
        assert conflicts[0]["data"]["node"] == a_id
        assert not _events(b, "node.key_rotated")
        thief.stop()

        # The owner rotates to the committed key: B accepts it.
        a.stop()
        rotated = _cli("key", "rotate", "--home", str(a.home), "--json")
        assert rotated["old_id"] == a_id
        assert rotated["new_id"] == committed.dataset_id().as_did_key()
        a.launch()
        a.wait_ready(120)
        b.call("peers.connect", multiaddr=_addr(a))
        (rot,) = b.wait_for("the owner's rotation", lambda: _events(b, "node.key_rotated"), 60)
        assert rot["data"]["old"] == a_id and rot["data"]["new"] == rotated["new_id"]
        # Its new key came from a version 2 rotation: no second inception at this start.
        assert len([e for e in _events(a, "node.key_incepted") if e["data"].get("own")]) == 1
    finally:
        for n in (thief, a, b):
            n.stop()
