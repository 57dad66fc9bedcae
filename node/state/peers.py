"""Known peers of ``NodeState``: addresses, score, connection state, first and last seen."""

from __future__ import annotations

import json

from node.app.rows import Peer
from node.state.base import PEER_SELECT, StateCore, peer_from_row
from node.state.errors import InvalidStateValue


class PeerBook(StateCore):
    """Known peers."""

    # -- peers ------------------------------------------------------------------------------

    def upsert_peer(
        self,
        peer_id: str,
        addrs: list[str] | None = None,
        score: float | None = None,
        connected: bool = False,
    ) -> Peer:
        """Insert or update a peer and set ``last_seen_ns`` to now. None for ``addrs`` or
        ``score`` keeps the stored value (an empty list / 0.0 for a new peer)."""
        if not peer_id:
            raise InvalidStateValue("peer_id must not be empty")
        now = self._clock()
        addrs_json = None if addrs is None else json.dumps(list(addrs))
        with self._tx() as c:
            c.execute(
                """INSERT INTO peers
                     (peer_id, addrs, score, connected, first_seen_ns, last_seen_ns)
                   VALUES (?, coalesce(?, '[]'), coalesce(?, 0.0), ?, ?, ?)
                   ON CONFLICT (peer_id) DO UPDATE SET
                     addrs = coalesce(?, addrs), score = coalesce(?, score),
                     connected = excluded.connected, last_seen_ns = excluded.last_seen_ns""",
                (peer_id, addrs_json, score, int(bool(connected)), now, now, addrs_json, score),
            )
        peer = self.peer(peer_id)
        assert peer is not None
        return peer

    def peer(self, peer_id: str) -> Peer | None:
        """One peer, if known."""
        rows = self._rows(PEER_SELECT + " WHERE peer_id = ?", (peer_id,))
        return peer_from_row(rows[0]) if rows else None

    def peers(self) -> list[Peer]:
        """All known peers, most recently seen first."""
        return [
            peer_from_row(r)
            for r in self._rows(PEER_SELECT + " ORDER BY last_seen_ns DESC, peer_id")
        ]
