"""The relay service's circuits, each ended on its own (py-libp2p 0.8.1's HOP side, corrected).

py-libp2p 0.8.1's ``libp2p.relay.circuit_v2.protocol.CircuitV2Protocol`` keeps the streams of
its relayed circuits in ``_active_relays``, a dict keyed by *peer*: by the source peer when a
CONNECT arrives, then by the destination peer once the destination answered. When either
direction of a circuit ends, its pump closes the two streams stored under its own peer id --
which are the streams of whichever circuit last wrote that key, not necessarily its own:

* A relay carrying two circuits to one destination (a subscriber that left and the one that
  replaced it, or two subscribers of one owner behind NAT) closes the *newer* circuit when the
  older one ends. Measured in the NAT lab (``tests/bench/bench_nat.py --punch-only``, docs/nat.md
  "Hole punching"): a fresh subscriber's relayed connections to both owners died about a second
  after they were made, when the relay tore down the previous subscriber's circuits; the owners'
  hole punches then found no connection ("the DCUtR exchange ... did not complete").
* The circuit that ended is not closed when its key was overwritten: its other half stays open
  until something is written into it. An owner kept a relayed connection to a subscriber that
  had stopped for 5-20 s, and started hole punches over it.

:class:`OwnCircuitsProtocol` keeps the library's CONNECT handling, limits and accounting, and
ends each circuit by its own two streams: when one direction ends (EOF, reset, a limit), both
streams of that circuit are closed (reset if closing times out), and no other circuit is
touched. ``_active_relays`` stays empty (nothing reads it but the cleanup replaced here, and the
library's service stop, which the cancelled pumps now cover).

It also bounds what the relay carries for others where the library does not (measured in
docs/nat.md, "The relay under abuse"):

* **Circuits in total and per peer** (:class:`CircuitAccounts`): the library caps circuits per
  *destination* reservation only (``max_circuit_conns``), so 16 reservations allowed 16 x 16
  circuits, and a source without a reservation was not capped at all. A CONNECT beyond
  ``max_circuits`` open circuits, or beyond ``max_circuits_per_peer`` circuits to or from either
  end, is refused with ``RESOURCE_LIMIT_EXCEEDED``.
* **A circuit's duration, idle or not**: the library checks the deadline only after a read
  returns, so a circuit nobody writes into was held open for good. Each read now waits at most
  until the circuit's deadline.
* **Bytes per peer and in total per window**: the library budgets bytes per circuit only, and a
  peer opened a new circuit when one ran out. Every byte relayed counts against both ends'
  ``peer_bytes`` and against ``total_bytes`` in the current ``window_s``; a circuit whose
  budget is spent is closed.
* **Reservations of peers that left** (:class:`ConnectedReservations`): the library counted a
  reservation against ``max_reservations`` until its TTL (an hour) even after its peer
  disconnected, so 16 fresh identities that reserved and left locked the relay for an hour. A
  reservation is valid only while its peer is connected (circuit relay v2 spec); one of a peer
  that left frees its slot.
* **Reservations per IP address** (:class:`ConnectedReservations`, ``reservations_per_ip``):
  peer ids cost nothing to make, so one host reserving with fresh identities took all
  ``max_reservations`` slots. A new reservation is refused (``RESOURCE_LIMIT_EXCEEDED``) while
  peers connected from the same IP address (direct connections; a relayed one's address is
  its relay's and is not counted) hold ``reservations_per_ip`` of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.resources import RelayResourceManager


@dataclass(frozen=True, slots=True)
class CircuitLimits:
    """What the relay carries for others beyond the library's per-circuit limits
    (``[p2p] relay_*``, module docstring)."""

    max_circuits: int = 16
    max_circuits_per_peer: int = 4
    circuit_duration_s: float = 600.0
    peer_bytes: int = 256 << 20
    total_bytes: int = 1 << 30
    window_s: float = 3600.0


class CircuitAccounts:
    """Open circuits and relayed bytes, per peer and in total (sans-IO; ``clock`` in seconds).

    Bytes are counted in fixed windows of ``window_s`` (every counter restarts when the clock
    enters the next window), so the state is one entry per peer that had a circuit in the
    current window."""

    def __init__(self, limits: CircuitLimits, clock: Callable[[], float]) -> None:
        self.limits = limits
        self._clock = clock
        self.open_total = 0
        self._open: dict[str, int] = {}
        self._window = -1
        self._bytes: dict[str, int] = {}
        self.bytes_total = 0

    def _roll(self) -> None:
        window = int(self._clock() // self.limits.window_s)
        if window != self._window:
            self._window = window
            self._bytes.clear()
            self.bytes_total = 0

    def refusal(self, src: str, dst: str) -> str | None:
        """Why a circuit ``src`` -> ``dst`` may not open now, or None."""
        lim = self.limits
        self._roll()
        if self.open_total >= lim.max_circuits:
            return f"relay circuits full ({lim.max_circuits} open)"
        for peer in (src, dst):
            if self._open.get(peer, 0) >= lim.max_circuits_per_peer:
                return f"peer {peer} has {lim.max_circuits_per_peer} circuits open"
            if self._bytes.get(peer, 0) >= lim.peer_bytes:
                return f"peer {peer} spent its relay byte budget ({lim.peer_bytes} B)"
        if self.bytes_total >= lim.total_bytes:
            return f"relay byte budget spent ({lim.total_bytes} B)"
        return None

    def open(self, src: str, dst: str) -> str | None:
        """Count a circuit ``src`` -> ``dst`` as open; or why not (nothing counted)."""
        why = self.refusal(src, dst)
        if why is None:
            self.open_total += 1
            for peer in (src, dst):
                self._open[peer] = self._open.get(peer, 0) + 1
        return why

    def close(self, src: str, dst: str) -> None:
        """A circuit counted by :meth:`open` ended."""
        self.open_total = max(0, self.open_total - 1)
        for peer in (src, dst):
            left = self._open.get(peer, 0) - 1
            if left > 0:
                self._open[peer] = left
            else:
                self._open.pop(peer, None)

    def charge(self, src: str, dst: str, n: int) -> bool:
        """Count ``n`` bytes relayed between ``src`` and ``dst``; False when that goes past
        either peer's budget or the total one (the bytes are not relayed)."""
        lim = self.limits
        self._roll()
        if self.bytes_total + n > lim.total_bytes:
            return False
        if any(self._bytes.get(p, 0) + n > lim.peer_bytes for p in (src, dst)):
            return False
        self.bytes_total += n
        for peer in (src, dst):
            self._bytes[peer] = self._bytes.get(peer, 0) + n
        return True


class ConnectedReservations(RelayResourceManager):
    """py-libp2p's reservations, of connected peers only: a reservation of a peer that left no
    longer counts against ``max_reservations`` (module docstring); and at most ``per_ip`` held
    by peers connected from one IP address."""

    def __init__(self, limits: Any, host: Any = None, per_ip: int = 4) -> None:
        """As :class:`RelayResourceManager`; ``per_ip`` caps reservations per IP address."""
        super().__init__(limits, host)
        self.per_ip = per_ip

    def _clean_expired(self) -> None:
        super()._clean_expired()
        for peer in [p for p in self._reservations if not self._is_peer_connected(p)]:
            del self._reservations[peer]

    def can_accept_reservation(self, peer_id: Any) -> bool:
        """The library's check (the total, after dropping expired and departed peers' slots),
        then the per-IP cap for a peer without a reservation. O(reservations): at most
        ``max_reservations`` connection lookups."""
        if not super().can_accept_reservation(peer_id):
            return False
        existing = self._reservations.get(peer_id)
        if existing is not None and not existing.is_expired():
            return True  # a refresh
        ip = self._peer_ip(peer_id)
        if ip is None:
            return True
        same = sum(1 for p in self._reservations if p != peer_id and self._peer_ip(p) == ip)
        return same < self.per_ip

    def _peer_ip(self, peer_id: Any) -> str | None:
        """The IP address ``peer_id`` is directly connected from (None: unknown, or relayed
        only: a relayed connection's remote address is its relay's, shared by all)."""
        from p2p.relay_conn import is_relayed_conn

        if self.host is None:
            return None
        try:
            conns = (getattr(self.host.get_network(), "connections", {}) or {}).get(peer_id)
        except Exception:  # the library's own lookup fails open the same way
            return None
        if conns is None:
            return None
        for conn in conns if isinstance(conns, (list, tuple, set)) else (conns,):
            try:
                remote = conn.muxed_conn.get_remote_address()
            except Exception:  # connection types differ in what they expose
                continue
            if remote is not None and not is_relayed_conn(conn):
                return str(remote[0])
        return None


@dataclass(slots=True)
class _Circuit:
    src: str
    dst: str
    deadline: float


class _Metered:
    """The stream a pump reads from: a read waits at most until the circuit's deadline and
    charges what it read to the circuit's budgets; at the deadline or past a budget it returns
    ``b""`` (the end of the stream), which ends the circuit."""

    def __init__(self, stream: Any, circuit: _Circuit, accounts: CircuitAccounts) -> None:
        self._stream = stream
        self._circuit = circuit
        self._accounts = accounts

    async def read(self, n: int = -1) -> bytes:
        c = self._circuit
        with trio.move_on_after(max(0.0, c.deadline - trio.current_time())):
            data = await self._stream.read(n)
            if data and not self._accounts.charge(c.src, c.dst, len(data)):
                return b""
            return bytes(data or b"")
        return b""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _NoPeerKeyedCircuits(dict[Any, Any]):
    """Stands in for the library's ``_active_relays``: stores nothing, so the library's per-peer
    cleanup never finds (and closes) another circuit's streams."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


class OwnCircuitsProtocol(CircuitV2Protocol):
    """Circuit relay v2 whose circuits end by their own streams (module docstring)."""

    def __init__(
        self,
        *args: Any,
        circuits: CircuitLimits | None = None,
        reservations_per_ip: int = 4,
        **kwargs: Any,
    ) -> None:
        """As :class:`CircuitV2Protocol`; ``circuits`` bounds circuits and bytes beyond it,
        ``reservations_per_ip`` the reservations held from one IP address."""
        super().__init__(*args, **kwargs)
        self._active_relays = _NoPeerKeyedCircuits()
        self.resource_manager = ConnectedReservations(
            self.limits, self.host, per_ip=reservations_per_ip
        )
        self.accounts = CircuitAccounts(circuits or CircuitLimits(), trio.current_time)
        self._circuits: dict[int, _Circuit] = {}  # id(source stream) -> its circuit

    async def _handle_connect(self, stream: Any, msg: Any) -> None:
        """The library's CONNECT, within :attr:`accounts`: refused with
        ``RESOURCE_LIMIT_EXCEEDED`` beyond them; counted while the circuit is open."""
        from libp2p.peer.id import ID
        from libp2p.relay.circuit_v2.protocol_buffer import StatusCode

        src, dst = str(stream.muxed_conn.peer_id), str(ID(msg.peer.id))
        why = self.accounts.open(src, dst)
        if why is not None:
            await self._send_status(stream, StatusCode.RESOURCE_LIMIT_EXCEEDED, why)
            await stream.reset()
            return
        deadline = trio.current_time() + self.accounts.limits.circuit_duration_s
        self._circuits[id(stream)] = _Circuit(src, dst, deadline)
        try:
            await super()._handle_connect(stream, msg)
        finally:
            self._circuits.pop(id(stream), None)
            self.accounts.close(src, dst)

    async def _relay_data(
        self,
        src_stream: Any,
        dst_stream: Any,
        peer_id: Any,
        deadline: float | None = None,
        circuit_data_limit: list[int] | None = None,
    ) -> None:
        """One direction of a circuit (the library's pump); when it ends, for whatever reason
        (including cancellation when the host stops), close both streams of this circuit: the
        other direction then ends too."""
        circuit = self._circuits.get(id(src_stream)) or self._circuits.get(id(dst_stream))
        reader: Any = (
            src_stream if circuit is None else _Metered(src_stream, circuit, self.accounts)
        )
        try:
            await super()._relay_data(reader, dst_stream, peer_id, deadline, circuit_data_limit)
        finally:
            with trio.CancelScope(shield=True):
                await self._close_stream(src_stream)
                await self._close_stream(dst_stream)


__all__ = [
    "CircuitAccounts",
    "CircuitLimits",
    "ConnectedReservations",
    "OwnCircuitsProtocol",
]
