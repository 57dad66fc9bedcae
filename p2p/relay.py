"""Reachability behind NAT for the gossip host: AutoNAT, circuit relay v2 (py-libp2p 0.8.1).

Runs on the host's trio thread (:class:`p2p.libp2p_host.Libp2pTransport` owns one
:class:`RelaySupport`); ``docs/nat.md`` says why and what was measured.

* **AutoNAT** (``/libp2p/autonat/1.0.0``, ``libp2p.host.autonat``): every open-mode host answers
  dial-back requests, and asks its connected peers (bootstrap peers first) whether they reach
  it. py-libp2p's server dials back only the advertised addresses whose IP equals the one it
  observed, and an existing connection satisfies its dial: so its verdict means "this node's
  advertised address is the one its peers see" -- ``private`` behind address translation
  (a NAT router), ``public`` otherwise. A public address behind a firewall that drops inbound
  connections is not detected.
* **Relay service** (``[p2p] relay_service``): a public node answers circuit relay v2 HOP
  requests within :class:`RelayLimits` (reservations of connected peers; circuits open in total
  and per peer; per circuit a duration, idle or not, and a byte budget; bytes per peer and in
  total per window -- after any of them the relay closes the circuit); each circuit ends by its own
  streams (``p2p/relay_hop.py``: the library's closes another circuit of the same peer).
* **Relay client**: a node AutoNAT calls ``private`` reserves a slot on each connected
  bootstrap peer that offers a relay, and advertises
  ``<relay addr>/p2p-circuit/p2p/<own id>`` for each reservation; reservations are refreshed
  before they expire, dropped when the connection to the relay is lost (a restarted relay has
  forgotten them) and made again once it is back. Every host accepts relayed connections
  (STOP) and can dial relayed addresses. A private node with no reservation is
  ``unreachable``: peers cannot dial it.

DCUtR (a relayed connection upgraded to a direct one by a hole punch) is ``p2p/holepunch.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from p2p.relay_conn import RELAY_MARK, is_relayed_conn

log = logging.getLogger(__name__)

RELAY_REDIAL_S = 3.0
"""A private node without a relay slot dials its relay candidates this often."""


@dataclass(frozen=True, slots=True)
class RelayLimits:
    """What a relay service carries for others (``[p2p] relay_*``)."""

    max_reservations: int = 16
    max_reservations_per_ip: int = 4
    max_circuits: int = 16
    circuit_duration_s: int = 600
    circuit_bytes: int = 64 << 20
    reservation_ttl_s: int = 3600
    max_circuits_per_peer: int = 4
    peer_bytes: int = 256 << 20
    total_bytes: int = 1 << 30
    bytes_window_s: int = 3600


def is_relayed(addr: str) -> bool:
    """Whether ``addr`` is a relayed (``/p2p-circuit``) multiaddr."""
    return RELAY_MARK in addr


def circuit_addr(relay_addr: str, relay_peer: str, own_peer: str) -> str:
    """The relayed address peers dial to reach ``own_peer`` through ``relay_addr``."""
    base = relay_addr if "/p2p/" in relay_addr else f"{relay_addr}/p2p/{relay_peer}"
    return f"{base}{RELAY_MARK}/p2p/{own_peer}"


def dest_peer(addr: str) -> str:
    """The peer id a (relayed or direct) ``.../p2p/<id>`` multiaddr ends with."""
    return addr.rstrip("/").rsplit("/p2p/", 1)[1]


class RelaySupport:
    """The trio-side relay and AutoNAT machinery of one host (module docstring)."""

    def __init__(
        self,
        host: Any,
        *,
        service: bool,
        client: bool,
        limits: RelayLimits,
        candidates: Callable[[], Sequence[str]],
        on_change: Callable[[dict[str, Any]], None],
        check_interval_s: float = 60.0,
    ) -> None:
        """``candidates`` lists the multiaddrs (with ``/p2p/<id>``) of the peers to ask
        (AutoNAT) and to reserve relay slots on; ``on_change`` receives each new
        :meth:`snapshot` (called on the trio thread)."""
        from libp2p.host.autonat import AutoNATService
        from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
        from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID, STOP_PROTOCOL_ID
        from libp2p.relay.circuit_v2.resources import RelayLimits as LibLimits
        from libp2p.relay.circuit_v2.transport import CircuitV2Transport

        from p2p.relay_hop import CircuitLimits, OwnCircuitsProtocol

        self.host = host
        self.service = service
        self.client = client
        self.limits = limits
        self._candidates = candidates
        self._on_change = on_change
        self.check_interval_s = check_interval_s
        lib_limits = LibLimits(
            duration=limits.circuit_duration_s,
            data=limits.circuit_bytes,
            # Per destination in the library; the total and per-source caps are ours.
            max_circuit_conns=limits.max_circuits_per_peer,
            max_reservations=limits.max_reservations,
            reservation_ttl=limits.reservation_ttl_s,
        )
        # The library's HOP side, with each circuit ended by its own streams: the library's
        # closes the streams of another circuit to or from the same peer (p2p/relay_hop.py).
        self.protocol = OwnCircuitsProtocol(
            host,
            limits=lib_limits,
            allow_hop=service,
            circuits=CircuitLimits(
                max_circuits=limits.max_circuits,
                max_circuits_per_peer=limits.max_circuits_per_peer,
                circuit_duration_s=limits.circuit_duration_s,
                peer_bytes=limits.peer_bytes,
                total_bytes=limits.total_bytes,
                window_s=limits.bytes_window_s,
            ),
            reservations_per_ip=limits.max_reservations_per_ip,
        )
        if service:
            host.set_stream_handler(PROTOCOL_ID, self.protocol._handle_hop_stream)
        # Every host accepts relayed connections and can dial relayed addresses.
        host.set_stream_handler(STOP_PROTOCOL_ID, self.protocol._handle_stop_stream)
        roles = RelayRole.STOP | RelayRole.CLIENT | (RelayRole.HOP if service else RelayRole(0))
        self.transport = CircuitV2Transport(
            host, self.protocol, RelayConfig(roles=roles, limits=lib_limits)
        )
        # Answers peers' dial-back requests; asks them about this node (confirmations: one
        # peer's verdict is enough -- a subscriber may know a single bootstrap peer).
        self.autonat = AutoNATService(host, serve=True, confirmations=1)
        self.status = "unknown"
        self.relayed: dict[str, str] = {}  # relay peer id -> our circuit address through it
        self.refused: dict[str, str] = {}  # relay candidate -> why no reservation

    def snapshot(self) -> dict[str, Any]:
        """``{"status": "unknown"|"public"|"private", "relayed_addrs": [...],
        "relay_service": bool, "relay_errors": {addr: why}}``."""
        return {
            "status": self.status,
            "relayed_addrs": sorted(self.relayed.values()),
            "relay_service": self.service,
            "relay_errors": dict(self.refused),
        }

    def held_slots(self) -> set[str]:
        """Peer ids whose connection carries a reservation: the relays this host holds a slot
        on and, on a relay, the peers holding a slot on it (their relayed address is their
        only one). The connection manager does not disconnect them (``p2p/connmgr.py``)."""
        import time

        held = set(self.relayed)
        if self.service:
            # py-libp2p 0.8.1 has no public listing of a relay's reservations.
            now = time.time()
            for peer, res in list(self.protocol.resource_manager._reservations.items()):
                if res.expires_at > now:
                    held.add(peer.to_string())
        return held

    async def dial(self, addr: str) -> None:
        """Connect to ``addr`` (``.../p2p/<relay>/p2p-circuit/p2p/<dest>``) through its relay."""
        import multiaddr

        await self.transport.dial(multiaddr.Multiaddr(addr))

    async def run(self, nursery: Any) -> None:
        """Check reachability and keep reservations: every ``check_interval_s`` once a
        candidate is connected, and at once when a private node is connected to a relay it
        holds no slot on (a relay that came back)."""
        import trio

        last = -float("inf")
        last_dial = -float("inf")
        while True:
            connected = {p.to_string() for p in self.host.get_connected_peers()}
            if self._drop_lost(connected):
                self._on_change(self.snapshot())
            if (
                self.client
                and self.status == "private"
                and not self.relayed
                and trio.current_time() - last_dial >= RELAY_REDIAL_S
            ):
                # Unreachable until a relay is back: dial the candidates every few seconds
                # rather than at the bootstrap redial's backoff (doubling up to 60 s).
                last_dial = trio.current_time()
                await self._redial(a for a in self._candidates() if dest_peer(a) not in connected)
                connected = {p.to_string() for p in self.host.get_connected_peers()}
            candidates = [a for a in self._candidates() if dest_peer(a) in connected]
            due = trio.current_time() - last >= self.check_interval_s
            missing = (
                self.client
                and self.status == "private"
                and any(
                    dest_peer(a) not in self.relayed and a not in self.refused for a in candidates
                )
            )
            if candidates and (due or missing):
                await self._check(candidates, nursery)
                last = trio.current_time()
            await trio.sleep(1.0)

    async def _redial(self, addrs: Iterable[str]) -> None:
        import multiaddr
        import trio
        from libp2p.peer.peerinfo import info_from_p2p_addr

        # py-libp2p 0.8.1's swarm refuses every dial to a peer for 60 s after one failed
        # (its negative peer cache): a relay that restarted would stay unreachable that long.
        negative = getattr(self.host.get_network(), "_negative_peer_cache", None)
        for addr in addrs:
            if negative is not None:
                negative.evict(dest_peer(addr))
            with trio.move_on_after(RELAY_REDIAL_S):
                try:
                    await self.host.connect(info_from_p2p_addr(multiaddr.Multiaddr(addr)))
                except Exception as e:
                    log.debug("relay candidate %s: %s", addr, _first_line(e))

    def _drop_lost(self, connected: set[str]) -> bool:
        """Forget the reservations on relays this host is no longer connected to (a restarted
        relay has forgotten them) or that lapsed (a refresh failed); the next check reserves
        again once connected."""
        from libp2p.peer.id import ID

        held = self.transport._reservations  # expired ones are removed by its refresher
        lost = [r for r in self.relayed if r not in connected or ID.from_base58(r) not in held]
        for relay in lost:
            del self.relayed[relay]
            # The transport keeps its own table, refreshed until expiry whatever the relay
            # remembers; there is no public call to drop an entry.
            self.transport._reservations.pop(ID.from_base58(relay), None)
            self.transport._reservation_proofs.pop(ID.from_base58(relay), None)
            log.info("relay %s lost: its reservation is dropped", relay)
        return bool(lost)

    async def _check(self, candidates: Sequence[str], nursery: Any) -> None:
        from libp2p.host.autonat import AutoNATStatus
        from libp2p.peer.id import ID

        before = self.snapshot()
        for addr in candidates:
            try:
                await self.autonat.query_server(ID.from_base58(dest_peer(addr)), timeout=10.0)
            except Exception as e:  # a peer without AutoNAT, a dropped stream
                log.debug("AutoNAT query to %s failed: %s", addr, e)
        self.autonat.update_status()
        st = self.autonat.get_status()
        self.status = {AutoNATStatus.PUBLIC: "public", AutoNATStatus.PRIVATE: "private"}.get(
            st, "unknown"
        )
        if self.client and self.status == "private":
            for addr in candidates:
                await self._reserve(addr, nursery)
        if self.snapshot() != before:
            self._on_change(self.snapshot())

    async def _reserve(self, relay_addr: str, nursery: Any) -> None:
        from libp2p.peer.id import ID
        from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID

        relay = dest_peer(relay_addr)
        if relay in self.relayed:
            return  # the transport refreshes it before it expires
        try:
            stream = await self.host.new_stream(ID.from_base58(relay), [PROTOCOL_ID])
        except Exception as e:
            # The peer offers no relay (no HOP protocol), or the stream failed.
            self.refused[relay_addr] = f"no relay service ({_first_line(e)})"
            return
        try:
            ok = await self.transport.reserve(stream, ID.from_base58(relay), nursery)
        except Exception as e:
            ok, why = False, _first_line(e)
        else:
            why = "reservation refused (limits)"
        finally:
            try:
                await stream.close()
            except Exception:
                pass
        if ok:
            self.refused.pop(relay_addr, None)
            self.relayed[relay] = circuit_addr(relay_addr, relay, self.host.get_id().to_string())
            log.info("relay slot reserved on %s", relay_addr)
        else:
            self.refused[relay_addr] = why


def _first_line(e: BaseException) -> str:
    """A library error, short: its first line (py-libp2p's carry multi-line diagnostics)."""
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


__all__ = [
    "RELAY_MARK",
    "RelayLimits",
    "RelaySupport",
    "circuit_addr",
    "dest_peer",
    "is_relayed",
    "is_relayed_conn",
]
