"""The start-up reachability warnings of an open-mode node (``node/daemon/reachability_watch.py``):
an embedded IPFS node that starts on its first use is not reported unreachable before it runs."""

from __future__ import annotations

import asyncio
from typing import Any

from node.app import NodeInfo
from node.config import load_config
from node.daemon.reachability_watch import ReachabilityWatch
from node.daemon.services import ServiceGroup


class _Ipfs:
    def __init__(self, state: str, addresses: list[str]) -> None:
        self.api_url = "http://127.0.0.1:0/ipfs-not-started-1"
        self._info = {"state": state, "addresses": addresses, "withheld_addresses": []}

    def info(self) -> dict[str, Any]:
        return self._info


class _Events:
    def __init__(self) -> None:
        self.logged: list[tuple[str, dict[str, Any]]] = []

    async def log_event(self, kind: str, did: str | None, payload: dict[str, Any]) -> None:
        self.logged.append((kind, payload))


def _warnings(ipfs: _Ipfs) -> list[str]:
    cfg = load_config(
        None,
        environ={},
        overrides={"network": {"isolation": "open", "advertise_host": "10.77.0.5"}},
    )
    info = NodeInfo(node_id="did:key:z6Mk", home="/h", spark_master="local[1]")
    watch = ReachabilityWatch(
        config=cfg,
        info=info,
        state=_Events(),  # type: ignore[arg-type]
        group=ServiceGroup(),
        gossip=None,
        ipfs=lambda: ipfs,  # type: ignore[arg-type, return-value]
        http_base=lambda: "http://10.77.0.5:8090",
    )
    asyncio.run(watch.warn_at_start())
    return [str(w["kind"]) for w in info.warnings]


def test_a_node_that_starts_on_first_use_is_not_reported_unreachable() -> None:
    assert "ipfs-unreachable" not in _warnings(_Ipfs("not started (starts on first use)", []))


def test_a_running_node_without_addresses_is() -> None:
    assert "ipfs-unreachable" in _warnings(_Ipfs("running", []))
