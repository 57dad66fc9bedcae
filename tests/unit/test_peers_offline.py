"""``odf-node peers`` without a daemon: nobody is connected, whatever the state last stored.

The daemon keeps each peer's ``connected`` flag in the state while it runs; once it stops (or is
killed) the flag is history. ``peers`` on a home with no daemon used to print the last stored
``yes``; it now says ``no`` for every peer and shows when each was last seen.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from node.cli import app
from node.state import NodeState

PEER = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.output


def test_peers_a_stopped_daemon_left_connected_are_not_shown_connected(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "init")[0] == 0
    # What a daemon killed while connected leaves behind.
    with NodeState.open(home / "state.db", time.time_ns) as st:
        st.upsert_peer(PEER, ["/ip4/127.0.0.1/tcp/4001"], 0.5, True)
        assert [p.connected for p in st.peers()] == [True]
    code, text = run(home, "peers", "--json")
    assert code == 0, text
    (row,) = json.loads(text)
    assert row["peer_id"] == PEER and row["connected"] is False
    assert row["last_seen_ns"] > 0 and row["addrs"] == ["/ip4/127.0.0.1/tcp/4001"]
    code, text = run(home, "peers")
    assert code == 0, text
    assert "last seen" in text and "s ago" in text
    (line,) = [ln for ln in text.splitlines() if PEER[:20] in ln]
    assert line.split()[1] == "no", text
