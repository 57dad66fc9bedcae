"""Schema migrations of the node's state database.

The schema version is SQLite's ``PRAGMA user_version`` (0 = empty database). :data:`MIGRATIONS`
is an ordered list; :func:`migrate` applies every migration above the stored version, each in
its own ``BEGIN IMMEDIATE`` transaction together with the version bump, so a crash or an error
mid-migration leaves the database at the previous version with nothing half-applied. A database
whose version is above the newest known migration is refused with :class:`StateVersionTooNew`.

Rules for adding a migration: never edit a released one; append a new one with the next version;
SQL migrations are a tuple of single statements (not ``executescript``, which would commit the
open transaction); callable migrations get the ``sqlite3.Connection`` and run inside the
transaction.

Plain ``sqlite3`` here, not sqlite-utils: sqlite-utils imports numpy whenever it is installed,
about 15 MB of RSS in an idle daemon (issue 15); ``NodeState.db`` still offers a sqlite-utils
view of the file for inspection and tooling.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from node.state.errors import MigrationError, StateVersionTooNew


@dataclass(frozen=True)
class Migration:
    """One schema step: ``version`` (1, 2, ...), a ``name``, then SQL statements or a callable."""

    version: int
    name: str
    apply: Sequence[str] | Callable[[sqlite3.Connection], None]


# Work item states: pending -> claimed -> done | pending (retry) | failed (gave up).
_V1: tuple[str, ...] = (
    """CREATE TABLE subscriptions (
        did TEXT PRIMARY KEY,
        alias TEXT,
        source_hint TEXT,
        created_ns INTEGER NOT NULL,
        updated_ns INTEGER NOT NULL
    )""",
    """CREATE TABLE accepted_heads (
        did TEXT PRIMARY KEY,
        epoch INTEGER NOT NULL CHECK (epoch >= 0),
        sequence INTEGER NOT NULL CHECK (sequence >= 0),
        head TEXT NOT NULL,
        source_peer TEXT,
        envelope BLOB NOT NULL,
        accepted_ns INTEGER NOT NULL
    )""",
    """CREATE TABLE verifications (
        did TEXT NOT NULL,
        head TEXT NOT NULL,
        outcome TEXT NOT NULL
            CHECK (outcome IN ('verified', 'failed', 'nondeterministic', 'error')),
        detail TEXT NOT NULL,
        engine_seconds REAL NOT NULL,
        recorded_ns INTEGER NOT NULL,
        PRIMARY KEY (did, head)
    )""",
    """CREATE TABLE attestations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        content_id TEXT NOT NULL UNIQUE,
        did TEXT NOT NULL,
        head TEXT NOT NULL,
        verdict TEXT NOT NULL,
        signer TEXT NOT NULL,
        envelope BLOB NOT NULL,
        own INTEGER NOT NULL CHECK (own IN (0, 1)),
        received_ns INTEGER NOT NULL
    )""",
    "CREATE INDEX attestations_did_head ON attestations (did, head)",
    """CREATE TABLE disputes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        content_id TEXT NOT NULL UNIQUE,
        did TEXT NOT NULL,
        head TEXT NOT NULL,
        kind TEXT NOT NULL,
        signer TEXT NOT NULL,
        envelope BLOB NOT NULL,
        own INTEGER NOT NULL CHECK (own IN (0, 1)),
        detail TEXT NOT NULL,
        received_ns INTEGER NOT NULL
    )""",
    "CREATE INDEX disputes_did ON disputes (did)",
    """CREATE TABLE equivocation_proofs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        content_id TEXT NOT NULL UNIQUE,
        did TEXT NOT NULL,
        envelope BLOB NOT NULL,
        received_ns INTEGER NOT NULL
    )""",
    "CREATE INDEX equivocation_proofs_did ON equivocation_proofs (did)",
    """CREATE TABLE peers (
        peer_id TEXT PRIMARY KEY,
        addrs TEXT NOT NULL,
        score REAL NOT NULL,
        connected INTEGER NOT NULL CHECK (connected IN (0, 1)),
        first_seen_ns INTEGER NOT NULL,
        last_seen_ns INTEGER NOT NULL
    )""",
    # AUTOINCREMENT: ids are never reused after pruning, so readers can page with after_id.
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts_ns INTEGER NOT NULL,
        kind TEXT NOT NULL,
        did TEXT,
        data TEXT NOT NULL
    )""",
    """CREATE TABLE work (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        did TEXT NOT NULL,
        head TEXT,
        payload TEXT NOT NULL,
        dedupe_key TEXT,
        state TEXT NOT NULL CHECK (state IN ('pending', 'claimed', 'done', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0,
        not_before_ns INTEGER NOT NULL,
        created_ns INTEGER NOT NULL,
        updated_ns INTEGER NOT NULL,
        claimed_ns INTEGER,
        last_error TEXT
    )""",
    # At most one live (pending or claimed) item per dedupe key; NULL keys (dedupe=False) never
    # collide because NULLs are distinct in a UNIQUE index.
    """CREATE UNIQUE INDEX work_live_dedupe ON work (dedupe_key)
        WHERE state IN ('pending', 'claimed')""",
    "CREATE INDEX work_did_state ON work (did, state)",
)


def _v2_indexes(conn: sqlite3.Connection) -> None:
    """Indexes for the two hot queries: ``claim`` (runnable pending items, oldest first) and
    ``events(kind=...)``. A callable, so that the callable path is exercised."""
    conn.execute("CREATE INDEX work_runnable ON work (state, not_before_ns, id)")
    conn.execute("CREATE INDEX events_kind ON events (kind, id)")


# SQLite cannot alter a CHECK constraint: the table is rebuilt with the wider one. An
# "unverifiable" outcome is a head this node checked for integrity but whose transform engine it
# cannot run (kamu's datafusion / flink / risingwave derivatives).
_V3: tuple[str, ...] = (
    """CREATE TABLE verifications_v3 (
        did TEXT NOT NULL,
        head TEXT NOT NULL,
        outcome TEXT NOT NULL
            CHECK (outcome IN ('verified', 'failed', 'nondeterministic', 'error',
                               'unverifiable')),
        detail TEXT NOT NULL,
        engine_seconds REAL NOT NULL,
        recorded_ns INTEGER NOT NULL,
        PRIMARY KEY (did, head)
    )""",
    "INSERT INTO verifications_v3 SELECT * FROM verifications",
    "DROP TABLE verifications",
    "ALTER TABLE verifications_v3 RENAME TO verifications",
)

# "inconclusive": a DataFusion derivative that no pinned DataFusion release reproduced while its
# query is version-sensitive, so the release that produced it is unknown (never a dispute).
_V4: tuple[str, ...] = (
    """CREATE TABLE verifications_v4 (
        did TEXT NOT NULL,
        head TEXT NOT NULL,
        outcome TEXT NOT NULL
            CHECK (outcome IN ('verified', 'failed', 'nondeterministic', 'error',
                               'unverifiable', 'inconclusive')),
        detail TEXT NOT NULL,
        engine_seconds REAL NOT NULL,
        recorded_ns INTEGER NOT NULL,
        PRIMARY KEY (did, head)
    )""",
    "INSERT INTO verifications_v4 SELECT * FROM verifications",
    "DROP TABLE verifications",
    "ALTER TABLE verifications_v4 RENAME TO verifications",
)


# Trust policies (docs/trust.md): a subscription's own policy over the node's [trust] (NULL: the
# node's), the newest trusted head (served and used as an input) and the trust state of the
# newest judged head (JSON), so that a restart neither re-trusts a head nor forgets a dispute.
_V5: tuple[str, ...] = (
    "ALTER TABLE subscriptions ADD COLUMN trust_policy TEXT",
    "ALTER TABLE subscriptions ADD COLUMN trust_k INTEGER CHECK (trust_k IS NULL OR trust_k >= 1)",
    "ALTER TABLE subscriptions ADD COLUMN trust_attesters TEXT",
    "ALTER TABLE subscriptions ADD COLUMN trusted_head TEXT",
    "ALTER TABLE subscriptions ADD COLUMN trust TEXT",
)


# Subscriptions by URL and witnessing (docs/follow.md): the source a dataset is followed from
# (NULL: owner-signed announcements over gossip), the signed observations of sources (ours and
# peers'), and the split views found among them (two observations whose heads do not descend one
# from the other), each naming its two observations by content id.
_V6: tuple[str, ...] = (
    "ALTER TABLE subscriptions ADD COLUMN source_url TEXT",
    """CREATE TABLE observations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        content_id TEXT NOT NULL UNIQUE,
        did TEXT NOT NULL,
        source TEXT NOT NULL,
        head TEXT NOT NULL,
        sequence INTEGER NOT NULL CHECK (sequence >= 0),
        signer TEXT NOT NULL,
        envelope BLOB NOT NULL,
        own INTEGER NOT NULL CHECK (own IN (0, 1)),
        observed_ns INTEGER NOT NULL,
        received_ns INTEGER NOT NULL
    )""",
    "CREATE INDEX observations_did_source ON observations (did, source, id)",
    """CREATE TABLE split_views (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        did TEXT NOT NULL,
        source TEXT NOT NULL,
        first TEXT NOT NULL,
        second TEXT NOT NULL,
        detail TEXT NOT NULL,
        detected_ns INTEGER NOT NULL,
        UNIQUE (first, second)
    )""",
    "CREATE INDEX split_views_did ON split_views (did)",
)


# Flows (docs/flows.md): a dataset's schedule, exactly one trigger per row: every N seconds or
# a cron expression (a polling root), or on a new input head (a derivative); when it is next
# due, and the input heads a transform was last queued for (JSON), so that a restart neither
# runs a flow twice nor misses one.
_V7: tuple[str, ...] = (
    """CREATE TABLE schedules (
        did TEXT PRIMARY KEY,
        every_s REAL CHECK (every_s IS NULL OR every_s > 0),
        cron TEXT,
        on_input INTEGER NOT NULL DEFAULT 0 CHECK (on_input IN (0, 1)),
        next_ns INTEGER,
        inputs_seen TEXT,
        created_ns INTEGER NOT NULL,
        updated_ns INTEGER NOT NULL,
        CHECK ((every_s IS NOT NULL) + (cron IS NOT NULL) + on_input = 1)
    )""",
)


# Node key rotations and revocations (docs/operations.md, "Node key rotation"): the signed
# records this node received or made, so that attestations by a rotated key keep counting as
# their node and a revoked key's stop counting, across restarts. One rotation per old key.
_V8: tuple[str, ...] = (
    """CREATE TABLE key_rotations (
        old_id TEXT PRIMARY KEY,
        new_id TEXT NOT NULL CHECK (new_id <> old_id),
        issued_at_ns INTEGER NOT NULL,
        envelope BLOB NOT NULL,
        received_ns INTEGER NOT NULL
    )""",
    """CREATE TABLE key_revocations (
        node_id TEXT PRIMARY KEY,
        revoked_ns INTEGER NOT NULL,
        envelope BLOB NOT NULL,
        received_ns INTEGER NOT NULL
    )""",
)


# Evidence by block and by signer (docs/trust.md, "Under attack"): a rebuild reads the
# disputes of each block it judges, never the newest N of the dataset (strangers' disputes of
# random blocks pushed a trusted one out), and a node key change rebuilds only the datasets the
# changed key signed evidence of.
_V9: tuple[str, ...] = (
    "CREATE INDEX disputes_did_head ON disputes (did, head, id)",
    "CREATE INDEX disputes_signer ON disputes (signer, did)",
    "CREATE INDEX attestations_signer ON attestations (signer, did)",
)

# Split views, one record per (dataset, source, fork) (docs/follow.md): the fork is the two
# heads, sorted, space-separated; ``seen`` counts the polls that showed it, ``last_seen_ns`` the
# latest. A diverged source used to add a record on every poll: the rows of one fork are merged
# into the oldest (its evidence kept, the count and the latest time carried over).
_V10: tuple[str, ...] = (
    "ALTER TABLE split_views ADD COLUMN fork TEXT",
    "ALTER TABLE split_views ADD COLUMN seen INTEGER NOT NULL DEFAULT 1 CHECK (seen >= 1)",
    "ALTER TABLE split_views ADD COLUMN last_seen_ns INTEGER",
    """UPDATE split_views SET last_seen_ns = detected_ns, fork = coalesce(
        (SELECT min(a.head, b.head) || ' ' || max(a.head, b.head)
           FROM observations a, observations b
          WHERE a.content_id = split_views.first AND b.content_id = split_views.second),
        first || ' ' || second)""",
    """UPDATE split_views SET
        seen = (SELECT count(*) FROM split_views s WHERE s.did = split_views.did
                  AND s.source = split_views.source AND s.fork = split_views.fork),
        last_seen_ns = (SELECT max(s.detected_ns) FROM split_views s
                  WHERE s.did = split_views.did AND s.source = split_views.source
                    AND s.fork = split_views.fork)""",
    """DELETE FROM split_views WHERE id NOT IN
        (SELECT min(id) FROM split_views GROUP BY did, source, fork)""",
    "CREATE UNIQUE INDEX split_views_fork ON split_views (did, source, fork)",
)

# Strangers' evidence is bounded (docs/operations.md, "Strangers' evidence"): ``kept`` marks an
# attestation, dispute or key record of a trusted signer (never evicted, never counted), and
# ``evidence_counts`` holds the number of the others per table in total ('*'), per dataset (its
# did:odf) and per signer (its did:key), kept by triggers, so that checking a cap costs one
# lookup, not a count of the table. Partial indexes find the oldest evictable row at once.
_EVIDENCE_TABLES = ("attestations", "disputes")
_KEY_TABLES = ("key_rotations", "key_revocations")


def _v11_bounded_evidence(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE evidence_counts (
            tbl TEXT NOT NULL,
            scope TEXT NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (tbl, scope)
        ) WITHOUT ROWID"""
    )
    for t in _EVIDENCE_TABLES:
        _bound_evidence_table(conn, t)
    for t in _KEY_TABLES:
        # Records stored before are kept: among them may be the node's own (written by the
        # CLI), which must never be evicted; only gossip stores strangers' under a cap.
        _bound_key_table(conn, t)


def _bound_evidence_table(conn: sqlite3.Connection, t: str) -> None:
    """A ``kept`` column on table ``t`` (with ``did``, ``signer`` and ``own`` columns), partial
    indexes of its evictable rows and their counts in ``evidence_counts`` in total, per dataset
    and per signer, kept by triggers, as migration 11 made them."""
    conn.execute(f"ALTER TABLE {t} ADD COLUMN kept INTEGER NOT NULL DEFAULT 0")
    conn.execute(f"CREATE INDEX {t}_evictable ON {t} (id) WHERE own = 0 AND kept = 0")
    conn.execute(f"CREATE INDEX {t}_evictable_did ON {t} (did, id) WHERE own = 0 AND kept = 0")
    conn.execute(
        f"CREATE INDEX {t}_evictable_signer ON {t} (signer, id) WHERE own = 0 AND kept = 0"
    )
    stranger = "own = 0 AND kept = 0"
    add = f"""INSERT INTO evidence_counts (tbl, scope, n)
                  VALUES ('{t}', '*', 1), ('{t}', new.did, 1), ('{t}', new.signer, 1)
                  ON CONFLICT (tbl, scope) DO UPDATE SET n = n + 1;"""
    sub = f"""UPDATE evidence_counts SET n = n - 1
                    WHERE tbl = '{t}' AND scope IN ('*', old.did, old.signer);
                  DELETE FROM evidence_counts
                    WHERE tbl = '{t}' AND scope IN (old.did, old.signer) AND n <= 0;"""
    conn.execute(
        f"CREATE TRIGGER {t}_counted AFTER INSERT ON {t}"
        f" WHEN new.own = 0 AND new.kept = 0 BEGIN {add} END"
    )
    conn.execute(
        f"CREATE TRIGGER {t}_uncounted AFTER DELETE ON {t}"
        f" WHEN old.own = 0 AND old.kept = 0 BEGIN {sub} END"
    )
    conn.execute(
        f"CREATE TRIGGER {t}_kept AFTER UPDATE OF kept ON {t}"
        f" WHEN old.own = 0 AND old.kept = 0 AND new.kept = 1 BEGIN {sub} END"
    )
    for scope in ("'*'", "did", "signer"):
        conn.execute(
            f"INSERT INTO evidence_counts (tbl, scope, n) SELECT '{t}', {scope}, count(*)"
            f" FROM {t} WHERE {stranger} GROUP BY {scope} HAVING count(*) > 0"
        )


def _bound_key_table(conn: sqlite3.Connection, t: str) -> None:
    """A ``kept`` column on key record table ``t`` and its '*' count in ``evidence_counts``,
    kept by triggers (strangers' records only), as migration 11 made them."""
    conn.execute(f"ALTER TABLE {t} ADD COLUMN kept INTEGER NOT NULL DEFAULT 0")
    conn.execute(f"UPDATE {t} SET kept = 1")
    conn.execute(f"CREATE INDEX {t}_evictable ON {t} (received_ns) WHERE kept = 0")
    conn.execute(
        f"CREATE TRIGGER {t}_counted AFTER INSERT ON {t} WHEN new.kept = 0 BEGIN"
        f" INSERT INTO evidence_counts (tbl, scope, n) VALUES ('{t}', '*', 1)"
        " ON CONFLICT (tbl, scope) DO UPDATE SET n = n + 1; END"
    )
    for event, when in (
        ("DELETE", "old.kept = 0"),
        ("UPDATE OF kept", "old.kept = 0 AND new.kept = 1"),
    ):
        conn.execute(
            f"CREATE TRIGGER {t}_{event.split()[0].lower()}_counted AFTER {event} ON {t}"
            f" WHEN {when} BEGIN UPDATE evidence_counts SET n = n - 1"
            f" WHERE tbl = '{t}' AND scope = '*'; END"
        )
    conn.execute(
        f"INSERT INTO evidence_counts (tbl, scope, n) SELECT '{t}', '*', count(*) FROM {t}"
        " WHERE kept = 0 HAVING count(*) > 0"
    )


# Node key inceptions (docs/operations.md, "Rotating the node key"): a key's first commitment to
# its next key, one per key, bounded like the other key records (strangers' evictable, a
# trusted node's and the node's own kept).
def _v12_key_inceptions(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE key_inceptions (
            node_id TEXT PRIMARY KEY,
            issued_at_ns INTEGER NOT NULL,
            envelope BLOB NOT NULL,
            received_ns INTEGER NOT NULL
        )"""
    )
    _bound_key_table(conn, "key_inceptions")


# Strangers' observations of sources are bounded like their evidence (docs/follow.md, "Witnessing";
# ``[storage] evidence_*``): a ``kept`` column (observations a split view names, and a trusted
# attester's), counts per dataset, signer and in total. Observations stored before are counted
# as strangers' unless the node's own or named by a split view.
def _v13_bounded_observations(conn: sqlite3.Connection) -> None:
    _bound_evidence_table(conn, "observations")
    conn.execute(
        """UPDATE observations SET kept = 1 WHERE content_id IN
             (SELECT first FROM split_views UNION SELECT second FROM split_views)"""
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _V1),
    Migration(2, "indexes for claim and events by kind", _v2_indexes),
    Migration(3, "verification outcome 'unverifiable'", _V3),
    Migration(4, "verification outcome 'inconclusive'", _V4),
    Migration(5, "subscription trust policy, trusted head and trust state", _V5),
    Migration(6, "subscriptions by URL, observations and split views", _V6),
    Migration(7, "flow schedules", _V7),
    Migration(8, "node key rotations and revocations", _V8),
    Migration(9, "evidence by block and by signer", _V9),
    Migration(10, "split views: one per source and fork, counted", _V10),
    Migration(11, "strangers' evidence bounded: kept rows, counts", _v11_bounded_evidence),
    Migration(12, "node key inceptions", _v12_key_inceptions),
    Migration(13, "strangers' observations bounded", _v13_bounded_observations),
)
LATEST_VERSION: int = MIGRATIONS[-1].version


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version stored in the database (``PRAGMA user_version``; 0 when empty)."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(
    conn: sqlite3.Connection,
    *,
    target: int | None = None,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> int:
    """Apply the missing migrations up to ``target`` (default: the newest); return the version.

    Each migration and its version bump run in one ``BEGIN IMMEDIATE`` transaction; the version
    is re-read inside it, so two processes migrating the same file at once apply each step once.
    Raises :class:`StateVersionTooNew` if the database is newer than ``migrations`` knows, and
    :class:`MigrationError` (after rolling back) if a step fails. ``target`` exists for tests
    that need a database at an older version.
    """
    _check_ordered(migrations)
    known = migrations[-1].version if migrations else 0
    goal = known if target is None else target
    if goal > known:
        raise ValueError(f"target version {goal} is above the newest migration {known}")
    current = schema_version(conn)
    if current > known:
        raise StateVersionTooNew(current, known)
    for migration in migrations:
        if migration.version > goal:
            break
        if migration.version <= current:
            # Already applied: no transaction, so opening an up-to-date DB never takes the
            # write lock (a CLI reading the daemon's DB does not wait for the daemon).
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = schema_version(conn)
            if current > known:
                raise StateVersionTooNew(current, known)
            if migration.version <= current:
                conn.execute("COMMIT")
                continue
            if callable(migration.apply):
                migration.apply(conn)
            else:
                for statement in migration.apply:
                    conn.execute(statement)
            # PRAGMA does not take parameters; the version is an int we control.
            conn.execute(f"PRAGMA user_version = {int(migration.version)}")
            conn.execute("COMMIT")
        except StateVersionTooNew:
            _rollback(conn)
            raise
        except Exception as exc:
            _rollback(conn)
            raise MigrationError(migration.version, migration.name, exc) from exc
    return schema_version(conn)


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if the failure left one open."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _check_ordered(migrations: Sequence[Migration]) -> None:
    """Versions must be 1, 2, 3, ... with no gap: a gap would silently skip a step."""
    for index, migration in enumerate(migrations, start=1):
        if migration.version != index:
            raise ValueError(
                f"migration versions must be 1..n in order; found {migration.version} at {index}"
            )
