"""Schema migrations of the node state DB, on real SQLite files: fresh, upgrade, refusal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlite_utils import Database

from coordinator.errors import OdfNodeError
from node.state import (
    LATEST_VERSION,
    MIGRATIONS,
    Migration,
    MigrationError,
    NodeState,
    StateVersionTooNew,
    migrate,
    schema_version,
)

DID = "did:odf:fed01" + "ab" * 32
HEAD = "f1620" + "cd" * 32

TABLES = {
    "subscriptions",
    "accepted_heads",
    "verifications",
    "attestations",
    "disputes",
    "equivocation_proofs",
    "peers",
    "events",
    "work",
}


def clock() -> int:
    return 1_000


def _indexes(db: Database, table: str) -> set[str]:
    return {index.name for index in db.table(table).indexes}


def test_fresh_database_gets_every_table_and_the_latest_version(tmp_path: Path) -> None:
    state = NodeState.open(tmp_path / "state.db", clock)
    try:
        assert LATEST_VERSION == len(MIGRATIONS) >= 2
        assert schema_version(state.conn) == LATEST_VERSION
        assert set(state.db.table_names()) >= TABLES
        assert "work_runnable" in _indexes(state.db, "work")
        assert "events_kind" in _indexes(state.db, "events")
    finally:
        state.close()
    # Reopening is a no-op: same version, nothing re-applied (re-running v1 would fail).
    again = NodeState.open(tmp_path / "state.db", clock)
    assert schema_version(again.conn) == LATEST_VERSION
    again.close()


def test_v1_database_with_rows_upgrades_without_losing_them(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(str(path), isolation_level=None)
    db = Database(conn)
    assert migrate(db.conn, target=1) == 1
    assert "work_runnable" not in _indexes(db, "work")
    conn.execute(
        "INSERT INTO subscriptions VALUES (?, 'alias', NULL, 1, 1)",
        (DID,),
    )
    conn.execute(
        "INSERT INTO accepted_heads VALUES (?, 2, 7, ?, 'peer', x'0102', 5)",
        (DID, HEAD),
    )
    conn.execute(
        """INSERT INTO work (kind, did, head, payload, dedupe_key, state, attempts,
                             not_before_ns, created_ns, updated_ns, claimed_ns)
           VALUES ('fetch', ?, ?, '{"n":1}', 'k', 'claimed', 1, 0, 1, 1, 1)""",
        (DID, HEAD),
    )
    conn.execute("INSERT INTO events (ts_ns, kind, did, data) VALUES (3, 'boot', NULL, '{}')")
    conn.close()

    state = NodeState.open(path, clock)
    try:
        assert schema_version(state.conn) == LATEST_VERSION
        assert "work_runnable" in _indexes(state.db, "work")
        sub = state.subscription(DID)
        assert sub is not None and sub.alias == "alias"
        head = state.accepted_head(DID)
        assert head is not None
        assert (head.epoch, head.sequence, head.head, head.envelope) == (2, 7, HEAD, b"\x01\x02")
        [item] = state.work()
        assert (item.kind, item.state, item.payload, item.attempts) == (
            "fetch",
            "claimed",
            {"n": 1},
            1,
        )
        assert [e.kind for e in state.events()] == ["boot"]
        # The upgraded DB is fully usable: the old claim can be released and re-claimed.
        assert state.release_claims() == 1
        again = state.claim(10)
        assert again is not None and again.id == item.id and again.attempts == 2
    finally:
        state.close()


def test_newer_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    NodeState.open(path, clock).close()
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    conn.close()

    with pytest.raises(StateVersionTooNew) as info:
        NodeState.open(path, clock)
    assert isinstance(info.value, OdfNodeError)
    assert (info.value.found, info.value.known) == (LATEST_VERSION + 1, LATEST_VERSION)
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION + 1
    conn.close()


def test_failing_migration_rolls_back_entirely(tmp_path: Path) -> None:
    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x INTEGER)")
        conn.execute("INSERT INTO half_done VALUES (1)")
        raise RuntimeError("disk says no")

    migrations = (MIGRATIONS[0], Migration(2, "broken", broken))
    conn = sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None)
    db = Database(conn)
    with pytest.raises(MigrationError) as info:
        migrate(db.conn, migrations=migrations)
    assert info.value.version == 2
    assert schema_version(db.conn) == 1
    assert "half_done" not in db.table_names()
    assert not conn.in_transaction
    conn.close()


def test_sql_migration_failure_rolls_back_its_earlier_statements(tmp_path: Path) -> None:
    migrations = (
        MIGRATIONS[0],
        Migration(2, "bad sql", ("CREATE TABLE extra (x INTEGER)", "NOT SQL AT ALL")),
    )
    db = Database(sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None))
    with pytest.raises(MigrationError):
        migrate(db.conn, migrations=migrations)
    assert schema_version(db.conn) == 1
    assert "extra" not in db.table_names()
    db.close()


def test_migration_list_must_be_numbered_without_gaps(tmp_path: Path) -> None:
    db = Database(sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None))
    with pytest.raises(ValueError, match=r"1\.\.n"):
        migrate(db.conn, migrations=(MIGRATIONS[0], Migration(3, "gap", ())))
    with pytest.raises(ValueError, match="above the newest"):
        migrate(db.conn, target=LATEST_VERSION + 1)
    assert schema_version(db.conn) == 0
    db.close()


def test_v3_keeps_verifications_and_accepts_unverifiable(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    old = Database(sqlite3.connect(db_path, isolation_level=None))
    migrate(old.conn, target=2)
    old.conn.execute(
        "INSERT INTO verifications VALUES ('did:odf:fed01aa', 'f1620bb', 'verified', '', 1.5, 7)"
    )
    with pytest.raises(sqlite3.IntegrityError):
        old.conn.execute(
            "INSERT INTO verifications VALUES ('did:odf:fed01aa', 'f1620cc', 'unverifiable', "
            "'', 0, 8)"
        )
    assert migrate(old.conn) == LATEST_VERSION >= 3
    rows = old.conn.execute("SELECT did, head, outcome FROM verifications").fetchall()
    assert rows == [("did:odf:fed01aa", "f1620bb", "verified")]
    old.conn.execute(
        "INSERT INTO verifications VALUES ('did:odf:fed01aa', 'f1620cc', 'unverifiable', '', 0, 8)"
    )
