"""Whether peers on other hosts can reach this node, told to its operator (docs/nat.md).

:class:`ReachabilityWatch` is the daemon's ``reachability`` service. Once every listener runs,
:meth:`warn_at_start` logs, records and shows (``status``' ``warnings``) what keeps peers from
this node (``node/daemon/reachability.py`` finds it). In open mode it then follows the gossip
host's AutoNAT verdict, relay reservations and hole punching into ``status``
(``p2p.reachability``, ``p2p.connections``), the log and ``node.reachability`` /
``p2p.hole_punch`` events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from node.app import NodeInfo
from node.app.ports import IpfsPort, StatePort
from node.config import NodeConfig
from node.daemon.gossip_runtime import GossipRuntime, as_list
from node.daemon.reachability import start_warnings
from node.daemon.services import ServiceGroup

log = logging.getLogger("odf_node.daemon")

_REACHABILITY_POLL_S = 2.0


@dataclass(eq=False, kw_only=True)
class ReachabilityWatch:
    """The ``reachability`` service (see the module docstring)."""

    name = "reachability"

    config: NodeConfig
    info: NodeInfo
    state: StatePort
    group: ServiceGroup
    gossip: GossipRuntime | None
    ipfs: Callable[[], IpfsPort]
    http_base: Callable[[], str]

    async def start(self) -> None:
        """Follow the gossip host's reachability (open mode with gossip only)."""
        if self.gossip is not None and not self.config.network.loopback_only:
            self.group.spawn_restarting(self._watch, "reachability")

    async def stop(self) -> None:
        """Nothing to release: the watch is a task of the group."""

    async def warn_at_start(self) -> None:
        """Log, record and show (``status``) what keeps peers on other hosts from this node."""
        ipfs = self.ipfs()
        info = ipfs.info() if ipfs.api_url is not None else None
        if info is not None and info.get("state") not in (None, "running"):
            # An embedded node that starts on first use has no addresses yet: not a problem to
            # warn about (its service warns if it cannot be reached once it runs).
            info = None
        gossip = self.gossip
        warnings = start_warnings(
            open_mode=not self.config.network.loopback_only,
            ipfs_mode=self.config.ipfs.mode if info is not None else None,
            ipfs_advertised=[str(a) for a in as_list((info or {}).get("addresses"))],
            ipfs_withheld=[str(a) for a in as_list((info or {}).get("withheld_addresses"))],
            http_url=self.http_base(),
            gossip_advertised=(
                gossip.advertised_addrs()
                if gossip is not None and gossip.transport is not None
                else None
            ),
        )
        self.info.warnings = warnings
        for w in warnings:
            log.warning("reachability: %s", w["message"])
            await self.state.log_event("node.reachability", None, w)

    async def _watch(self) -> None:
        """Poll the gossip host's AutoNAT verdict, relay reservations and hole punching."""
        assert self.gossip is not None
        last: dict[str, Any] | None = None
        punch_seq = 0
        while True:
            try:
                snap = await self.gossip.transport.reachability()
            except Exception as e:  # the gossip process restarting
                log.debug("reachability: %s", e)
                snap = None
            if snap is not None and snap != last:
                last = snap
                await self._reachability_changed(snap)
            # With hole punching off too: status still says which peers are only relayed.
            punch_seq = await self._poll_hole_punching(punch_seq)
            await asyncio.sleep(_REACHABILITY_POLL_S)

    async def _reachability_changed(self, snap: dict[str, Any]) -> None:
        status = snap.get("status", "unknown")
        relayed = list(snap.get("relayed_addrs", []))
        unreachable = status == "private" and not relayed
        self.info.reachability = {**snap, "unreachable": unreachable}
        data: dict[str, Any] = {
            "kind": "p2p-reachability",
            "status": status,
            "relayed_addrs": relayed,
        }
        if unreachable:
            errors = snap.get("relay_errors") or {}
            data["message"] = (
                "behind NAT and no relay slot: peers cannot dial this node ("
                + (
                    "; ".join(f"{a}: {e}" for a, e in errors.items())
                    if errors
                    else "no bootstrap peer offers a relay"
                    if self.config.p2p.use_relays
                    else "[p2p] use_relays is off"
                )
                + "); its subscribers pull from republishers"
            )
            data["setting"] = "[p2p] bootstrap (a peer with relay_service = true)"
            log.warning("reachability: %s", data["message"])
        else:
            log.info("reachability: %s%s", status, f" via {relayed}" if relayed else "")
        await self.state.log_event("node.reachability", None, data)
        discovery = self.gossip.discovery if self.gossip is not None else None
        if relayed and discovery is not None:
            discovery.trigger()

    async def _poll_hole_punching(self, last_seq: int) -> int:
        """The gossip host's hole punching (``p2p/holepunch.py``, docs/nat.md): the kind of
        each connected peer's connection into ``status`` (``p2p.connections``), each new
        outcome into a ``p2p.hole_punch`` event and the log; the last outcome's ``seq``."""
        assert self.gossip is not None
        try:
            punch = await self.gossip.transport.hole_punching()
        except Exception as e:  # the gossip process restarting
            log.debug("hole punching: %s", e)
            return last_seq
        self.info.connections = dict(punch.get("connections") or {})
        outcomes = list(punch.get("outcomes") or [])
        if outcomes and outcomes[-1]["seq"] < last_seq:
            last_seq = 0  # a restarted gossip process counts from 1 again
        for o in outcomes:
            if o["seq"] <= last_seq:
                continue
            last_seq = o["seq"]
            _log_outcome(o)
            data = {k: v for k, v in o.items() if k not in ("seq", "at_ns")}
            await self.state.log_event("p2p.hole_punch", None, data)
        return last_seq


def _log_outcome(o: dict[str, Any]) -> None:
    if o["result"] == "direct":
        log.info("hole punch with %s: direct (%s)", o["peer"], o["reason"])
    elif o.get("peer_connected") is False:
        # Nothing left to upgrade (the peer left): not a failure anyone acts on.
        log.info("hole punch with %s ended: %s", o["peer"], o["reason"])
    else:
        log.warning(
            "hole punch with %s failed (%s): %s; the relay keeps carrying the connection",
            o["peer"],
            f"attempt {o['attempt']} of {o.get('max_attempts')}"
            if o.get("attempt")
            else "answering the peer's attempt",
            o["reason"],
        )
