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
* **Quiet dials.** The library logs each failed punch dial at ERROR; the expected failures
  are dropped (:class:`QuietPunchDials`), since the outcome names them.
* **Answering within bounds.** The library answers every CONNECT, any number at once, and dials
  every address the peer names, three rounds each. Here the responder answers one attempt per
  peer at a time and at most ``MAX_HOLE_PUNCH_ATTEMPTS`` per relayed connection, and an attempt
  dials at most :data:`MAX_PUNCH_ADDRS` distinct addresses (docs/nat.md, "Hole punching under
  abuse").
* **Which addresses.** The peer names the addresses to dial, so a stranger could have this node
  dial its own loopback services, link-local hosts or a private network behind it. An address
  is dialled only when :func:`punch_addr_refusal` allows it: never link-local, multicast,
  unspecified or reserved ones, nor loopback ones (unless every address of this node is a
  loopback one: a lab); a private one (RFC 1918, shared 100.64/10, IPv6 ULA) only when this
  node has a private address itself *and* every address the peer named is private (a peer on
  a private network, as in a NAT lab or one site); public ones always.
* **Connection kinds.** :func:`connection_kinds` tells, per connected peer, whether
  a direct connection exists (``direct``) or only relayed ones (``relayed``), for ``status``.

Once a direct connection exists new streams take it (the swarm prefers direct connections), and
the library closes the relayed one after a grace period (60 s) while the direct one holds.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import ipaddress
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import (
    MAX_HOLE_PUNCH_ATTEMPTS,
    MAX_OBSERVED_ADDRS,
    DCUtRProtocol,
)

from p2p.relay import RELAY_MARK, is_relayed_conn

log = logging.getLogger(__name__)

DRIVE_INTERVAL_S = 1.0
"""How often the receiving side looks for relayed-only peers to punch a hole to."""
PUNCH_DIAL_TIMEOUT_S = 5
MAX_PUNCH_ADDRS = 8
"""Distinct addresses one hole-punch attempt dials. The peer names them (its CONNECT message, up
to 4 KiB: about 400 addresses; its identify record): without a cap a relayed stranger had this
node dial 400 addresses of its choosing three times over per CONNECT (docs/nat.md)."""
"""One hole-punch dial: the SYNs cross within the RTT or not at all; a dial to an address no
NAT mapping answers for would otherwise hold the attempt for the library's 10 s."""


# Why a hole-punch dial fails when the NATs do not line up: the expected outcomes of a punch,
# each already named in the attempt's outcome (``p2p.hole_punch`` and the daemon's log).
_EXPECTED_PUNCH_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
        errno.ETIMEDOUT,
        # The other side's SYN already joined the two sockets on that 4-tuple.
        errno.EADDRINUSE,
        errno.EADDRNOTAVAIL,
    }
)
_TCP_LOGGER = "libp2p.transport.tcp.tcp"
_DCUTR_LOGGER = "libp2p.relay.circuit_v2.dcutr"
_TCP_FAILURES = ("Failed to open TCP stream", "Unexpected error opening TCP stream")

_in_answer: contextvars.ContextVar[bool] = contextvars.ContextVar("odf_in_answer", default=False)
"""Set while :meth:`HolePuncher._handle_dcutr_stream` answers an admitted CONNECT."""
_in_punch_dial: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "odf_in_punch_dial", default=False
)
"""True inside :meth:`HolePuncher._dial_peer` (trio tasks inherit it, the library's dial runs
in the calling task): what the TCP transport logs there is a hole-punch dial's."""


def _expected_dial_error(err: object) -> bool:
    """Whether ``err`` (what the transport logged) ends in an OS error a punch expects: the
    errno of the OS error below it, or of every attempt trio's ``open_tcp_stream`` made ("all
    attempts to connect to ... failed", an exception group beneath)."""
    seen: set[int] = set()
    todo: list[BaseException] = [err] if isinstance(err, BaseException) else []
    found = False
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None:
            if e.errno not in _EXPECTED_PUNCH_ERRNOS:
                return False
            found = True
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        if e.__cause__ is not None:
            todo.append(e.__cause__)
    return found


class QuietPunchDials(logging.Filter):
    """Drops the library's log lines for hole-punch dials that failed the expected way.

    py-libp2p's TCP transport logs every failed dial at ERROR ("Unexpected error opening TCP
    stream: Failed to connect A from B: [Errno 101] Network is unreachable" for a dial from the
    listen port, "Failed to open TCP stream: all attempts to connect to A failed" for the plain
    dial a punch tries first, once per retry), and its DCUtR responder adds "Failed to establish
    direct connection with ..." at WARNING. During a punch most dials are meant to fail (a
    private address the other side cannot route to, a symmetric NAT's wrong port), and
    :class:`HolePuncher` reports each attempt once, naming every dial and its error. Kept: any
    dial outside a hole punch, and a punch dial that failed with another error (no socket, no
    permission, ...).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for an expected punch-dial failure (see the class docstring)."""
        if record.name == _DCUTR_LOGGER:
            return not str(record.msg).startswith("Failed to establish direct connection with")
        if (
            record.name != _TCP_LOGGER
            or not _in_punch_dial.get()
            or not str(record.msg).startswith(_TCP_FAILURES)
        ):
            return True
        err = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not _expected_dial_error(err)


def quiet_punch_dials() -> None:
    """Install :class:`QuietPunchDials` on the library's TCP and DCUtR loggers (once)."""
    for name in (_TCP_LOGGER, _DCUTR_LOGGER):
        lg = logging.getLogger(name)
        if not any(isinstance(f, QuietPunchDials) for f in lg.filters):
            lg.addFilter(QuietPunchDials())


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


def _ip(addr: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address of an ``/ip4/...`` or ``/ip6/...`` multiaddr (None: another kind)."""
    parts = str(addr).split("/")
    if len(parts) < 3 or parts[1] not in ("ip4", "ip6"):
        return None
    try:
        return ipaddress.ip_address(parts[2].split("%", 1)[0])
    except ValueError:
        return None


def _private(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A private-network address a hole punch may dial in the right setting (not global, and
    none of the never-dialled kinds)."""
    return not ip.is_global and not _never(ip)


def _never(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return (
        ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved
    )


def punch_addr_refusal(addr: Any, *, peer_private: bool, own: str) -> str | None:
    """Why a hole punch must not dial ``addr``, which a peer named, or None (module docstring).

    ``peer_private``: every address the peer named in this attempt is a private-network one;
    ``own``: this node's network (:func:`own_network`). Pure: the decision only."""
    ip = _ip(addr)
    if ip is None:
        return "not an IP address"
    if ip.is_loopback and own == "loopback":
        return None  # a node on loopback alone (a lab) reaches nothing else
    if _never(ip):
        return "a loopback, link-local, multicast or reserved address"
    if ip.is_global:
        return None
    if own != "private":
        return "a private address, and this node is on no private network"
    if not peer_private:
        return "a private address of a peer that also names public ones"
    return None


def own_network(host: Any) -> str:
    """``"private"`` when ``host`` listens on or was observed at a private-network address,
    ``"loopback"`` when all its addresses are loopback ones, else ``"public"``."""
    addrs: list[Any] = []
    for get in ("get_transport_addrs", "get_addrs"):
        with contextlib.suppress(Exception):
            addrs += list(getattr(host, get)())
    ips = [ip for ip in map(_ip, addrs) if ip is not None and not ip.is_unspecified]
    if any(_private(ip) for ip in ips):
        return "private"
    if ips and all(ip.is_loopback for ip in ips):
        return "loopback"
    return "public"


def peer_private(addrs: list[Any]) -> bool:
    """Whether every IP address in ``addrs`` (a peer's, for one attempt) is private."""
    ips = [ip for ip in map(_ip, addrs) if ip is not None]
    return bool(ips) and all(_private(ip) for ip in ips)


def _inbound(conn: Any) -> bool:
    direction = getattr(conn, "direction", None)
    return str(getattr(direction, "name", direction)).lower() == "inbound"


def dial_error(e: BaseException) -> str:
    """Why a dial failed, short: the innermost cause's (py-libp2p wraps the socket error in two
    or three layers of "fail to open connection" / "unexpected error" messages); an OS error by
    its errno's text ("Connection refused", "Network is unreachable"; trio words it "Error
    connecting to (host, port): ..." and puts a plain dial's under an exception group)."""
    inner: BaseException = e
    seen = {id(e)}
    while True:
        nxt = inner.__cause__ or inner.__context__
        if nxt is None and isinstance(inner, BaseExceptionGroup) and inner.exceptions:
            nxt = inner.exceptions[0]
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        inner = nxt
    for exc in (inner, e):
        if isinstance(exc, OSError) and exc.errno:
            return os.strerror(exc.errno)
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
        quiet_punch_dials()
        self._on_outcome = on_outcome
        self._dial_errors: dict[ID, list[str]] = {}
        self._reported: set[ID] = set()  # peers whose current attempt has been reported
        self._driving: set[ID] = set()
        self._relayed_since: dict[ID, float] = {}  # first seen relayed-only (trio clock)
        # When the connection the current attempt upgrades was first seen relayed-only: the
        # loop forgets _relayed_since the moment a direct connection appears, which can be
        # before the attempt that made it has reported.
        self._attempt_since: dict[ID, float] = {}
        self._seq = 0
        self._answering: set[ID] = set()  # peers whose CONNECT this node is answering now
        self._answered: dict[ID, int] = {}  # answers per relayed connection (reset when it goes)
        self._punch_addrs: dict[ID, set[str]] = {}  # the addresses the current attempt dials
        # Per current attempt: (peer_private, own_network) for punch_addr_refusal.
        self._punch_scope: dict[ID, tuple[bool, str]] = {}

    # ---- driving (overrides the library's loop: receiving side only)

    async def _auto_drive_loop(self) -> None:
        while True:
            await trio.sleep(DRIVE_INTERVAL_S)
            now = trio.current_time()
            conns_map = self.host.get_network().get_connections_map()
            for pid in list(self._relayed_since):
                if pid not in conns_map:
                    del self._relayed_since[pid]
            for pid in list(self._answered):
                if pid not in self._relayed_since and pid not in self._answering:
                    del self._answered[pid]
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
        since = self._relayed_since.get(peer_id)
        if since is not None:
            self._attempt_since[peer_id] = since
        try:
            ok = await self.initiate_hole_punch(peer_id)
        except Exception as e:  # the library catches its own; a bug must not end the loop
            ok = False
            log.debug("hole punch to %s: %s", peer_id, e)
        finally:
            self._driving.discard(peer_id)
        try:
            if peer_id not in self._reported:
                # No hole-punch dial was made: the unilateral direct dial (spec step 0)
                # connected, or the exchange over the relayed connection did not complete.
                if ok:
                    reason = "the peer was dialed directly (no hole punch needed)"
                elif not self.host.get_network().get_connections_map().get(peer_id):
                    # The peer left (or the relay closed the circuit) while the attempt ran:
                    # nothing was wrong with the exchange, there was no connection left to
                    # upgrade.
                    reason = "the relayed connection closed before the DCUtR exchange"
                else:
                    reason = (
                        "the DCUtR exchange over the relayed connection did not complete "
                        "(no /libp2p/dcutr on the peer, the stream failed or timed out)"
                    )
                self._report(peer_id, ok, "initiator", reason, [])
        finally:
            self._attempt_since.pop(peer_id, None)

    # ---- outcomes

    async def _perform_hole_punch(
        self, peer_id: ID, addrs: list[Any], as_responder: bool = False
    ) -> bool:
        # Answering the peer's CONNECT (the library's roles, inverted), outside a stream that
        # _handle_dcutr_stream admitted already: admitted here.
        admit = not as_responder and not _in_answer.get()
        if admit and not self._admit(peer_id):
            return False
        try:
            return await self._punch(peer_id, addrs, as_responder)
        finally:
            if admit:
                self._answering.discard(peer_id)

    def _admit(self, peer_id: ID) -> bool:
        """Whether to answer ``peer_id``'s CONNECT now (one at a time, at most
        ``MAX_HOLE_PUNCH_ATTEMPTS`` per relayed connection); if so it is counted and marked
        as being answered (the caller discards it from ``_answering`` when done)."""
        if peer_id in self._answering:
            log.debug("hole punch from %s: one is already being answered", peer_id)
            return False
        if self._answered.get(peer_id, 0) >= MAX_HOLE_PUNCH_ATTEMPTS:
            log.debug("hole punch from %s: answered %d times", peer_id, MAX_HOLE_PUNCH_ATTEMPTS)
            return False
        self._answered[peer_id] = self._answered.get(peer_id, 0) + 1
        self._answering.add(peer_id)
        return True

    async def _handle_dcutr_stream(self, stream: Any) -> None:
        """The library's answer to a peer's CONNECT, admitted first (:meth:`_admit`): a stream
        beyond the bounds is closed before its CONNECT is read, so its addresses are neither
        stored nor dialled."""
        peer_id = stream.muxed_conn.peer_id
        if not self._admit(peer_id):
            with contextlib.suppress(Exception):
                await stream.close()
            return
        token = _in_answer.set(True)
        try:
            await super()._handle_dcutr_stream(stream)
        finally:
            _in_answer.reset(token)
            self._answering.discard(peer_id)

    def _decode_observed_addrs(self, addr_bytes: list[bytes]) -> list[Any]:
        """The peer's CONNECT addresses, at most ``MAX_OBSERVED_ADDRS`` (what the library sends
        of its own): the library stores every one in the peerstore for 10 minutes."""
        return super()._decode_observed_addrs(addr_bytes[:MAX_OBSERVED_ADDRS])

    async def _punch(self, peer_id: ID, addrs: list[Any], as_responder: bool) -> bool:
        self._dial_errors[peer_id] = []
        named = [a for a in addrs if RELAY_MARK not in str(a)]
        scope = (peer_private(named), own_network(self.host))
        self._punch_scope[peer_id] = scope
        # The first distinct addresses the peer named that may be dialled (the peerstore's
        # fill what is left).
        chosen: set[str] = set()
        for a in named:
            if len(chosen) < MAX_PUNCH_ADDRS and self._refusal(a, scope) is None:
                chosen.add(_bare(a))
        self._punch_addrs[peer_id] = chosen
        # The responder's attempt (the initiator's _drive already holds its start).
        answering = peer_id not in self._attempt_since and peer_id in self._relayed_since
        if answering:
            self._attempt_since[peer_id] = self._relayed_since[peer_id]
        ok = False
        try:
            ok = await super()._perform_hole_punch(peer_id, addrs, as_responder)
        finally:
            self._punch_addrs.pop(peer_id, None)
            self._punch_scope.pop(peer_id, None)
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
            if answering:
                self._attempt_since.pop(peer_id, None)
        return ok

    async def _dial_peer(
        self,
        peer_id: ID,
        addr: Any,
        source: tuple[str, int] | None = None,
        as_responder: bool = False,
    ) -> None:
        """The library's dial, recording why it failed (it only logs at DEBUG); an address
        :func:`punch_addr_refusal` refuses is not dialled (the reason is recorded instead)."""
        scope = self._punch_scope.get(peer_id) or (peer_private([addr]), own_network(self.host))
        why = self._refusal(addr, scope)
        if why is not None:
            error = f"{_bare(addr)}: not dialled ({why})"
            errors = self._dial_errors.setdefault(peer_id, [])
            if error not in errors:
                errors.append(error)
            return
        chosen = self._punch_addrs.get(peer_id)
        if chosen is not None and _bare(addr) not in chosen:
            if len(chosen) >= MAX_PUNCH_ADDRS:
                return  # past the cap: not dialled (every round skips it alike)
            chosen.add(_bare(addr))
        store = self.host.get_peerstore()
        try:
            known = list(store.addrs(peer_id))
        except Exception:
            known = []
        network = self.host.get_network()
        token = _in_punch_dial.set(True)
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
        finally:
            _in_punch_dial.reset(token)
        if await self._verify_direct_connection(peer_id):
            self._direct_connections.add(peer_id)

    @staticmethod
    def _refusal(addr: Any, scope: tuple[bool, str]) -> str | None:
        return punch_addr_refusal(addr, peer_private=scope[0], own=scope[1])

    def _report(self, peer_id: ID, ok: bool, role: str, reason: str, addrs: list[str]) -> None:
        self._reported.add(peer_id)
        self._seq += 1
        since = self._attempt_since.get(peer_id, self._relayed_since.get(peer_id))
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
            "since_relayed_s": round(trio.current_time() - since, 3) if since is not None else None,
            # False: no connection to the peer is left (it left, or its relayed connection
            # closed): a failure there is nothing the relay keeps carrying.
            "peer_connected": bool(self.host.get_network().get_connections_map().get(peer_id)),
            "at_ns": time.time_ns(),
        }
        # The daemon logs each outcome (INFO, WARNING for a failure with the peer connected).
        log.debug("hole punch %s %s: %s", "to" if role == "initiator" else "from", peer_id, reason)
        self._on_outcome(outcome)


__all__ = [
    "DRIVE_INTERVAL_S",
    "MAX_PUNCH_ADDRS",
    "HolePuncher",
    "QuietPunchDials",
    "conn_kind",
    "connection_kinds",
    "dial_error",
    "quiet_punch_dials",
]
