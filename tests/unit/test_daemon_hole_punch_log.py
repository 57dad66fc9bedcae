"""How the daemon turns the gossip host's hole-punch outcomes into events and log lines
(node/daemon/reachability_watch.py ``ReachabilityWatch._poll_hole_punching``; docs/nat.md,
"Hole punching"): a failure with the peer still connected is a WARNING (the relay keeps
carrying the connection), an attempt whose relayed connection closed under it (a peer that
left) is INFO, and every outcome is an event."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from node.daemon.reachability_watch import ReachabilityWatch


def _outcome(seq: int, result: str, connected: bool, reason: str) -> dict[str, Any]:
    return {
        "seq": seq,
        "peer": f"12D3KooWpeer{seq}",
        "result": result,
        "reason": reason,
        "role": "initiator",
        "attempt": 1,
        "max_attempts": 3,
        "addrs": [],
        "since_relayed_s": 0.7,
        "peer_connected": connected,
        "at_ns": 1,
    }


def test_outcomes_become_events_and_only_a_live_failure_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    outcomes = [
        _outcome(1, "direct", True, "simultaneous dial connected"),
        _outcome(2, "failed", True, "every dial failed: /ip4/10.77.0.242/tcp/1: no answer in 5 s"),
        _outcome(3, "failed", False, "the relayed connection closed before the DCUtR exchange"),
    ]

    class _Transport:
        async def hole_punching(self) -> dict[str, Any]:
            return {
                "enabled": True,
                "connections": {"12D3KooWpeer2": "relayed"},
                "outcomes": outcomes,
            }

    class _State:
        async def log_event(self, kind: str, did: str | None, data: dict[str, Any]) -> None:
            events.append((kind, data))

    info = SimpleNamespace(connections={})
    watch = ReachabilityWatch(
        config=None,  # type: ignore[arg-type]
        info=info,  # type: ignore[arg-type]
        state=_State(),  # type: ignore[arg-type]
        group=None,  # type: ignore[arg-type]
        gossip=SimpleNamespace(transport=_Transport()),  # type: ignore[arg-type]
        ipfs=lambda: None,  # type: ignore[arg-type,return-value]
        http_base=lambda: "",
    )
    with caplog.at_level(logging.INFO, logger="odf_node.daemon"):
        last = asyncio.run(watch._poll_hole_punching(0))
        # Seen outcomes are not logged again.
        assert asyncio.run(watch._poll_hole_punching(last)) == 3
    assert last == 3
    assert [k for k, _ in events] == ["p2p.hole_punch"] * 3
    assert [d["peer_connected"] for _, d in events] == [True, True, False]
    assert all("seq" not in d and "at_ns" not in d for _, d in events)
    assert info.connections == {"12D3KooWpeer2": "relayed"}
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [lvl for lvl, _ in lines] == [logging.INFO, logging.WARNING, logging.INFO]
    assert "the relay keeps carrying the connection" in lines[1][1]
    assert lines[2][1] == (
        "hole punch with 12D3KooWpeer3 ended: the relayed connection closed before the DCUtR "
        "exchange"
    )
