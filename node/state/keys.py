"""Node key records of ``NodeState``: rotations, revocations and inceptions, bounded like other
evidence."""

from __future__ import annotations

import sqlite3

from node.app.rows import (
    KeyInceptionRecord,
    KeyRevocationRecord,
    KeyRotationRecord,
)
from node.state.errors import InvalidStateValue
from node.state.evidence import EvidenceStore


class KeyRecords(EvidenceStore):
    """Node key rotations, revocations and inceptions."""

    # -- node key records -------------------------------------------------------------------

    def add_key_rotation(
        self,
        old_id: str,
        new_id: str,
        issued_at_ns: int,
        envelope: bytes,
        *,
        replace: bool = False,
        kept: bool = False,
        cap: int | None = None,
    ) -> bool:
        """Store a rotation record; False if ``old_id`` already has one (the first stays),
        unless ``replace``: the caller decided that this record voids the stored one
        (pre-rotation, ``node/app/identities.py``). ``kept``: the record names a trusted key
        (never evicted); ``cap``: at most that many others, the oldest evicted first. Without
        a cap the record is kept (the node's own, written by the CLI or its daemon)."""
        if not old_id or not new_id or old_id == new_id:
            raise InvalidStateValue("a key rotation needs two different node ids")
        conflict = (
            """DO UPDATE SET new_id = excluded.new_id, issued_at_ns = excluded.issued_at_ns,
                 envelope = excluded.envelope, received_ns = excluded.received_ns
               WHERE key_rotations.envelope <> excluded.envelope"""
            if replace
            else "DO NOTHING"
        )
        return self._add_key_record(
            "key_rotations",
            "old_id",
            old_id,
            """INSERT INTO key_rotations (old_id, new_id, issued_at_ns, envelope, received_ns, kept)
               VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (old_id) """
            + conflict,
            (new_id, issued_at_ns, bytes(envelope)),
            kept=kept,
            cap=cap,
        )

    def _add_key_record(
        self,
        table: str,
        key: str,
        record: str,
        insert: str,
        values: tuple[object, ...],
        *,
        kept: bool,
        cap: int | None,
    ) -> bool:
        """Run ``insert`` on the record ``key = record``: ``record``, ``values``, the time
        received and the kept flag, set when ``kept`` or without a cap (the node's own);
        strangers' held within ``cap`` (:meth:`_bound_keys`). Whether ``insert`` stored the
        record and it is still there."""
        kept = kept or cap is None
        with self._tx() as c:
            cur = c.execute(insert, (record, *values, self._clock(), int(kept)))
            if kept:
                c.execute(f"UPDATE {table} SET kept = 1 WHERE {key} = ?", (record,))
            return cur.rowcount > 0 and self._bound_keys(c, table, key, record, cap)

    @staticmethod
    def _bound_keys(
        c: sqlite3.Connection, table: str, key: str, value: str, cap: int | None
    ) -> bool:
        """Hold strangers' key records of ``table`` within ``cap``, the oldest received evicted
        first (as :meth:`_bound`); whether the record ``key = value`` is still there."""
        if cap is None:
            return True
        got = c.execute(
            "SELECT n FROM evidence_counts WHERE tbl = ? AND scope = '*'", (table,)
        ).fetchone()
        excess = (got[0] if got else 0) - cap
        if excess > 0:
            c.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table}"
                " WHERE kept = 0 ORDER BY received_ns, rowid LIMIT ?)",
                (excess,),
            )
        return c.execute(f"SELECT 1 FROM {table} WHERE {key} = ?", (value,)).fetchone() is not None

    def key_rotations(self) -> list[KeyRotationRecord]:
        """Every stored rotation record, oldest first."""
        rows = self._rows(
            "SELECT old_id, new_id, issued_at_ns, envelope, received_ns, kept FROM key_rotations"
            " ORDER BY received_ns, old_id"
        )
        return [KeyRotationRecord(r[0], r[1], r[2], bytes(r[3]), r[4], bool(r[5])) for r in rows]

    def add_key_revocation(
        self,
        node_id: str,
        revoked_ns: int,
        envelope: bytes,
        *,
        kept: bool = False,
        cap: int | None = None,
    ) -> bool:
        """Store a revocation; False if ``node_id`` is already revoked (the earliest stays).
        ``kept`` and ``cap`` as for :meth:`add_key_rotation`."""
        if not node_id:
            raise InvalidStateValue("node_id must not be empty")
        return self._add_key_record(
            "key_revocations",
            "node_id",
            node_id,
            """INSERT INTO key_revocations (node_id, revoked_ns, envelope, received_ns, kept)
               VALUES (?, ?, ?, ?, ?) ON CONFLICT (node_id) DO UPDATE SET
                 revoked_ns = excluded.revoked_ns, envelope = excluded.envelope
               WHERE excluded.revoked_ns < key_revocations.revoked_ns""",
            (revoked_ns, bytes(envelope)),
            kept=kept,
            cap=cap,
        )

    def key_revocations(self) -> list[KeyRevocationRecord]:
        """Every stored revocation."""
        rows = self._rows(
            "SELECT node_id, revoked_ns, envelope, received_ns, kept FROM key_revocations"
            " ORDER BY revoked_ns, node_id"
        )
        return [KeyRevocationRecord(r[0], r[1], bytes(r[2]), r[3], bool(r[4])) for r in rows]

    def add_key_inception(
        self,
        node_id: str,
        issued_at_ns: int,
        envelope: bytes,
        *,
        kept: bool = False,
        cap: int | None = None,
    ) -> bool:
        """Store a key inception; False if ``node_id`` already has one (the first stays: the
        caller refused a different one). ``kept`` and ``cap`` as for
        :meth:`add_key_rotation`."""
        if not node_id:
            raise InvalidStateValue("node_id must not be empty")
        return self._add_key_record(
            "key_inceptions",
            "node_id",
            node_id,
            """INSERT INTO key_inceptions (node_id, issued_at_ns, envelope, received_ns, kept)
               VALUES (?, ?, ?, ?, ?) ON CONFLICT (node_id) DO NOTHING""",
            (issued_at_ns, bytes(envelope)),
            kept=kept,
            cap=cap,
        )

    def key_inceptions(self) -> list[KeyInceptionRecord]:
        """Every stored key inception, oldest received first."""
        rows = self._rows(
            "SELECT node_id, issued_at_ns, envelope, received_ns, kept FROM key_inceptions"
            " ORDER BY received_ns, node_id"
        )
        return [KeyInceptionRecord(r[0], r[1], bytes(r[2]), r[3], bool(r[4])) for r in rows]
