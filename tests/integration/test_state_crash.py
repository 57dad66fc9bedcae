"""SIGKILL a process using the state DB: no corruption, claimed work is recoverable.

A child process opens a real state DB file, claims a work item, then either keeps writing
(enqueue / claim / complete / fail / events / heads, one transaction each) or sits inside an
uncommitted transaction big enough to spill pages into the WAL. The parent kills it with SIGKILL
by PID at a random moment, reopens the file and checks ``PRAGMA integrity_check``, the queue's
invariants, and that ``release_claims()`` makes the dead process's claim runnable again.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from node.state import NodeState

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import random, sys, time
    from pathlib import Path
    from node.state import NodeState, backoff_ns

    path, mode, target_did, seed = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    s = NodeState.open(path, time.time_ns)
    s.enqueue("fetch", target_did, None, {"target": True}, dedupe=False)
    item = s.claim(time.time_ns() + 10**12, exclude_dids=set())
    while item is not None and item.did != target_did:
        s.complete(item.id)  # leftovers of earlier runs: finish them, keep going
        item = s.claim(time.time_ns() + 10**12)
    assert item is not None
    if mode == "busy":
        print("claimed", item.id, flush=True)
        n = 0
        while True:
            n += 1
            did = "did:odf:busy%d" % rng.randrange(8)
            s.enqueue("verify", did, "f1620%064x" % n, {"n": n, "pad": "x" * rng.randrange(2000)})
            s.log_event("tick", did, {"n": n})
            s.record_accepted_head(did, 0, n, "f1620%064x" % n, "peer", b"e" * 200)
            got = s.claim(time.time_ns(), kinds=["verify"])
            if got is not None:
                if rng.random() < 0.7:
                    s.complete(got.id)
                else:
                    retry = time.time_ns() + backoff_ns(got.attempts, rand=rng.random)
                    s.fail(got.id, "transient", retry)
    else:
        conn = s.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE work SET state = 'done' WHERE id = ?", (item.id,))
        for i in range(60):  # ~6 MB, above the page cache: pages spill into the WAL
            conn.execute(
                "INSERT INTO events (ts_ns, kind, did, data) VALUES (0, 'uncommitted', NULL, ?)",
                ('{"pad":"%s"}' % ("y" * 100_000),),
            )
        print("claimed", item.id, flush=True)
        time.sleep(600)
    """
)


def _spawn(db: Path, mode: str, did: str, seed: int) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), mode, did, str(seed)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == ["claimed"], f"child did not start: {line!r} rc={proc.poll()}"
    return proc, int(line[1])


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    if proc.stdout is not None:
        proc.stdout.close()


def _integrity(db: Path) -> str:
    conn = sqlite3.connect(str(db))
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_sigkill_while_busy_keeps_db_consistent(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    rng = random.Random(20261121)
    for run in range(5):
        target = f"did:odf:target{run}"
        proc, item_id = _spawn(db, "busy", target, run)
        time.sleep(rng.uniform(0.02, 0.25))  # let it commit a random number of transactions
        _kill(proc)

        assert _integrity(db) == "ok"
        with NodeState.open(db, time.time_ns) as s:
            item = s.work_item(item_id)
            assert item is not None and (item.state, item.did, item.attempts) == (
                "claimed",
                target,
                1,
            )
            claimed = s.work(state="claimed")
            assert len({w.did for w in claimed}) == len(claimed)  # one claim per DID at most
            assert all(w.state in {"pending", "claimed", "done", "failed"} for w in s.work())
            assert s.release_claims() == len(claimed) >= 1
            assert s.work(state="claimed") == []
            again = s.claim(time.time_ns() + 10**12, kinds=["fetch"])
            assert again is not None and again.id == item_id and again.attempts == 2
            s.complete(item_id)
            assert s.conn.execute("SELECT count(*) FROM events").fetchone()[0] > 0


def test_sigkill_inside_open_transaction_loses_only_that_transaction(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    proc, item_id = _spawn(db, "midtx", "did:odf:target", 1)
    wal = db.with_name(db.name + "-wal")
    assert wal.stat().st_size > 2_000_000  # the uncommitted pages really reached the WAL
    _kill(proc)

    assert _integrity(db) == "ok"
    with NodeState.open(db, time.time_ns) as s:
        assert s.events(kind="uncommitted") == []
        item = s.work_item(item_id)
        assert item is not None and item.state == "claimed"  # the uncommitted 'done' is gone
        assert s.release_claims() == 1
        again = s.claim(time.time_ns() + 10**12)
        assert again is not None and again.id == item_id
    assert _integrity(db) == "ok"
