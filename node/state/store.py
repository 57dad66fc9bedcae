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

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.clock import Clock
from node.state.events import EventLog
from node.state.heads import SubscriptionsAndHeads
from node.state.keys import KeyRecords
from node.state.migrations import migrate
from node.state.observations import Observations
from node.state.peers import PeerBook
from node.state.work import WorkQueue

if TYPE_CHECKING:
    from sqlite_utils import Database

BUSY_TIMEOUT_MS = 5000


class NodeState(SubscriptionsAndHeads, KeyRecords, Observations, PeerBook, EventLog, WorkQueue):
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
