"""Every state schema version odf-node has written opens with today's code, migrates, and keeps
its data; a home from a newer release is refused, naming its version, and left untouched.

The homes are checked-in fixtures built by the code of the commits that shipped each version
(``tests/fixtures/homes/make_homes.py``).
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from node.home import NodeHome
from node.state import LATEST_VERSION, NodeState, StateVersionTooNew, schema_version

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "homes"
sys.path.insert(0, str(FIXTURES_DIR))
import make_homes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def copy_home(name: str, tmp: Path) -> NodeHome:
    """A writable copy of a fixture home (git keeps no 0600 mode: the key gets it back)."""
    home = tmp / name
    shutil.copytree(FIXTURES_DIR / name, home)
    (home / "keys" / "node.key").chmod(0o600)
    return home


def test_every_shipped_schema_version_has_a_fixture() -> None:
    versions = {f.version for f in make_homes.FIXTURES}
    assert versions == set(range(1, LATEST_VERSION + 1))
    for f in make_homes.FIXTURES:
        # closing(): a connection left to the garbage collector deletes the WAL files it made
        # while a later test copies the fixture directory.
        with closing(sqlite3.connect(FIXTURES_DIR / f.name / "state.db")) as conn:
            assert schema_version(conn) == f.version, f.name


def rows(conn: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]


@pytest.mark.parametrize("fixture", make_homes.FIXTURES, ids=lambda f: f.name)
def test_old_home_opens_migrates_and_keeps_its_data(
    fixture: make_homes.Fixture, tmp_path: Path
) -> None:
    home = NodeHome(copy_home(fixture.name, tmp_path))
    assert home.initialized
    home.config()  # the config.toml that `init` wrote then still loads
    from coordinator.identity import PrivateKey

    assert home.node_key().seed() == PrivateKey.from_seed(make_homes.NODE_SEED).seed()
    with NodeState.open(home.path / "state.db", time.time_ns) as st:
        assert schema_version(st.conn) == LATEST_VERSION
        expected = {
            **make_homes.rows_for(fixture.version),
            "verifications": make_homes.verification_rows(fixture.version),
        }
        for table, want in expected.items():
            got = rows(st.conn, table)
            # Columns a later migration added are NULL in rows an older version wrote, but for
            # those it fills in (make_homes.migrated).
            width = len(got[0]) if got else 0
            filled = [make_homes.migrated(table, r) for r in want]
            padded = [r + (None,) * (width - len(r)) for r in filled]
            assert got == sorted(padded, key=lambda r: (r[0], r[1])), table
        # The typed API reads them too, and the migrated schema takes today's values.
        subs = st.subscriptions()
        assert [s.did for s in subs] == sorted(make_homes.DID)
        if fixture.version >= 5:  # the trust columns read back through the typed API
            sub = next(s for s in subs if s.did == make_homes.DID[1])
            assert sub.override.policy == "quorum" and sub.override.k == 1
            assert sub.trusted_head == make_homes.HEAD[1]
            assert sub.trust is not None and sub.trust.state == "trusted"
        if fixture.version >= 6:  # a URL subscription and its split view read back typed
            sub = next(s for s in subs if s.did == make_homes.DID[4])
            assert sub.source_url == "http://127.0.0.1:8090/fixture"
            (split,) = st.split_views()
            assert {split.first.head, split.second.head} == set(make_homes.HEAD[:2])
            assert (split.seen, split.last_seen_ns) == (1, 12000)
        if fixture.version >= 7:  # the flow triggers read back through the typed API
            by_did = {s.did: s for s in st.schedules()}
            assert by_did[make_homes.DID[0]].every_s == 3600.0
            assert by_did[make_homes.DID[1]].cron == "*/5 * * * *"
            assert by_did[make_homes.DID[2]].inputs_seen == {make_homes.DID[0]: make_homes.HEAD[0]}
        if fixture.version >= 8:  # the node key records read back through the typed API
            (rot,) = st.key_rotations()
            assert (rot.old_id, rot.new_id) == (
                make_homes.TRUST_ATTESTERS[0],
                make_homes.ROTATED_TO,
            )
            assert [r.node_id for r in st.key_revocations()] == [make_homes.TRUST_ATTESTERS[0]]
        else:  # migration 8 adds its tables empty
            assert st.key_rotations() == [] and st.key_revocations() == []
        assert {w.state for w in st.work()} == {"done", "pending", "claimed", "failed"}
        st.record_verification(make_homes.DID[5], "f1620" + "ee" * 32, "inconclusive", "x", 0.1)
        assert st.release_claims() == 1  # the claimed item a dead daemon left behind
        assert st.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert st.conn.execute("PRAGMA foreign_key_check").fetchall() == []


def dump(db: Path) -> list[str]:
    """The schema and every row, as SQL (what a migration would have changed)."""
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_newer_home_is_refused_naming_its_version(tmp_path: Path) -> None:
    home = copy_home("v4", tmp_path)
    db = home / "state.db"
    newer = LATEST_VERSION + 3
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    before = dump(db)
    with pytest.raises(StateVersionTooNew) as err:
        NodeState.open(db, time.time_ns)
    assert f"schema version {newer} is newer than this odf-node knows ({LATEST_VERSION})" in str(
        err.value
    )
    # The CLI says the same in one line, and nothing was migrated backwards.
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", "subscriptions", "--home", str(home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert f"schema version {newer} is newer" in proc.stderr, proc.stderr
    with sqlite3.connect(db) as conn:
        assert schema_version(conn) == newer
    assert dump(db) == before
