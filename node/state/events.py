"""The event log of ``NodeState``: append, read after an id or the most recent, prune."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

from node.app.rows import EventRecord
from node.state.base import StateCore, checked_limit, equal_filters, to_json
from node.state.errors import InvalidStateValue


class EventLog(StateCore):
    """The append-only event log."""

    # -- event log --------------------------------------------------------------------------

    def log_event(self, kind: str, did: str | None, data: Mapping[str, object]) -> int:
        """Append an event (``data`` must be JSON-serialisable); return its id (increasing,
        never reused, also after :meth:`prune_events`)."""
        if not kind:
            raise InvalidStateValue("event kind must not be empty")
        payload = to_json(data, "event data")
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO events (ts_ns, kind, did, data) VALUES (?, ?, ?, ?)",
                (self._clock(), kind, did, payload),
            )
        return int(cast(int, cur.lastrowid))

    def events(
        self, after_id: int = 0, limit: int = 100, kind: str | None = None
    ) -> list[EventRecord]:
        """Events with id > ``after_id``, oldest first, at most ``limit`` (page by the last id)."""
        where, params = equal_filters(("kind", kind))
        where = (where + " AND" if where else " WHERE") + " id > ?"
        rows = self._rows(
            f"SELECT id, ts_ns, kind, did, data FROM events{where} ORDER BY id LIMIT ?",
            [*params, after_id, checked_limit(limit)],
        )
        return [EventRecord(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def recent_events(self, limit: int = 100, kind_prefix: str | None = None) -> list[EventRecord]:
        """The newest ``limit`` events (of kinds starting with ``kind_prefix``), newest first."""
        where, params = "", []
        if kind_prefix:
            # substr, not LIKE: a prefix holding % or _ must not act as a pattern.
            where, params = " WHERE substr(kind, 1, ?) = ?", [len(kind_prefix), kind_prefix]
        rows = self._rows(
            f"SELECT id, ts_ns, kind, did, data FROM events{where} ORDER BY id DESC LIMIT ?",
            [*params, checked_limit(limit)],
        )
        return [EventRecord(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def prune_events(self, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` events; return how many were deleted."""
        if keep_last < 0:
            raise InvalidStateValue(f"keep_last must be >= 0, got {keep_last}")
        with self._tx() as c:
            if keep_last == 0:
                cur = c.execute("DELETE FROM events")
            else:
                cur = c.execute(
                    """DELETE FROM events WHERE id < (
                         SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?)""",
                    (keep_last - 1,),
                )
        return cur.rowcount
