"""Upgrades survive SIGKILL: a migration killed half-way leaves the previous schema usable.

A home at schema version 1 (the oldest fixture, ``tests/fixtures/homes``) with enough rows that
each migration takes a while is migrated in a child process, which is SIGKILLed at a random
moment inside one of migrations 2, 3 and 4 (10 trials). After each kill the database must be
intact (``integrity_check``), at the version before or after that migration with exactly that
version's schema (nothing half-applied: no leftover table, no missing index), with every row,
and today's code must then migrate it to the newest version with every row. Also: a real
daemon starts on an old home (schema 2, written by sqlite-utils-era code) and serves its data.
"""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_harness import ROOT, NodeProcess

from node.state import LATEST_VERSION, NodeState, migrate, schema_version

pytestmark = pytest.mark.integration

FIXTURES = ROOT / "tests" / "fixtures" / "homes"
sys.path.insert(0, str(FIXTURES))
import make_homes  # noqa: E402

BULK = 40_000
TRIALS = 10

CHILD = """
import functools, sys, time
from pathlib import Path
import node.state.store as store
from node.state.migrations import MIGRATIONS, Migration, migrate

def wrap(m):
    def apply(conn):
        print(f"applying {m.version}", flush=True)
        if callable(m.apply):
            m.apply(conn)
        else:
            for statement in m.apply:
                conn.execute(statement)
        print(f"applied {m.version}", flush=True)  # still before its COMMIT
    return Migration(m.version, m.name, apply)

# The migrations the daemon runs, announcing themselves: the parent kills inside one.
store.migrate = functools.partial(migrate, migrations=tuple(wrap(m) for m in MIGRATIONS))
store.NodeState.open(Path(sys.argv[1]), time.time_ns).close()
print("done", flush=True)
"""


def schema_of(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    return {
        (str(name), str(sql))
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
        )
    }


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {
        t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
        for t in tables
        if not t.startswith("sqlite_")
    }


@pytest.fixture(scope="module")
def bulky_v1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The v1 fixture's state plus ``BULK`` verifications, events and work items."""
    db = tmp_path_factory.mktemp("bulk") / "state.db"
    shutil.copy(FIXTURES / "v1" / "state.db", db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO verifications VALUES (?, ?, 'verified', 'ok', 0.5, ?)",
        ((f"did:odf:fed01{i:064x}", f"f1620{i:064x}", i) for i in range(BULK)),
    )
    conn.executemany(
        "INSERT INTO events (ts_ns, kind, did, data) VALUES (?, 'head.accepted', NULL, '{}')",
        ((i,) for i in range(BULK)),
    )
    conn.executemany(
        "INSERT INTO work (kind, did, payload, state, not_before_ns, created_ns, updated_ns) "
        "VALUES ('verify', ?, '{}', 'done', 0, ?, ?)",
        ((f"did:odf:fed01{i:064x}", i, i) for i in range(BULK)),
    )
    conn.execute("COMMIT")
    conn.close()
    return db


def reference_schemas(tmp: Path) -> dict[int, set[tuple[str, str]]]:
    """The schema today's migrations give at each version."""
    out = {}
    for v in range(1, LATEST_VERSION + 1):
        conn = sqlite3.connect(tmp / f"ref{v}.db", isolation_level=None)
        migrate(conn, target=v)
        out[v] = schema_of(conn)
        conn.close()
    return out


def run_child(db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def timings(db: Path) -> dict[int, float]:
    """How long each migration's statements take here (an undisturbed run)."""
    child = run_child(db)
    assert child.stdout is not None
    starts: dict[int, float] = {}
    took: dict[int, float] = {}
    for line in child.stdout:
        word, _, v = line.strip().partition(" ")
        if word == "applying":
            starts[int(v)] = time.monotonic()
        elif word == "applied":
            took[int(v)] = time.monotonic() - starts[int(v)]
    assert child.wait(120) == 0, child.stderr.read() if child.stderr else ""
    return took


def evidence_recount(conn: sqlite3.Connection) -> dict[tuple[str, str], int]:
    """What migration 11's ``evidence_counts`` must hold: strangers' rows (not own, not kept)
    per table in total ('*'), per dataset and per signer; key records in total."""
    out: dict[tuple[str, str], int] = {}
    for t in ("attestations", "disputes", "observations"):
        for scope in ("'*'", "did", "signer"):
            q = f"SELECT {scope}, count(*) FROM {t} WHERE own = 0 AND kept = 0 GROUP BY {scope}"
            out.update(((t, str(k)), n) for k, n in conn.execute(q) if n)
    for t in ("key_rotations", "key_revocations", "key_inceptions"):
        (n,) = conn.execute(f"SELECT count(*) FROM {t} WHERE kept = 0").fetchone()
        if n:
            out[(t, "*")] = n
    return out


def test_sigkill_during_migrations_leaves_a_usable_home(bulky_v1: Path, tmp_path: Path) -> None:
    refs = reference_schemas(tmp_path)
    base_counts = counts(sqlite3.connect(bulky_v1))
    shutil.copy(bulky_v1, tmp_path / "calibrate.db")
    took = timings(tmp_path / "calibrate.db")
    rng = random.Random(20261126)
    broken: list[str] = []
    inside = 0
    for trial in range(TRIALS):
        db = tmp_path / f"trial{trial}.db"
        shutil.copy(bulky_v1, db)
        target = (2, 3, 4)[trial % 3]
        child = run_child(db)
        assert child.stdout is not None
        seen: list[str] = []
        for line in child.stdout:
            seen.append(line.strip())
            if line.strip() == f"applying {target}":
                break
        time.sleep(rng.uniform(0, took[target] * 0.5))
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        rest = child.stdout.read().split()
        if f"applied {target}" not in " ".join(seen + rest):
            inside += 1  # killed while the migration's statements ran
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            version = schema_version(conn)
            problems = []
            if not ok:
                problems.append("integrity_check failed")
            if version not in (target - 1, target):
                problems.append(f"version {version}, expected {target - 1} or {target}")
            elif schema_of(conn) != refs[version]:
                problems.append(f"schema is not version {version}'s")
            if counts(conn) != base_counts:
                problems.append("rows lost or added")
        finally:
            conn.close()
        with NodeState.open(db, time.time_ns) as st:  # today's code finishes the upgrade
            after = counts(st.conn)
            # Every v1 table keeps its rows; the tables later migrations add start empty.
            kept = {t: n for t, n in after.items() if t in base_counts}
            # evidence_counts is derived (migration 11 counts the strangers' rows already
            # stored): it must agree with a recount of those rows, not be empty.
            added = {
                t: n for t, n in after.items() if t not in base_counts and t != "evidence_counts"
            }
            if schema_version(st.conn) != LATEST_VERSION or kept != base_counts:
                problems.append("the re-run migration lost data")
            if any(added.values()):
                problems.append(f"rows in the tables added since v1: {added}")
            stored = dict(
                ((t, scope), n)
                for t, scope, n in st.conn.execute("SELECT tbl, scope, n FROM evidence_counts")
                if n
            )
            if stored != evidence_recount(st.conn):
                problems.append(f"evidence_counts {stored} != {evidence_recount(st.conn)}")
        if problems:
            broken.append(f"trial {trial} (killed in migration {target}): {problems}")
    print(f"\n{TRIALS} kills, {inside} inside a migration's statements; timings {took}")
    assert broken == [], broken
    # Most kills must land inside a migration (the rest: after its statements, around COMMIT).
    assert inside >= 3, f"only {inside} of {TRIALS} kills landed inside a migration"


def test_daemon_starts_on_a_schema_2_home(tmp_path: Path) -> None:
    home = tmp_path / "old"
    shutil.copytree(FIXTURES / "v2", home)
    (home / "keys" / "node.key").chmod(0o600)
    # The home's own (old) config.toml, with ports and services overridden by the environment.
    node = NodeProcess(
        home,
        "old-home",
        env={
            "ODF_NODE_RPC_PORT": "0",
            "ODF_NODE_HTTP_PORT": "0",
            "ODF_NODE_P2P_ENABLED": "false",
            "ODF_NODE_IPFS_MODE": "none",
        },
    )
    node.launch()
    try:
        node.wait_ready(120)
        subs = node.call("subscriptions.list")
        assert sorted(s["did"] for s in subs) == sorted(make_homes.DID)
        assert len(node.call("attestations.list")) == 2
        assert len(node.call("disputes.list")) == 1
        # (Its finished work items, dated 1970, are pruned by the daemon's housekeeping.)
    finally:
        node.stop()
    with sqlite3.connect(home / "state.db") as conn:
        assert schema_version(conn) == LATEST_VERSION
