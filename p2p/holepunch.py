"""DCUtR hole punching for the gossip host: relayed connections upgraded to direct ones.

Runs on the host's trio thread next to :class:`p2p.relay.RelaySupport` (``[p2p]
hole_punching``, open mode only); ``docs/nat.md`` has the design and the lab measurements.

py-libp2p 0.8.1's ``libp2p.relay.circuit_v2.dcutr.DCUtRProtocol`` does the protocol
(``/libp2p/dcutr``, libp2p/specs ``relay/DCUtR.md``): CONNECT with the predicted public
addresses (the NAT's public IP that identify observed, with the *listen* port), the RTT over the
relayed connection, SYNC, then both sides dial each other at once from their listen port
(``SO_REUSEPORT``), so the two SYNs cross and TCP's simultaneous open joins them into one
connection; the side that sent CONNECT upgrades it as the responder so the security roles match.
What :class:`HolePuncher` changes, and why:

* **Who initiates.** The library drives a hole punch from both ends of every relayed connection;
  the spec has the side that *received* the relayed connection initiate (the dialer, which
  reached it through its relay, answers). Driven from both ends, two sessions cross and each
  side dials twice. Only the receiving side drives here; the other answers.
* **Outcomes.** The library only logs; here every attempt ends in one outcome (``result``
  ``direct`` or ``failed``, the reason -- the dials' errors, or why no dial was made --, the
  role, the time from the relayed connection to the outcome) handed to ``on_outcome``, which
  the daemon turns into ``p2p.hole_punch`` events.
* **Connection kinds.** :func:`connection_kinds` tells, per connected peer, whether
  a direct connection exists (``direct``) or only relayed ones (``relayed``), for ``status``.

Once a direct connection exists new streams take it (the swarm prefers direct connections), and
the library closes the relayed one after a grace period (60 s) while the direct one holds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import MAX_HOLE_PUNCH_ATTEMPTS, DCUtRProtocol

from p2p.relay import is_relayed_conn

log = logging.getLogger(__name__)

DRIVE_INTERVAL_S = 1.0
"""How often the receiving side looks for relayed-only peers to punch a hole to."""
PUNCH_DIAL_TIMEOUT_S = 5
"""One hole-punch dial: the SYNs cross within the RTT or not at all; a dial to an address no
NAT mapping answers for would otherwise hold the attempt for the library's 10 s."""


def conn_kind(conn: Any) -> str:
    """``"relayed"`` for a connection over a circuit relay, else ``"direct"``."""
    return "relayed" if is_relayed_conn(conn) else "direct"


def connection_kinds(host: Any) -> dict[str, str]:
    """Per connected peer of ``host``: ``"direct"`` when any of its connections is direct,
    else ``"relayed"``."""
    kinds: dict[str, str] = {}
    for pid, conns in host.get_network().get_connections_map().items():
        if conns:
            direct = any(conn_kind(c) == "direct" for c in conns)
            kinds[pid.to_string()] = "direct" if direct else "relayed"
    return kinds


def _bare(addr: Any) -> str:
    """A multiaddr without its ``/p2p/<peer id>`` tail (the outcome names the peer)."""
    return str(addr).split("/p2p/", 1)[0]


def _inbound(conn: Any) -> bool:
    direction = getattr(conn, "direction", None)
    return str(getattr(direction, "name", direction)).lower() == "inbound"


def dial_error(e: BaseException) -> str:
    """Why a dial failed, short: the innermost cause's (py-libp2p wraps the socket error in two
    or three layers of "fail to open connection" / "unexpected error" messages); an OS error by
    its ``strerror`` ("Connection refused", "Network is unreachable")."""
    inner: BaseException = e
    seen = {id(e)}
    while (nxt := inner.__cause__ or inner.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        inner = nxt
    for exc in (inner, e):
        if isinstance(exc, OSError) and exc.strerror:
            return exc.strerror
    text = str(inner).strip().splitlines()
    line = text[0] if text else type(inner).__name__
    # "Failed to connect A from B: [Errno 111] Error connecting to (...): Connection refused"
    return line.rsplit(": ", 1)[-1][:120] if "[Errno" in line else line[:160]


class HolePuncher(DCUtRProtocol):
    """The library's DCUtR, driven from the receiving side, with outcomes (module docstring)."""

    def __init__(self, host: Any, on_outcome: Callable[[dict[str, Any]], None]) -> None:
        """``on_outcome`` receives each attempt's outcome dict (called on the trio thread)."""
        super().__init__(host, dial_timeout=PUNCH_DIAL_TIMEOUT_S)
        self._on_outcome = on_outcome
        self._dial_errors: dict[ID, list[str]] = {}
        self._reported: set[ID] = set()  # peers whose current attempt has been reported
        self._driving: set[ID] = set()
        self._relayed_since: dict[ID, float] = {}  # first seen relayed-only (monotonic)
        self._seq = 0

    # ---- driving (overrides the library's loop: receiving side only)

    async def _auto_drive_loop(self) -> None:
        while True:
            await trio.sleep(DRIVE_INTERVAL_S)
            now = time.monotonic()
            conns_map = self.host.get_network().get_connections_map()
            for pid in list(self._relayed_since):
                if pid not in conns_map:
                    del self._relayed_since[pid]
            for pid, conns in conns_map.items():
                if not conns or pid == self.host.get_id():
                    continue
                if any(conn_kind(c) == "direct" for c in conns):
                    self._relayed_since.pop(pid, None)
                    continue
                self._relayed_since.setdefault(pid, now)
                if not any(_inbound(c) for c in conns):
                    continue  # we dialed through the relay: the peer initiates (spec)
                if pid in self._driving or pid in self._in_progress:
                    continue
                if self._hole_punch_attempts.get(pid, 0) >= MAX_HOLE_PUNCH_ATTEMPTS:
                    continue
                if self._nursery is not None:
                    self._driving.add(pid)
                    self._nursery.start_soon(self._drive, pid)

    async def _drive(self, peer_id: ID) -> None:
        self._reported.discard(peer_id)
        try:
            ok = await self.initiate_hole_punch(peer_id)
        except Exception as e:  # the library catches its own; a bug must not end the loop
            ok = False
            log.debug("hole punch to %s: %s", peer_id, e)
        finally:
            self._driving.discard(peer_id)
        if peer_id not in self._reported:
            # No hole-punch dial was made: the unilateral direct dial (spec step 0) connected,
            # or the exchange over the relayed connection did not complete.
            self._report(
                peer_id,
                ok,
                "initiator",
                "the peer was dialed directly (no hole punch needed)"
                if ok
                else "the DCUtR exchange over the relayed connection did not complete "
                "(no /libp2p/dcutr on the peer, the stream failed or timed out)",
                [],
            )

    # ---- outcomes

    async def _perform_hole_punch(
        self, peer_id: ID, addrs: list[Any], as_responder: bool = False
    ) -> bool:
        self._dial_errors[peer_id] = []
        ok = False
        try:
            ok = await super()._perform_hole_punch(peer_id, addrs, as_responder)
        finally:
            errors = self._dial_errors.pop(peer_id, [])
            # The library's initiator dials "as responder" (module docstring).
            role = "initiator" if as_responder else "responder"
            if ok:
                reason = "simultaneous dial connected"
            elif errors:
                # In the order the addresses were given: the dials run concurrently, and the
                # same failure should read the same way every time.
                order = {_bare(a): i for i, a in enumerate(addrs)}
                ranked = sorted(
                    dict.fromkeys(errors),
                    key=lambda e: order.get(e.split(": ", 1)[0], len(order)),
                )
                reason = "every dial failed: " + "; ".join(ranked)
            else:
                reason = "no direct address to dial"
            self._report(peer_id, ok, role, reason, [str(a) for a in addrs])
        return ok

    async def _dial_peer(
        self,
        peer_id: ID,
        addr: Any,
        source: tuple[str, int] | None = None,
        as_responder: bool = False,
    ) -> None:
        """The library's dial, recording why it failed (it only logs at DEBUG)."""
        store = self.host.get_peerstore()
        try:
            known = list(store.addrs(peer_id))
        except Exception:
            known = []
        network = self.host.get_network()
        try:
            with trio.fail_after(self.dial_timeout):
                if as_responder:
                    await network.dial_addr_as_responder(addr, peer_id, source)
                else:
                    await network.dial_addr(addr, peer_id, source)
        except trio.TooSlowError:
            self._dial_errors.setdefault(peer_id, []).append(
                f"{_bare(addr)}: no answer in {self.dial_timeout} s"
            )
            return
        except Exception as e:
            self._dial_errors.setdefault(peer_id, []).append(f"{_bare(addr)}: {dial_error(e)}")
            # The swarm forgets a peer's addresses on a peer-id mismatch: keep the good ones.
            if "mismatch" in str(e).lower() and known:
                with contextlib.suppress(Exception):
                    store.add_addrs(peer_id, known, 600)
            return
        if await self._verify_direct_connection(peer_id):
            self._direct_connections.add(peer_id)

    def _report(self, peer_id: ID, ok: bool, role: str, reason: str, addrs: list[str]) -> None:
        self._reported.add(peer_id)
        self._seq += 1
        since = self._relayed_since.get(peer_id)
        outcome = {
            "seq": self._seq,
            "peer": peer_id.to_string(),
            "result": "direct" if ok else "failed",
            "reason": reason,
            "role": role,
            # The initiator counts its attempts (at most max_attempts per relayed connection);
            # the responder answers each of them.
            "attempt": self._hole_punch_attempts.get(peer_id, 0) if role == "initiator" else None,
            "max_attempts": MAX_HOLE_PUNCH_ATTEMPTS,
            "addrs": addrs[:8],
            "since_relayed_s": round(time.monotonic() - since, 3) if since is not None else None,
            "at_ns": time.time_ns(),
        }
        (log.info if ok else log.warning)(
            "hole punch %s %s: %s", "to" if role == "initiator" else "from", peer_id, reason
        )
        self._on_outcome(outcome)


__all__ = ["DRIVE_INTERVAL_S", "HolePuncher", "conn_kind", "connection_kinds", "dial_error"]
