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
"""

from __future__ import annotations

from typing import Any

import trio
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol


class _NoPeerKeyedCircuits(dict[Any, Any]):
    """Stands in for the library's ``_active_relays``: stores nothing, so the library's per-peer
    cleanup never finds (and closes) another circuit's streams."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


class OwnCircuitsProtocol(CircuitV2Protocol):
    """Circuit relay v2 whose circuits end by their own streams (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As :class:`CircuitV2Protocol`."""
        super().__init__(*args, **kwargs)
        self._active_relays = _NoPeerKeyedCircuits()

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
        try:
            await super()._relay_data(src_stream, dst_stream, peer_id, deadline, circuit_data_limit)
        finally:
            with trio.CancelScope(shield=True):
                await self._close_stream(src_stream)
                await self._close_stream(dst_stream)


__all__ = ["OwnCircuitsProtocol"]
