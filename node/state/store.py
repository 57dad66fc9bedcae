"""``NodeState``: the daemon's durable state in one SQLite file.

Threading: a ``NodeState`` owns a single ``sqlite3`` connection and must be used only from the
thread that opened it (``check_same_thread`` is left on, so misuse raises instead of
corrupting). Every method is synchronous; a write costs an fsync. The daemon therefore never
calls it on its event loop: ``node/adapters/state.py`` (:class:`ThreadedState`) runs one
``NodeState`` on a writer thread, grouping concurrent writes into one transaction with
:meth:`NodeState.batch`, and another on a reader thread (WAL lets reads proceed during a
commit). Tests and the offline CLI call it directly.

Durability: WAL journal with ``synchronous=FULL`` (a committed transaction survives power loss),
``foreign_keys=ON``, and a busy timeout so a CLI process reading the same file while the daemon
writes waits instead of failing. Every write is one ``BEGIN IMMEDIATE`` transaction (or one
savepoint of a batch, committed together), so each state transition of a work item is atomic:
after a crash (SIGKILL at any moment) the file is consistent and an item is either claimed or
not. ``release_claims()`` at start-up returns the items a dead process had claimed to
``pending`` — that, plus ``not_before_ns``, is how pending work resumes across restarts.

Memory: each connection's page cache is :data:`CACHE_KIB` (SQLite's default is 2,000 KiB). The
daemon holds three connections (writer, reader, status), and a cache fills with the pages it
touches as the file grows with what is kept by design (attestations, verifications, events):
at the default the daemon's memory grew with ``state.db`` for hours (``make bench-longrun``:
SQLite's share of it ~4 MB an hour, docs/operations.md). Its queries are indexed lookups and
the file is in the operating system's cache, so a small page cache costs little.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.clock import Clock
from node.app.rows import (
    Attestation,
    Dispute,
    EquivocationProof,
    EvidenceCaps,
    KeyInceptionRecord,
    KeyRevocationRecord,
    KeyRotationRecord,
    ObservationRecord,
    SplitView,
)
from node.state.base import (
    OBS_COLUMNS,
    OBS_SELECT,
    check_did,
    check_head,
    checked_limit,
    chunks,
    equal_filters,
    observation_from_row,
)
from node.state.errors import InvalidStateValue
from node.state.events import EventLog
from node.state.heads import SubscriptionsAndHeads
from node.state.migrations import migrate
from node.state.peers import PeerBook
from node.state.work import WorkQueue

if TYPE_CHECKING:
    from sqlite_utils import Database

BUSY_TIMEOUT_MS = 5000


def content_id(envelope: bytes) -> str:
    """Content id of an envelope: its sha3-256 multihash, multibase base16 (``f1620...``)."""
    return "f1620" + hashlib.sha3_256(envelope).hexdigest()


class NodeState(SubscriptionsAndHeads, PeerBook, EventLog, WorkQueue):
    """The node's persistent state (see the module docstring for threading and durability)."""

    def __init__(self, conn: sqlite3.Connection, clock: Clock) -> None:
        """Wrap an open connection and migrate it; prefer :meth:`open` / :meth:`in_memory`."""
        self._conn = conn
        self._clock = clock
        self._batching = False
        try:
            migrate(conn)
        except BaseException:
            conn.close()
            raise

    @classmethod
    def open(cls, path: Path, clock: Clock, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> NodeState:
        """Open (creating if needed) the state DB at ``path`` and bring its schema up to date.

        ``busy_timeout_ms`` bounds how long a statement waits for a lock (a reader on the event
        loop passes a short one).

        Raises :class:`node.state.errors.StateVersionTooNew` for a DB from a newer odf-node.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: the sqlite3 module never opens transactions behind our back;
        # every transaction here is an explicit BEGIN IMMEDIATE.
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout_ms / 1000)
        try:
            _configure(conn, wal=True, busy_timeout_ms=busy_timeout_ms)
        except BaseException:
            conn.close()
            raise
        return cls(conn, clock)

    @classmethod
    def in_memory(cls, clock: Clock) -> NodeState:
        """A private in-memory state DB (tests, simulations); same schema, no durability."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        _configure(conn, wal=False)
        return cls(conn, clock)

    @property
    def conn(self) -> sqlite3.Connection:
        """The underlying connection (read-only inspection, tests, tooling; same thread only)."""
        return self._conn

    @property
    def db(self) -> Database:
        """A sqlite-utils view of the same connection (inspection, tests, tooling).

        Imported here, not at module level: sqlite-utils imports numpy, which an idle daemon
        does not otherwise load.
        """
        from sqlite_utils import Database

        return Database(self._conn)

    def close(self) -> None:
        """Close the connection (a WAL checkpoint happens on last close)."""
        self._conn.close()

    def __enter__(self) -> NodeState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group the writes made inside into one transaction (one commit, one fsync).

        Each write inside stays atomic on its own: it runs in a SAVEPOINT, so a write that
        raises is undone alone and the others still commit when the batch ends. If the commit
        itself fails, none of them happened. Used by the threaded adapter's writer thread
        (``node/adapters/state.py``) for group commit.
        """
        if self._batching:
            raise RuntimeError("batches do not nest")
        self._conn.execute("BEGIN IMMEDIATE")
        self._batching = True
        try:
            yield
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        finally:
            self._batching = False
        self._conn.execute("COMMIT")

    # -- attestations, disputes, equivocation proofs ----------------------------------------

    def add_attestation(
        self,
        did: str,
        head: str,
        verdict: str,
        signer: str,
        envelope: bytes,
        own: bool,
        *,
        trusted: Sequence[str] = (),
        caps: EvidenceCaps | None = None,
    ) -> bool:
        """Store an attestation; False if the same envelope (by content id) is already stored,
        or the caps evicted it at once. ``trusted``: the keys whose evidence of ``did`` is kept
        (never evicted nor counted); ``caps``: bound the others' (:meth:`_bound`)."""
        check_did(did)
        check_head(head)
        with self._tx() as c:
            self._keep(c, "attestations", did, trusted)
            cur = c.execute(
                """INSERT INTO attestations
                     (content_id, did, head, verdict, signer, envelope, own, received_ns, kept)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (content_id) DO NOTHING""",
                (
                    content_id(envelope),
                    did,
                    head,
                    verdict,
                    signer,
                    bytes(envelope),
                    int(bool(own)),
                    self._clock(),
                    int(signer in trusted),
                ),
            )
            return cur.rowcount > 0 and self._bound(c, "attestations", cur.lastrowid, caps)

    def attestations(
        self, did: str | None = None, head: str | None = None, limit: int = 100
    ) -> list[Attestation]:
        """Attestations, newest first, optionally for one DID and/or head, at most ``limit``."""
        where, params = equal_filters(("did", did), ("head", head))
        rows = self._rows(
            "SELECT id, content_id, did, head, verdict, signer, envelope, own, received_ns"
            f" FROM attestations{where} ORDER BY id DESC LIMIT ?",
            [*params, checked_limit(limit)],
        )
        return [
            Attestation(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8])
            for r in rows
        ]

    def attestations_of_head(
        self, did: str, head: str, signers: Sequence[str] = (), limit: int = 100
    ) -> list[Attestation]:
        """The attestations of ``head`` of ``did``, oldest first: the node's own, every one
        signed by one of ``signers`` (the trusted attesters' keys) and the first ``limit``
        others, so that no number of strangers' attestations can hide a trusted one."""
        select = (
            "SELECT id, content_id, did, head, verdict, signer, envelope, own, received_ns"
            " FROM attestations WHERE did = ? AND head = ?"
        )
        rows = list(
            self._rows(
                select + " AND own = 0 ORDER BY id LIMIT ?", (did, head, checked_limit(limit))
            )
        )
        rows += self._rows(select + " AND own = 1", (did, head))
        ids = {r[0] for r in rows}
        for chunk in chunks(sorted(set(signers)), 500):
            marks = ", ".join("?" * len(chunk))
            extra = self._rows(select + f" AND signer IN ({marks})", (did, head, *chunk))
            rows += [r for r in extra if r[0] not in ids]
            ids |= {r[0] for r in extra}
        rows.sort(key=lambda r: int(r[0]))
        return [
            Attestation(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8])
            for r in rows
        ]

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
        with self._tx() as c:
            cur = c.execute(
                """INSERT INTO key_rotations
                     (old_id, new_id, issued_at_ns, envelope, received_ns, kept)
                   VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (old_id) """
                + conflict,
                (
                    old_id,
                    new_id,
                    issued_at_ns,
                    bytes(envelope),
                    self._clock(),
                    int(kept := kept or cap is None),
                ),
            )
            if kept:
                c.execute("UPDATE key_rotations SET kept = 1 WHERE old_id = ?", (old_id,))
            return cur.rowcount > 0 and self._bound_keys(c, "key_rotations", "old_id", old_id, cap)

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
        with self._tx() as c:
            cur = c.execute(
                """INSERT INTO key_revocations (node_id, revoked_ns, envelope, received_ns, kept)
                   VALUES (?, ?, ?, ?, ?) ON CONFLICT (node_id) DO UPDATE SET
                     revoked_ns = excluded.revoked_ns, envelope = excluded.envelope
                   WHERE excluded.revoked_ns < key_revocations.revoked_ns""",
                (
                    node_id,
                    revoked_ns,
                    bytes(envelope),
                    self._clock(),
                    int(kept := kept or cap is None),
                ),
            )
            if kept:
                c.execute("UPDATE key_revocations SET kept = 1 WHERE node_id = ?", (node_id,))
            stored = cur.rowcount > 0
            return stored and self._bound_keys(c, "key_revocations", "node_id", node_id, cap)

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
        with self._tx() as c:
            cur = c.execute(
                """INSERT INTO key_inceptions (node_id, issued_at_ns, envelope, received_ns, kept)
                   VALUES (?, ?, ?, ?, ?) ON CONFLICT (node_id) DO NOTHING""",
                (
                    node_id,
                    issued_at_ns,
                    bytes(envelope),
                    self._clock(),
                    int(kept := kept or cap is None),
                ),
            )
            if kept:
                c.execute("UPDATE key_inceptions SET kept = 1 WHERE node_id = ?", (node_id,))
            stored = cur.rowcount > 0
            return stored and self._bound_keys(c, "key_inceptions", "node_id", node_id, cap)

    def key_inceptions(self) -> list[KeyInceptionRecord]:
        """Every stored key inception, oldest received first."""
        rows = self._rows(
            "SELECT node_id, issued_at_ns, envelope, received_ns, kept FROM key_inceptions"
            " ORDER BY received_ns, node_id"
        )
        return [KeyInceptionRecord(r[0], r[1], bytes(r[2]), r[3], bool(r[4])) for r in rows]

    def add_dispute(
        self,
        did: str,
        head: str,
        kind: str,
        signer: str,
        envelope: bytes,
        own: bool,
        detail: str = "",
        *,
        trusted: Sequence[str] = (),
        caps: EvidenceCaps | None = None,
    ) -> bool:
        """Store a dispute; False if the same envelope (by content id) is already stored, or
        the caps evicted it at once. ``trusted`` and ``caps`` as for :meth:`add_attestation`."""
        check_did(did)
        check_head(head)
        with self._tx() as c:
            self._keep(c, "disputes", did, trusted)
            cur = c.execute(
                """INSERT INTO disputes
                     (content_id, did, head, kind, signer, envelope, own, detail, received_ns,
                      kept)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (content_id) DO NOTHING""",
                (
                    content_id(envelope),
                    did,
                    head,
                    kind,
                    signer,
                    bytes(envelope),
                    int(bool(own)),
                    detail,
                    self._clock(),
                    int(signer in trusted),
                ),
            )
            return cur.rowcount > 0 and self._bound(c, "disputes", cur.lastrowid, caps)

    def keep_evidence(self, did: str, trusted: Sequence[str]) -> None:
        """Mark every stored attestation, dispute and observation of ``did`` by a ``trusted``
        key kept (never evicted nor counted from now on): at start-up and when a dataset's trusted
        attesters change, so that no eviction of another dataset's flood reaches them before
        evidence of ``did`` arrives again."""
        check_did(did)
        with self._tx() as c:
            for table in ("attestations", "disputes", "observations"):
                self._keep(c, table, did, trusted)

    @staticmethod
    def _keep(c: sqlite3.Connection, table: str, did: str, trusted: Sequence[str]) -> None:
        """Mark the stored evidence of ``did`` by ``trusted`` keys kept, before any eviction: a
        key the operator trusts since it was stored must not lose it (an index lookup per key,
        nothing to update once marked)."""
        for chunk in chunks(sorted(set(trusted)), 500):
            marks = ", ".join("?" * len(chunk))
            c.execute(
                f"UPDATE {table} SET kept = 1"
                f" WHERE signer IN ({marks}) AND did = ? AND own = 0 AND kept = 0",
                (*chunk, did),
            )

    @staticmethod
    def _bound(
        c: sqlite3.Connection, table: str, row_id: int | None, caps: EvidenceCaps | None
    ) -> bool:
        """Hold strangers' rows of ``table`` within ``caps`` after the insert of ``row_id``:
        past the cap of its signer, of its dataset or in total, the oldest strangers' rows of
        that scope go (kept and own rows are neither counted nor evicted). The counts are kept
        by triggers (state migration 11), so a check is a primary-key lookup and an eviction
        the first entry of a partial index: O(1) in the number of rows stored. Whether the
        new row is still there."""
        if caps is None or row_id is None:
            return True
        row = c.execute(f"SELECT did, signer FROM {table} WHERE id = ?", (row_id,)).fetchone()
        did, signer = row[0], row[1]
        for scope, cap, where, params in (
            (signer, caps.per_signer, " AND signer = ?", (signer,)),
            (did, caps.per_dataset, " AND did = ?", (did,)),
            ("*", caps.total, "", ()),
        ):
            got = c.execute(
                "SELECT n FROM evidence_counts WHERE tbl = ? AND scope = ?", (table, scope)
            ).fetchone()
            excess = (got[0] if got else 0) - cap
            if excess > 0:
                c.execute(
                    f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table}"
                    f" WHERE own = 0 AND kept = 0{where} ORDER BY id LIMIT ?)",
                    (*params, excess),
                )
        return c.execute(f"SELECT 1 FROM {table} WHERE id = ?", (row_id,)).fetchone() is not None

    def evidence_count(self, table: str, scope: str = "*") -> int:
        """Strangers' rows of ``table`` (attestations, disputes, key_rotations,
        key_revocations) counted against the caps: in total (``*``), of a dataset or a
        signer."""
        rows = self._rows(
            "SELECT n FROM evidence_counts WHERE tbl = ? AND scope = ?", (table, scope)
        )
        return int(rows[0][0]) if rows else 0

    def disputes(self, did: str | None = None, limit: int = 100) -> list[Dispute]:
        """Disputes, newest first, optionally for one DID, at most ``limit``."""
        where, params = equal_filters(("did", did))
        rows = self._rows(
            "SELECT id, content_id, did, head, kind, signer, envelope, own, detail, received_ns"
            f" FROM disputes{where} ORDER BY id DESC LIMIT ?",
            [*params, checked_limit(limit)],
        )
        return [
            Dispute(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8], r[9])
            for r in rows
        ]

    def disputed_blocks(self, did: str) -> list[str]:
        """The distinct blocks of ``did`` that others (not this node) disputed."""
        rows = self._rows(
            "SELECT DISTINCT head FROM disputes WHERE did = ? AND own = 0 ORDER BY head", (did,)
        )
        return [r[0] for r in rows]

    def disputes_of_block(
        self, did: str, head: str, signers: Sequence[str] = (), limit: int = 100
    ) -> list[Dispute]:
        """Others' disputes of block ``head`` of ``did``, oldest first: every one signed by
        one of ``signers`` (the trusted attesters' keys) and the first ``limit`` others, so that
        no number of strangers' disputes can hide a trusted one."""
        select = (
            "SELECT id, content_id, did, head, kind, signer, envelope, own, detail, received_ns"
            " FROM disputes WHERE did = ? AND head = ? AND own = 0"
        )
        rows = list(self._rows(select + " ORDER BY id LIMIT ?", (did, head, checked_limit(limit))))
        ids = {r[0] for r in rows}
        for chunk in chunks(sorted(set(signers)), 500):
            marks = ", ".join("?" * len(chunk))
            extra = self._rows(select + f" AND signer IN ({marks})", (did, head, *chunk))
            rows += [r for r in extra if r[0] not in ids]
            ids |= {r[0] for r in extra}
        rows.sort(key=lambda r: int(r[0]))
        return [
            Dispute(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8], r[9])
            for r in rows
        ]

    def datasets_signed_by(self, signers: Sequence[str]) -> list[str]:
        """The datasets with an attestation or a dispute by one of ``signers`` (node ids)."""
        out: set[str] = set()
        for chunk in chunks(sorted(set(signers)), 500):
            marks = ", ".join("?" * len(chunk))
            rows = self._rows(
                f"SELECT did FROM attestations WHERE signer IN ({marks})"
                f" UNION SELECT did FROM disputes WHERE signer IN ({marks})",
                (*chunk, *chunk),
            )
            out |= {r[0] for r in rows}
        return sorted(out)

    # -- observations and split views (docs/follow.md) ---------------------------------------

    def add_observation(
        self,
        did: str,
        source: str,
        head: str,
        sequence: int,
        signer: str,
        envelope: bytes,
        own: bool,
        observed_ns: int,
        *,
        trusted: Sequence[str] = (),
        caps: EvidenceCaps | None = None,
    ) -> bool:
        """Store a signed observation; False if the same envelope is already stored, or the
        caps evicted it at once. Strangers' observations are bounded like their evidence
        (:meth:`add_attestation`: ``trusted`` keys' are kept, ``caps`` bound the others'; the
        node's own, and those a split view names, are never evicted)."""
        check_did(did)
        check_head(head)
        with self._tx() as c:
            self._keep(c, "observations", did, trusted)
            cur = c.execute(
                """INSERT INTO observations (content_id, did, source, head, sequence, signer,
                                             envelope, own, observed_ns, received_ns, kept)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (content_id) DO NOTHING""",
                (
                    content_id(envelope),
                    did,
                    source,
                    head,
                    int(sequence),
                    signer,
                    bytes(envelope),
                    int(bool(own)),
                    int(observed_ns),
                    self._clock(),
                    int(signer in trusted),
                ),
            )
            return cur.rowcount > 0 and self._bound(c, "observations", cur.lastrowid, caps)

    def observations(
        self, did: str | None = None, source: str | None = None, limit: int = 100
    ) -> list[ObservationRecord]:
        """Observations, newest first, optionally of one DID and source, at most ``limit``."""
        where, params = equal_filters(("did", did), ("source", source))
        rows = self._rows(
            f"{OBS_SELECT}{where} ORDER BY id DESC LIMIT ?", [*params, checked_limit(limit)]
        )
        return [observation_from_row(r) for r in rows]

    def add_split_view(self, did: str, source: str, first: str, second: str, detail: str) -> bool:
        """Record a split view between two stored observations (content ids, in either order).

        One record per (dataset, source, fork), the fork being the two heads: a fork recorded
        before (by any pair of observations of those heads) has its ``seen`` counter and
        ``last_seen_ns`` bumped instead, so a source that stays diverged is one record, not one
        per poll. True if the record is new.
        """
        check_did(did)
        a, b = sorted((first, second))
        now = self._clock()
        with self._tx() as c:
            heads = sorted(
                str(r[0])
                for r in c.execute(
                    "SELECT head FROM observations WHERE content_id IN (?, ?)", (a, b)
                )
            )
            fork = " ".join(heads) if len(heads) == 2 else f"{a} {b}"
            # The two observations are the split view's evidence: never evicted by the caps.
            c.execute("UPDATE observations SET kept = 1 WHERE content_id IN (?, ?)", (a, b))
            cur = c.execute(
                """UPDATE split_views SET seen = seen + 1, last_seen_ns = ?
                   WHERE did = ? AND source = ? AND fork = ?""",
                (now, did, source, fork),
            )
            if cur.rowcount > 0:
                return False
            cur = c.execute(
                """INSERT INTO split_views (did, source, first, second, detail, detected_ns,
                                            fork, seen, last_seen_ns)
                   VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?) ON CONFLICT (first, second) DO NOTHING""",
                (did, source, a, b, detail, now, fork, now),
            )
        return cur.rowcount > 0

    def split_views(self, did: str | None = None, limit: int = 100) -> list[SplitView]:
        """Split views, newest first, with both observations (optionally of one DID)."""
        where, params = equal_filters(("s.did", did))
        cols = ", ".join(f"{t}.{c}" for t in ("a", "b") for c in OBS_COLUMNS)
        rows = self._rows(
            f"SELECT s.id, s.did, s.source, s.detail, s.detected_ns, s.seen, s.last_seen_ns,"
            f" {cols} FROM split_views s"
            " JOIN observations a ON a.content_id = s.first"
            f" JOIN observations b ON b.content_id = s.second{where}"
            " ORDER BY s.id DESC LIMIT ?",
            [*params, checked_limit(limit)],
        )
        n = len(OBS_COLUMNS)
        return [
            SplitView(
                int(r[0]),
                r[1],
                r[2],
                observation_from_row(tuple(r[7 : 7 + n])),
                observation_from_row(tuple(r[7 + n : 7 + 2 * n])),
                r[3],
                int(r[4]),
                seen=int(r[5]),
                last_seen_ns=int(r[6]),
            )
            for r in rows
        ]

    def add_equivocation_proof(self, did: str, envelope: bytes) -> bool:
        """Store an equivocation proof; False if the same envelope is already stored."""
        check_did(did)
        with self._tx() as c:
            cur = c.execute(
                """INSERT INTO equivocation_proofs (content_id, did, envelope, received_ns)
                   VALUES (?, ?, ?, ?) ON CONFLICT (content_id) DO NOTHING""",
                (content_id(envelope), did, bytes(envelope), self._clock()),
            )
        return cur.rowcount > 0

    def equivocation_proofs(self, did: str | None = None) -> list[EquivocationProof]:
        """Equivocation proofs in the order received, optionally for one DID."""
        where, params = equal_filters(("did", did))
        rows = self._rows(
            "SELECT id, content_id, did, envelope, received_ns"
            f" FROM equivocation_proofs{where} ORDER BY id",
            params,
        )
        return [EquivocationProof(r[0], r[1], r[2], bytes(r[3]), r[4]) for r in rows]

    # -- status -----------------------------------------------------------------------------

    def status_counts(self) -> tuple[int, dict[str, int]]:
        """:meth:`subscription_count` and :meth:`pending_counts` in one call (``node.status``:
        one hand-over to the reader thread instead of two)."""
        return self.subscription_count(), self.pending_counts()


# -- helpers ----------------------------------------------------------------------------------


CACHE_KIB = 256
"""Page cache of each connection, KiB (the module docstring says why it is small)."""


def _configure(
    conn: sqlite3.Connection, *, wal: bool, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> None:
    """Connection pragmas; see the module docstring for why each is set."""
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    if wal:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"could not enable WAL journal mode (got {mode!r})")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA cache_size = -{int(CACHE_KIB)}")
